//! Flow control from the command line: pause, hold and resume work; show rates, pauses and fair shares; weight a
//! key.

use outbox::flow::{self, Target};
use sea_orm::DatabaseConnection;
use serde_json::json;

use crate::cli::{FlowArgs, PauseArgs, ResumeArgs, WeightArgs};
use crate::fail::{Result, code};
use crate::render::{self, Format, time};

/// What `--queue`, `--kind` and `--key` name.
fn target(args: &ResumeArgs) -> Target {
    match (&args.queue, &args.kind, &args.key) {
        (Some(queue), _, _) => Target::queue(queue.clone()),
        (None, Some(kind), Some(key)) => Target::key(kind.clone(), key.clone()),
        (None, Some(kind), None) => Target::kind(kind.clone()),
        // clap requires one of --queue and --kind.
        (None, None, _) => Target::queue(String::new()),
    }
}

pub(crate) async fn pause(db: &DatabaseConnection, args: PauseArgs, format: Format) -> Result<u8> {
    let target = target(&args.what);
    let until = args.hold_for.and_then(|d| {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        chrono::DateTime::from_timestamp_millis(chrono::Utc::now().timestamp_millis().saturating_add(ms))
    });
    match until {
        Some(until) => flow::hold(db, &target, until, args.reason.as_deref()).await?,
        None => flow::pause(db, &target, args.reason.as_deref()).await?,
    }
    match format {
        Format::Json => render::json(&json!({"paused": target, "until": until}))?,
        Format::Table => match until {
            Some(until) => println!("held {target} until {}", time(until)),
            None => println!("paused {target}: no claim takes its jobs until `outbox resume`"),
        },
    }
    Ok(code::OK)
}

pub(crate) async fn resume(db: &DatabaseConnection, args: ResumeArgs, format: Format) -> Result<u8> {
    let target = target(&args);
    let was = flow::resume(db, &target).await?;
    match format {
        Format::Json => render::json(&json!({"resumed": target, "was_paused": was}))?,
        Format::Table if was => println!("resumed {target}"),
        Format::Table => println!("{target} was not paused"),
    }
    Ok(code::OK)
}

pub(crate) async fn weight(db: &DatabaseConnection, args: WeightArgs, format: Format) -> Result<u8> {
    flow::set_weight(db, &args.kind, &args.key, args.weight).await?;
    match format {
        Format::Json => render::json(&json!({"kind": args.kind, "key": args.key, "weight": args.weight}))?,
        Format::Table => println!("key `{}` of kind `{}` now weighs {}", args.key, args.kind, args.weight),
    }
    Ok(code::OK)
}

pub(crate) async fn show(db: &DatabaseConnection, args: FlowArgs, format: Format) -> Result<u8> {
    let paused = flow::paused(db).await?;
    let rates = flow::rates(db).await?;
    let mut shares = Vec::new();
    for kind in &args.kind {
        shares.push((kind.clone(), flow::shares(db, kind).await?));
    }
    if format == Format::Json {
        let shares: serde_json::Map<String, serde_json::Value> =
            shares.into_iter().map(|(k, s)| (k, json!(s))).collect();
        render::json(&json!({"paused": paused, "rates": rates, "shares": shares}))?;
        return Ok(code::OK);
    }
    let rows: Vec<Vec<String>> = paused
        .iter()
        .map(|p| {
            vec![
                p.target.to_string(),
                p.until.map_or_else(|| "when resumed".to_owned(), time),
                time(p.since),
                p.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    super::inspect::section("Paused and held", &["WHAT", "ENDS", "SINCE", "REASON"], &rows);
    let rows: Vec<Vec<String>> = rates
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.key.clone().unwrap_or_else(|| "-".into()),
                r.rate.clone(),
                format!("{:.1}/{}", r.available.max(0.0), r.burst),
            ]
        })
        .collect();
    super::inspect::section("Rates", &["NAME", "KEY", "RATE", "AVAILABLE"], &rows);
    for (kind, shares) in shares {
        let rows: Vec<Vec<String>> = shares
            .iter()
            .map(|s| {
                vec![
                    s.key.clone(),
                    s.weight.to_string(),
                    s.backlog.to_string(),
                    s.running.to_string(),
                    format!("{:.0}%", s.share * 100.0),
                ]
            })
            .collect();
        super::inspect::section(
            &format!("Fair share of {kind}"),
            &["KEY", "WEIGHT", "BACKLOG", "RUNNING", "SHARE"],
            &rows,
        );
    }
    Ok(code::OK)
}
