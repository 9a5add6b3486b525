//! Generated command lines through the parser and the conversions that run before the database is opened
//! (the `--payload` text; the ranges of `--since` and the duration flags, checked by their value parsers): no
//! input panics, and every refusal is a usage error or a `Failure` with exit code 2, on one non-empty line
//! that names the flag at fault.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use clap::Parser;
use clap::error::{ContextKind, ContextValue};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::cli::{Cli, Command, usage_message};
use crate::fail::{Failure, code, quoted};
use crate::{payload, render};
use outbox_server::duration;

const COMMANDS: &[&str] = &[
    "migrate",
    "enqueue",
    "list",
    "get",
    "stats",
    "queues",
    "retry",
    "cancel",
    "purge",
    "schema",
    "reconcile",
    "work",
    "serve",
    "help",
];

const FLAGS: &[&str] = &[
    "--database-url",
    "--format",
    "--payload",
    "--queue",
    "--priority",
    "--delay",
    "--max-attempts",
    "--key",
    "--sequence",
    "--status",
    "--kind",
    "--since",
    "--limit",
    "--window",
    "--older-than",
    "--failed",
    "--root",
    "--aws",
    "--max-listed",
    "--progress",
    "--concurrency",
    "--claude-cli",
    "--anthropic-model",
    "--listen",
    "--token",
    "--cors-origin",
    "--request-timeout",
    "--help",
    "-h",
    "--version",
    "-V",
    "--",
    "-",
];

/// Values that reach the conversions: good ones, and ones at or past every edge.
const VALUES: &[&str] = &[
    "1h",
    "7d",
    "0s",
    "1h30m",
    "500ms",
    "52000w",
    "100000000d",
    "18446744073709551615s",
    "18446744073709551616ms",
    "99999999999999999999d",
    "2026-11-22T10:00:00Z",
    "2026-11-22T10:00:00+14:00",
    "0000-01-01T00:00:00Z",
    "9999-12-31T23:59:59-23:59",
    "yesterday",
    "-1",
    "0",
    "2147483648",
    "-2147483649",
    "18446744073709551616",
    "json",
    "table",
    "pending",
    "completed,failed",
    "cancelled,,",
    "create_file",
    "{}",
    "{\"path\": \"a.txt\", \"content\": \"x\"}",
    "{\"a\": [[[[[[[[[[1]]]]]]]]]]}",
    "[1, 2",
    "\"\\ud800\"",
    "1e999",
    "claude_extraction=2",
    "=3",
    "k=0",
    "k=4294967296",
    "sqlite::memory:",
    "127.0.0.1:8080",
    "0.0.0.0:0",
    "[::1]:0",
    "localhost:8080",
    "read:s3cret",
    "operate:",
    "admin:s3cret",
    "read:two words",
    "https://ops.example.com",
    "https://ops.example.com/path",
    "",
    " ",
];

/// Durations near the grammar: huge numbers, every unit and some that are not, sums, signs, spaces.
fn near_duration() -> impl Strategy<Value = String> {
    let part =
        ("[0-9]{1,22}", prop::sample::select(&["ms", "s", "m", "h", "d", "w", "", "x", "S", "µs", " ", "."][..]));
    (prop::sample::select(&["", " ", "+", "-", "\u{3000}"][..]), prop::collection::vec(part, 1..4)).prop_map(
        |(lead, parts)| {
            let body: String = parts.into_iter().map(|(n, u)| format!("{n}{u}")).collect();
            format!("{lead}{body}")
        },
    )
}

/// One argument: a command, a flag, a value, random text, or bytes that are not UTF-8.
fn token() -> impl Strategy<Value = OsString> {
    prop_oneof![
        2 => prop::sample::select(COMMANDS).prop_map(OsString::from),
        5 => prop::sample::select(FLAGS).prop_map(OsString::from),
        4 => prop::sample::select(VALUES).prop_map(OsString::from),
        2 => near_duration().prop_map(OsString::from),
        2 => any::<String>().prop_map(OsString::from),
        1 => (prop::sample::select(FLAGS), any::<String>()).prop_map(|(f, v)| OsString::from(format!("{f}={v}"))),
        1 => prop::collection::vec(any::<u8>(), 0..8).prop_map(OsString::from_vec),
    ]
}

/// A value for a flag: one aimed at an edge, a duration near the grammar, or any text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(VALUES).prop_map(str::to_owned), 2 => near_duration(), 2 => any::<String>()]
}

/// Each command with what it requires (`VALUE` for a positional argument) and what it may take.
const SHAPES: &[(&str, &[&str], &[&str])] = &[
    (
        "enqueue",
        &["VALUE", "--payload"],
        &["--queue", "--priority", "--delay", "--max-attempts", "--key", "--sequence"],
    ),
    ("list", &[], &["--status", "--kind", "--queue", "--since", "--sequence", "--limit"]),
    ("get", &["VALUE"], &[]),
    ("stats", &[], &["--window", "--limit"]),
    ("retry", &["VALUE"], &["--failed", "--kind"]),
    ("cancel", &["VALUE"], &[]),
    ("purge", &["--status", "--older-than"], &[]),
    ("schema", &[], &["VALUE"]),
    ("reconcile", &["--root"], &["--aws", "--max-listed", "--progress"]),
    ("work", &["--root"], &["--concurrency", "--queue", "--claude-cli", "--anthropic-model", "--aws", "--limit"]),
    ("serve", &[], &["--listen", "--token", "--cors-origin", "--request-timeout"]),
];

/// Flags that take no value.
const SWITCHES: &[&str] = &["--failed", "--aws", "--progress"];

