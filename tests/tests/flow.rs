//! Flow control on both backends: rates counted in jobs and in cost, per kind and per key; pauses and holds;
//! a handler rate limited upstream; fair share between keys. Each check reads when the handlers ran.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::KindOpts;
use outbox::flow::{self, Rate, Target};
use outbox::prelude::*;
use outbox_tests::{TestDb, conformance, scalar};
use serde::{Deserialize, Serialize};

/// A job of a tenant with a cost.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Call {
    tenant: String,
    n: u32,
    tokens: u32,
}

/// `Call` under a rate per tenant, counting tokens.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct KeyedCall {
    tenant: String,
    n: u32,
    tokens: u32,
}

/// `Call` shared out fairly between tenants.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct FairCall {
    tenant: String,
    n: u32,
}

impl outbox::Job for Call {
    const KIND: &'static str = "flow_call";
    const OPTS: KindOpts = KindOpts { cost: Some("{tokens}"), ..KindOpts::DEFAULT };
}

impl outbox::Job for KeyedCall {
    const KIND: &'static str = "flow_keyed_call";
    const OPTS: KindOpts = KindOpts {
        rate: Some(Rate::per(20, Duration::from_secs(1)).with_burst(5)),
        rate_key: Some("{tenant}"),
        ..KindOpts::DEFAULT
    };
}

impl outbox::Job for FairCall {
    const KIND: &'static str = "flow_fair_call";
    const OPTS: KindOpts = KindOpts { fair: Some("{tenant}"), ..KindOpts::DEFAULT };
}

/// When each handler began (since `t0`), with its tenant and cost.
type Log = Arc<Mutex<Vec<(Duration, String, u32)>>>;

/// The most that began in any window of `width` (cost when `cost`).
fn most_in_window(log: &[(Duration, String, u32)], width: Duration, cost: bool) -> u64 {
    let mut most = 0;
    for (i, (start, _, _)) in log.iter().enumerate() {
        let sum: u64 = log[i..]
            .iter()
            .take_while(|(at, _, _)| *at < *start + width)
            .map(|(_, _, c)| if cost { u64::from(*c) } else { 1 })
            .sum();
        most = most.max(sum);
    }
    most
}

/// The claims of `kind`'s jobs, at the time each drew from its bucket (`claimed_at`, since the first), with the
/// job's key and cost: what the database enforces. Handler starts follow their claims by a delay that grows on a
/// loaded machine, so a window of starts may hold more than a window of claims.
async fn claims_of(t: &TestDb, kind: &str) -> Vec<(Duration, String, u32)> {
    let (claimed_ms, integer) = match t.backend {
        outbox_tests::Backend::Sqlite => ("claimed_at", "BIGINT"),
        outbox_tests::Backend::MySql => ("claimed_at", "SIGNED"),
        outbox_tests::Backend::Postgres => ("(EXTRACT(EPOCH FROM claimed_at) * 1000)::int8", "BIGINT"),
    };
    let sql = format!(
        "SELECT COALESCE(flow_key, ''), CAST(COALESCE(cost, 1) AS {integer}), {claimed_ms} FROM outbox_jobs \
         WHERE kind = '{kind}' AND claimed_at IS NOT NULL"
    );
    use sea_orm::ConnectionTrait;
    let rows = t.db.query_all_raw(sea_orm::Statement::from_string(t.db.get_database_backend(), sql)).await;
    let mut out: Vec<(i64, String, u32)> = rows
        .expect("claims")
        .into_iter()
        .map(|r| {
            let cost: i64 = r.try_get_by_index(1).expect("cost");
            (
                r.try_get_by_index(2).expect("at"),
                r.try_get_by_index(0).expect("key"),
                u32::try_from(cost).expect("cost"),
            )
        })
        .collect();
    out.sort();
    let first = out.first().map_or(0, |c| c.0);
    out.into_iter().map(|(at, key, cost)| (Duration::from_millis((at - first).unsigned_abs()), key, cost)).collect()
}

