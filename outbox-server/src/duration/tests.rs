//! The parsers on fixed cases, and fuzzed.

use super::*;

#[test]
fn units_and_sums_parse() {
    assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse("45s"), Ok(Duration::from_secs(45)));
    assert_eq!(parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
    assert_eq!(parse("2w"), Ok(Duration::from_secs(14 * 86_400)));
}

#[test]
fn bad_durations_name_the_value() {
    for bad in ["", "7", "7x", "d7", "1.5h", "-3d", "99999999999999999999d"] {
        let err = parse(bad).expect_err(bad);
        assert!(err.contains(bad.trim()) || bad.is_empty(), "{bad}: {err}");
    }
    assert!(parse("7x").expect_err("unit").contains("unknown unit `x`"));
    assert_eq!(parse("1h\n").map(|d| d.as_secs()), Ok(3_600), "surrounding whitespace is trimmed");
    let err = parse("1h\n2x").expect_err("unit");
    assert!(!err.contains('\n') && err.contains(r"`1h\n2x`"), "{err}");
}

#[test]
fn times_out_of_the_queue_s_years_are_refused() {
    // 100,000,000 days is about 274,000 years: once a panic in `--since`.
    assert!(back("100000000d").expect_err("too far back").contains("`100000000d` reaches back before the year 1"));
    assert!(forward("100000000d").expect_err("too far ahead").contains("`100000000d` reaches past the year 9999"));
    assert!(back("9999999999999999w").is_err() && forward("18446744073709551615s").is_err());
    assert_eq!(back("7d"), Ok(Duration::from_secs(7 * 86_400)));
    assert_eq!(forward("10m"), Ok(Duration::from_secs(600)));
    // A thousand years either way is still inside them.
    assert!(back("52000w").is_ok() && forward("52000w").is_ok());
}

#[test]
fn quoted_values_stay_on_one_line() {
    assert_eq!(quoted("7d"), "7d");
    assert_eq!(quoted("1h\n30m\u{1b}[31m"), "1h\\n30m\\u{1b}[31m");
    assert_eq!(quoted("dé jà"), "dé jà");
}

#[test]
fn since_takes_a_duration_or_a_time() {
    let t = since("2026-11-22T10:00:00+01:00").expect("a time");
    assert_eq!(t.to_rfc3339(), "2026-11-22T09:00:00+00:00");
    let hour_ago = since("1h").expect("a duration");
    let lag = Utc::now() - hour_ago - TimeDelta::hours(1);
    assert!(lag >= TimeDelta::zero() && lag < TimeDelta::minutes(1), "{lag}");
    // Once a panic: 100,000,000 days back overflowed the subtraction.
    for (bad, says) in [("100000000d", "reaches back before the year 1"), ("yesterday", "is not a duration")] {
        let err = since(bad).expect_err(bad);
        assert!(err.contains(&format!("`{bad}` {says}")) && err.contains("2026-11-22T10:00:00Z"), "{err}");
    }
}

mod generated {
    use proptest::prelude::*;

    use super::*;

    fn config() -> ProptestConfig {
        ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() }
    }

    /// Units, and text a unit could be mistaken for, comma-separated (one is empty).
    const NEAR_UNITS: &str = "ms,s,m,h,d,w,,x,ns,µs,S,H,min,sec,d7,秒,🕐,\0,\u{1b}[31m";

    const UNITS: [(&str, u64); 5] = [("s", 1), ("m", 60), ("h", 3_600), ("d", 86_400), ("w", 604_800)];

    /// Text near the grammar: digit runs of any length, units real and not, sums, signs, decimals,
    /// unicode digits and letters, and whitespace of every kind around and between the parts.
    fn near_miss() -> impl Strategy<Value = String> {
        let space = prop::sample::select(&["", "", " ", "\t", "\n", "\u{3000}", "\u{85}", "\u{2028}"][..]);
        let number = prop_oneof![
            "[0-9]{1,3}",
            "[0-9]{15,25}",
            Just("18446744073709551615".to_owned()),
            Just("30500568904943".to_owned()),
            "[-+.٣０-９]{0,2}[0-9]{0,3}",
        ];
        let unit = prop::sample::select(NEAR_UNITS.split(',').collect::<Vec<_>>());
        (space.clone(), prop::collection::vec((number, unit, space.clone()), 1..5), space).prop_map(
            |(lead, parts, trail)| {
                let body: String = parts.into_iter().map(|(n, u, s)| format!("{n}{u}{s}")).collect();
                format!("{lead}{body}{trail}")
            },
        )
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_text_parses_or_is_refused_on_one_line_naming_it(
            text in prop_oneof![any::<String>(), "\\PC{0,12}", near_miss()],
        ) {
            match parse(&text) {
                Ok(d) => {
                    prop_assert!(!text.trim().is_empty());
                    // What parsed reads back the same through its whole-millisecond form when it fits.
                    if let Ok(ms) = u64::try_from(d.as_millis()) {
                        prop_assert_eq!(parse(&format!("{ms}ms")), Ok(d));
                    }
                    for (arg, limit) in [(back(&text), ago(d)), (forward(&text), ahead(d))] {
                        prop_assert_eq!(arg.is_ok(), limit.is_some(), "{:?}", text);
                    }
                }
                Err(e) => {
                    prop_assert!(!e.is_empty() && !e.contains(['\n', '\r']), "{:?}: {:?}", text, e);
                    if !text.trim().is_empty() {
                        let named = format!("`{}`", quoted(&text));
                        prop_assert!(e.contains(&named), "{:?} does not name {}", e, named);
                    }
                    prop_assert!(back(&text).is_err() && forward(&text).is_err());
                }
            }
        }

        #[test]
        fn whole_numbers_of_each_unit_round_trip(n in any::<u64>(), unit in 0..6usize, small in 0..100_000u64) {
            for n in [n, small] {
                let (text, expected) = match UNITS.get(unit) {
                    Some((name, k)) => (format!("{n}{name}"), n.checked_mul(*k).map(Duration::from_secs)),
                    None => (format!("{n}ms"), Some(Duration::from_millis(n))),
                };
                match expected {
                    Some(d) => prop_assert_eq!(parse(&text), Ok(d)),
                    None => prop_assert_eq!(parse(&text), Err(format!("`{text}` is too large"))),
                }
            }
        }

        #[test]
        fn sums_add_up(parts in prop::collection::vec((0..1_000_000u64, 0..6usize), 1..6)) {
            let mut text = String::new();
            let mut total = Duration::ZERO;
            for (n, unit) in parts {
                let (name, d) = match UNITS.get(unit) {
                    Some((name, k)) => (*name, Duration::from_secs(n * k)),
                    None => ("ms", Duration::from_millis(n)),
                };
                text.push_str(&format!("{n}{name}"));
                total += d;
            }
            prop_assert_eq!(parse(&text), Ok(total));
        }
    }
}