/// A command line shaped like a real one: a command, its required arguments, some of its options and the
/// global ones, each flag with a generated value.
fn shaped() -> impl Strategy<Value = Vec<OsString>> {
    let picks = prop::collection::vec(any::<prop::sample::Index>(), 0..4);
    (prop::sample::select(SHAPES), picks, prop::collection::vec(value(), 8)).prop_map(
        |((command, required, optional), picks, values)| {
            let mut values = values.into_iter();
            let mut argv = vec![OsString::from("outbox"), OsString::from(command)];
            let globals = ["--database-url", "--format"];
            let chosen = picks.iter().map(|i| optional.iter().chain(&globals).nth(i.index(optional.len() + 2)));
            for flag in required.iter().chain(chosen.flatten()) {
                if *flag != "VALUE" {
                    argv.push(OsString::from(*flag));
                }
                if !SWITCHES.contains(flag) {
                    argv.push(OsString::from(values.next().unwrap_or_default()));
                }
            }
            argv
        },
    )
}

/// A command line: mostly shaped like a real one, sometimes a command then any tokens, sometimes anything.
fn argv() -> impl Strategy<Value = Vec<OsString>> {
    let first = prop_oneof![6 => prop::sample::select(COMMANDS).prop_map(OsString::from), 1 => token()];
    let loose = (first, prop::collection::vec(token(), 0..8)).prop_map(|(first, rest)| {
        let mut argv = vec![OsString::from("outbox"), first];
        argv.extend(rest);
        argv
    });
    prop_oneof![3 => shaped(), 2 => loose]
}

/// A refusal that exits 2 on one non-empty line naming `what`.
fn clear_failure(f: &Failure, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(f.code, code::INVALID, "{}", f);
    let line = f.to_string();
    prop_assert!(!f.message.trim().is_empty() && !line.contains(['\n', '\r']), "{:?}", line);
    prop_assert!(f.message.contains(what), "the refusal names {}: {}", what, line);
    Ok(())
}

/// Runs the conversions `commands::run` does before it touches the database.
fn convert(cli: Cli) -> Result<(), TestCaseError> {
    match cli.command {
        Command::Enqueue(args) => {
            // `-` and `@path` read stdin or a file; their bytes go through the same `decode`.
            if args.payload != "-"
                && !args.payload.starts_with('@')
                && let Err(f) = payload::decode(args.payload.as_bytes(), "--payload")
            {
                clear_failure(&f, "--payload")?;
            }
            if let Some(delay) = args.delay {
                prop_assert!(duration::ahead(delay).is_some(), "--delay {:?} was let past the year 9999", delay);
            }
        }
        Command::Stats { window, .. } => {
            prop_assert!(duration::ago(window).is_some(), "--window {:?} was let before the year 1", window);
            prop_assert!(!render::human(window).is_empty());
        }
        Command::Purge { older_than, .. } => {
            prop_assert!(
                duration::ago(older_than).is_some(),
                "--older-than {:?} was let before the year 1",
                older_than
            );
        }
        Command::Work(args) => {
            for (kind, n) in &args.limits {
                prop_assert!(!kind.is_empty() && *n >= 1, "--limit {}={} was let through", kind, n);
            }
        }
        Command::Serve(args) => {
            if let Err(f) = crate::commands::serve_opts(&args, None) {
                clear_failure(&f, "--")?;
                // A refused token is named by its place, never by its secret.
                if f.message.starts_with("--token") {
                    for token in &args.tokens {
                        let secret = token.split_once(':').map_or("", |(_, secret)| secret);
                        prop_assert!(secret.len() < 6 || !f.message.contains(secret), "a secret echoed: {}", f);
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn check(argv: &[OsString]) -> Result<(), TestCaseError> {
    let e = match Cli::try_parse_from(argv) {
        Ok(cli) => return convert(cli),
        Err(e) => e,
    };
    // Help and version print as clap renders them and need no check.
    let Some(message) = usage_message(&e) else { return Ok(()) };
    prop_assert!(!message.trim().is_empty(), "an empty usage error for {:?}", argv);
    prop_assert!(!message.contains(['\n', '\r']), "a usage error on more than one line: {:?}", message);
    for kind in [ContextKind::InvalidArg, ContextKind::InvalidValue] {
        if let Some(ContextValue::String(named)) = e.get(kind) {
            prop_assert!(message.contains(&quoted(named)), "the usage error names {:?}: {:?}", named, message);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn command_lines_never_panic_and_refusals_are_one_clear_line(argv in argv()) {
        check(&argv)?;
    }
}

#[test]
fn the_edges_the_generator_aims_at_are_refused_clearly() {
    let os = |args: &[&str]| args.iter().map(OsString::from).collect::<Vec<_>>();
    for argv in [
        os(&["outbox", "list", "--since", "100000000d"]),
        os(&["outbox", "list", "--since", "yesterday"]),
        os(&["outbox", "stats", "--window", "100000000d"]),
        os(&["outbox", "purge", "--status", "failed", "--older-than", "100000000d"]),
        os(&["outbox", "enqueue", "k", "--payload", "{}", "--delay", "100000000d"]),
        os(&["outbox", "enqueue", "k", "--payload", "{"]),
        vec!["outbox".into(), "get".into(), OsString::from_vec(vec![0xff, 0xfe])],
        os(&["outbox", "migrate", "\0"]),
        os(&["outbox", "--format", "\u{1b}[31m"]),
    ] {
        check(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    }
    let e = Cli::try_parse_from(os(&["outbox", "stats", "--window", "100000000d"])).expect_err("out of range");
    let message = usage_message(&e).expect("a usage error");
    assert!(
        message.contains("--window") && message.contains("`100000000d` reaches back before the year 1"),
        "{message}"
    );
}