conformance!(a_rate_holds_in_every_window_and_counts_cost, mysql);
async fn a_rate_holds_in_every_window_and_counts_cost(t: TestDb) {
    // 600 cost units a second, a burst of 100; jobs cost 1 to 100: 3 seconds of work after the burst.
    let jobs: Vec<Call> = (0..60).map(|n| Call { tenant: "a".into(), n, tokens: 1 + (n * 37) % 100 }).collect();
    let total: u64 = jobs.iter().map(|j| u64::from(j.tokens)).sum();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let l = log.clone();
    outbox::Worker::builder(&t.db)
        .concurrency(8)
        .rate("flow_call", "600/1s burst 100".parse().expect("rate"))
        .register(move |job: Call, _ctx: JobContext| {
            let l = l.clone();
            async move {
                l.lock().expect("log").push((t0.elapsed(), job.tenant, job.tokens));
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("worker")
        .drain()
        .await
        .expect("drain");
    let mut log = log.lock().expect("log").clone();
    log.sort();
    assert_eq!(log.len(), 60, "every job ran");
    let claims = claims_of(&t, "flow_call").await;
    assert_eq!(claims.len(), 60, "every job was claimed");
    let most = most_in_window(&claims, Duration::from_secs(1), true);
    assert!(most <= 700, "claims of at most the rate plus its burst in any second of cost, not {most}");
    let took = log.last().expect("ran").0;
    let floor = Duration::from_millis(((total - 100) * 1000 / 600).saturating_sub(100));
    assert!(took >= floor, "{total} units at 600/s after a burst of 100 take {floor:?} at least, not {took:?}");
    let rates = flow::rates(&t.db).await.expect("rates");
    assert!(rates.iter().any(|r| r.name == "flow_call" && r.rate == "600/1s burst 100"), "{rates:?}");
}

conformance!(a_rate_per_key_gives_each_key_its_own, mysql);
async fn a_rate_per_key_gives_each_key_its_own(t: TestDb) {
    // 20 a second per tenant with a burst of 5: 25 jobs of each tenant take about a second, side by side.
    let mut jobs = Vec::new();
    for n in 0..25 {
        for tenant in ["a", "b"] {
            jobs.push(KeyedCall { tenant: tenant.into(), n, tokens: 1 });
        }
    }
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let l = log.clone();
    outbox::Worker::builder(&t.db)
        .concurrency(8)
        .register(move |job: KeyedCall, _ctx: JobContext| {
            let l = l.clone();
            async move {
                l.lock().expect("log").push((t0.elapsed(), job.tenant, 1));
                Ok::<_, JobError>(())
            }
        })
        .build()
        .await
        .expect("worker")
        .drain()
        .await
        .expect("drain");
    let mut log = log.lock().expect("log").clone();
    log.sort();
    let claims = claims_of(&t, "flow_keyed_call").await;
    for tenant in ["a", "b"] {
        let mine: Vec<_> = log.iter().filter(|r| r.1 == tenant).cloned().collect();
        assert_eq!(mine.len(), 25);
        let claimed: Vec<_> = claims.iter().filter(|r| r.1 == tenant).cloned().collect();
        let most = most_in_window(&claimed, Duration::from_millis(500), false);
        assert!(most <= 15, "tenant {tenant}: claims of at most 10 + 5 in any half second, not {most}");
        let last = mine.last().expect("ran").0;
        assert!(last >= Duration::from_millis(900), "tenant {tenant}: 20 past the burst take a second, not {last:?}");
        assert!(last < Duration::from_millis(2500), "tenant {tenant}: its own rate, not a shared one: {last:?}");
    }
}

conformance!(a_paused_queue_is_not_claimed_until_resumed, mysql);
async fn a_paused_queue_is_not_claimed_until_resumed(t: TestDb) {
    flow::pause(&t.db, &Target::queue("mail"), Some("provider down")).await.expect("pause");
    let jobs: Vec<FairCall> = (0..5).map(|n| FairCall { tenant: "a".into(), n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new().queue("mail")).await.expect("enqueue");
    outbox::enqueue(&t.db, &FairCall { tenant: "b".into(), n: 9 }, EnqueueOpts::new()).await.expect("enqueue");
    let ran = Arc::new(Mutex::new(Vec::new()));
    let worker = || {
        let r = ran.clone();
        outbox::Worker::builder(&t.db).register(move |job: FairCall, _ctx: JobContext| {
            let r = r.clone();
            async move {
                r.lock().expect("ran").push(job.n);
                Ok::<_, JobError>(())
            }
        })
    };
    worker().build().await.expect("worker").drain().await.expect("drain");
    assert_eq!(*ran.lock().expect("ran"), [9], "only the job outside the paused queue ran");
    let paused = flow::paused(&t.db).await.expect("paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].target, Target::queue("mail"));
    assert_eq!(paused[0].reason.as_deref(), Some("provider down"));
    assert!(flow::resume(&t.db, &Target::queue("mail")).await.expect("resume"));
    assert!(!flow::resume(&t.db, &Target::queue("mail")).await.expect("resume again"));
    worker().build().await.expect("worker").drain().await.expect("drain");
    assert_eq!(ran.lock().expect("ran").len(), 6);
    // A kind paused, and one key of a kind.
    flow::pause(&t.db, &Target::kind("flow_fair_call"), None).await.expect("pause kind");
    outbox::enqueue(&t.db, &FairCall { tenant: "c".into(), n: 10 }, EnqueueOpts::new()).await.expect("enqueue");
    worker().build().await.expect("worker").drain().await.expect("drain");
    assert_eq!(ran.lock().expect("ran").len(), 6, "a paused kind waits");
    flow::resume(&t.db, &Target::kind("flow_fair_call")).await.expect("resume");
    flow::pause(&t.db, &Target::key("flow_fair_call", "c"), None).await.expect("pause key");
    outbox::enqueue(&t.db, &FairCall { tenant: "d".into(), n: 11 }, EnqueueOpts::new()).await.expect("enqueue");
    worker().build().await.expect("worker").drain().await.expect("drain");
    assert_eq!(ran.lock().expect("ran").last(), Some(&11), "the other key runs, the paused one waits");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'pending'").await, 1);
    // Unknown names are accepted (their jobs may come later); bad ones are refused and change nothing.
    flow::pause(&t.db, &Target::queue("not-yet"), None).await.expect("a queue with no jobs yet");
    let err = flow::pause(&t.db, &Target::queue(""), None).await.expect_err("empty");
    assert!(err.to_string().contains("empty name"), "{err}");
    let err = flow::pause(&t.db, &Target::key("flow_fair_call", ""), None).await.expect_err("empty key");
    assert!(err.to_string().contains("key of kind `flow_fair_call`"), "{err}");
    assert_eq!(flow::paused(&t.db).await.expect("paused").len(), 2);
}

conformance!(a_handler_rate_limited_upstream_holds_the_kind_and_keeps_its_attempt, mysql);
async fn a_handler_rate_limited_upstream_holds_the_kind_and_keeps_its_attempt(t: TestDb) {
    let jobs: Vec<FairCall> = (0..4).map(|n| FairCall { tenant: "a".into(), n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let log: Log = Arc::default();
    let t0 = Instant::now();
    let l = log.clone();
    let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
    outbox::Worker::builder(&t.db)
        .concurrency(1)
        .register(move |job: FairCall, ctx: JobContext| {
            let (l, first) = (l.clone(), first.clone());
            async move {
                l.lock().expect("log").push((
                    t0.elapsed(),
                    job.n.to_string(),
                    u32::try_from(ctx.attempt()).unwrap_or(0),
                ));
                if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    return Err(JobError::rate_limited(Duration::from_millis(800)));
                }
                Ok(())
            }
        })
        .build()
        .await
        .expect("worker")
        .drain()
        .await
        .expect("drain");
    let log = log.lock().expect("log").clone();
    assert_eq!(log.len(), 5, "four jobs, one of them twice: {log:?}");
    let (limited_at, _, _) = log[0];
    let (next_at, _, _) = log[1];
    assert!(next_at >= limited_at + Duration::from_millis(750), "nothing ran while held: {log:?}");
    assert!(log.iter().all(|(_, _, attempt)| *attempt == 1), "the attempt was given back: {log:?}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, 4);
    let events = scalar(&t.db, "SELECT COUNT(*) FROM outbox_job_events WHERE event = 'released'").await;
    assert_eq!(events, 1, "the rate-limited attempt shows as released in the history");
}

conformance!(fair_share_serves_a_late_tenant_at_once_in_proportion_to_its_weight, mysql);
async fn fair_share_serves_a_late_tenant_at_once_in_proportion_to_its_weight(t: TestDb) {
    for (weight_b, a_before_b_done) in [(1u32, 60usize), (3, 25)] {
        let a: Vec<FairCall> = (0..400).map(|n| FairCall { tenant: "a".into(), n }).collect();
        outbox::enqueue_batch(&t.db, &a, EnqueueOpts::new()).await.expect("enqueue a");
        let b: Vec<FairCall> = (0..50).map(|n| FairCall { tenant: "b".into(), n }).collect();
        outbox::enqueue_batch(&t.db, &b, EnqueueOpts::new()).await.expect("enqueue b");
        flow::set_weight(&t.db, "flow_fair_call", "b", weight_b).await.expect("weight");
        let shares = flow::shares(&t.db, "flow_fair_call").await.expect("shares");
        let b = shares.iter().find(|s| s.key == "b").expect("b's share");
        assert_eq!((b.weight, b.backlog), (weight_b, 50), "{shares:?}");
        let expected = f64::from(weight_b) / f64::from(weight_b + 1);
        assert!((b.share - expected).abs() < 1e-9, "{shares:?}");
        let order = Arc::new(Mutex::new(Vec::new()));
        let o = order.clone();
        outbox::Worker::builder(&t.db)
            .concurrency(4)
            .register(move |job: FairCall, _ctx: JobContext| {
                let o = o.clone();
                async move {
                    o.lock().expect("order").push(job.tenant);
                    Ok::<_, JobError>(())
                }
            })
            .build()
            .await
            .expect("worker")
            .drain()
            .await
            .expect("drain");
        let order = order.lock().expect("order").clone();
        assert_eq!(order.len(), 450);
        let b_done = order.iter().rposition(|t| t == "b").expect("b ran") + 1;
        let a_before = order[..b_done].iter().filter(|t| *t == "a").count();
        assert!(
            a_before <= a_before_b_done,
            "weight {weight_b}: b's 50 jobs done after {a_before} of a's (at most {a_before_b_done})"
        );
        outbox_tests::exec(&t.db, "DELETE FROM outbox_jobs", vec![]).await;
    }
}

conformance!(bad_flow_input_is_refused_and_writes_nothing, mysql);
async fn bad_flow_input_is_refused_and_writes_nothing(t: TestDb) {
    for (text, says) in [("0/1m", "at least 1"), ("-1/s", "not a whole number"), ("50/0s", "longer than zero")] {
        let err = text.parse::<Rate>().expect_err(text);
        assert!(err.to_string().contains(says), "{err}");
    }
    let err = outbox::enqueue(&t.db, &FairCall { tenant: String::new(), n: 1 }, EnqueueOpts::new())
        .await
        .expect_err("an empty fairness key");
    assert!(err.to_string().contains("/tenant"), "{err}");
    let kind = outbox::Kind::from_schema(
        "flow_raw",
        serde_json::json!({"type": "object", "properties": {"tenant": {"type": "string"}, "tokens": {}}}),
        KindOpts { fair: Some("{tenant}"), cost: Some("{tokens}"), ..KindOpts::DEFAULT },
    )
    .expect("kind");
    for (payload, path) in [
        (serde_json::json!({"tokens": 3}), "/tenant"),
        (serde_json::json!({"tenant": "a", "tokens": -4}), "/tokens"),
        (serde_json::json!({"tenant": "a", "tokens": "many"}), "/tokens"),
    ] {
        let err = outbox::enqueue_raw(&t.db, &kind, payload, EnqueueOpts::new()).await.expect_err("refused");
        assert!(err.to_string().contains(path), "{err}");
    }
    let err = flow::set_weight(&t.db, "flow_raw", "a", 0).await.expect_err("weight 0");
    assert!(err.to_string().contains("is 0"), "{err}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_fair").await, 0);
}

/// On PostgreSQL a controlled kind is claimed in a transaction that takes the kind's lock, which claimers on every
/// machine take in turn. A worker's claim opens none for a controlled kind without a ready job: with the lock held
/// elsewhere (a claimer of that kind in the middle of its claim), a job of another kind still starts.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_controlled_kind_does_not_hold_up_the_other_kinds() {
    let test = "an_idle_controlled_kind_does_not_hold_up_the_other_kinds";
    let Some(t) = outbox_tests::fresh(outbox_tests::Backend::Postgres, test).await else {
        return;
    };
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let holder = t.db.begin().await.expect("begin");
    holder
        .execute_unprepared(
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ' outbox limit ' || 'flow_keyed_call', 0))",
        )
        .await
        .expect("hold the kind's lock");
    let id = outbox::enqueue(&t.db, &outbox_tests::Probe { n: 1 }, EnqueueOpts::new()).await.expect("enqueue");
    let worker = outbox::Worker::builder(&t.db)
        .register(|_: KeyedCall, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .register(|_: outbox_tests::Probe, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("worker");
    let handle = worker.start();
    let started =
        outbox_tests::wait_status(&t.db, id.id(), outbox::JobStatus::Completed, Duration::from_secs(30)).await;
    holder.rollback().await.expect("release the lock");
    handle.shutdown().await.expect("shutdown");
    assert!(started, "a job of a plain kind waited behind the lock of a controlled kind that had nothing ready");
}

/// On PostgreSQL each key of a keyed kind is read on from where the worker's last claim of it ended. A job that
/// sorts before that point (here a higher priority) is still claimed by the very next claim: a cursor that finds
/// nothing has its key's head read at once, not at the claim after, which a drain would never make.
#[tokio::test(flavor = "multi_thread")]
async fn a_key_s_job_that_sorts_before_its_cursor_is_claimed_at_once() {
    let test = "a_key_s_job_that_sorts_before_its_cursor_is_claimed_at_once";
    let Some(t) = outbox_tests::fresh(outbox_tests::Backend::Postgres, test).await else {
        return;
    };
    let jobs: Vec<FairCall> = (0..6).map(|n| FairCall { tenant: ["a", "b"][n as usize % 2].into(), n }).collect();
    outbox::enqueue_batch(&t.db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
    let worker = outbox::Worker::builder(&t.db)
        .register(|_: FairCall, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("worker");
    let first = std::time::Instant::now();
    assert_eq!(worker.claim_once_for_benchmark(10).await.expect("claim"), 6, "the first claim takes every job");
    let urgent = FairCall { tenant: "a".into(), n: 100 };
    outbox::enqueue(&t.db, &urgent, EnqueueOpts::new().priority(5)).await.expect("enqueue");
    // Read from a's cursor (the claim after the first, within a second of it), the urgent job sorts before it.
    let claimed = worker.claim_once_for_benchmark(10).await.expect("claim");
    if first.elapsed() < Duration::from_millis(900) {
        assert_eq!(claimed, 1, "the job before the cursor waited for a later claim");
    }
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'claimed'").await, 6 + claimed as i64);
}
