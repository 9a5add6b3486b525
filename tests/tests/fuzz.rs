//! Generated payloads against payload validation and idempotency keys, through the public API: no value
//! panics, a refusal says where in the payload the fault is, an acceptance deserializes into the kind's type,
//! and the same intent always collapses onto one key while different key values never do, on every backend
//! (PostgreSQL refuses more than SQLite: NUL characters, sizes).

use std::collections::BTreeMap;
use std::fmt::Debug;

use outbox::prelude::*;
use outbox::{Enqueued, Error, Kind, MAX_KEY_BYTES, Violation};
use outbox_tests::{TestDb, conformance};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value, json};

fn config() -> ProptestConfig {
    ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() }
}

/// An account: key fields, a bounded integer, a bounded string, an email, a nested object, optional fields.
#[derive(Job, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "fuzz_account")]
#[serde(rename_all = "camelCase")]
struct Account {
    #[job(key)]
    account_id: i64,
    #[job(key)]
    region: String,
    #[schemars(range(min = 1, max = 500))]
    seats: u16,
    #[schemars(length(min = 1, max = 40))]
    name: String,
    owner: Owner,
    note: Option<String>,
    tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Owner {
    #[schemars(email)]
    email: String,
    age: Option<u8>,
}

/// Anything at all under its key fields, and beside them.
#[derive(Job, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "fuzz_tagged")]
struct Tagged {
    #[job(key)]
    key: Value,
    #[job(key)]
    scope: Option<String>,
    data: Value,
}

/// Keyed by a hash of the whole payload.
#[derive(Job, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "fuzz_blob")]
struct Blob {
    data: Value,
}

/// A list of measurements: floats, unsigned integers, maps.
#[derive(Job, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "fuzz_series")]
struct Series {
    points: Vec<Point>,
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Point {
    at: u64,
    value: f64,
}

/// Field names of the kinds above, so generated objects hit real properties as well as unknown ones.
const NAMES: &[&str] = &[
    "accountId",
    "region",
    "seats",
    "name",
    "owner",
    "email",
    "age",
    "note",
    "tags",
    "key",
    "scope",
    "data",
    "points",
    "labels",
    "at",
    "value",
];

/// Zeros of both signs, whole numbers, and `i64::MAX` and `u64::MAX` as floats.
const EDGE_FLOATS: [f64; 9] =
    [0.0, -0.0, 1.0, 1.5, -1.0, 1e300, -1e-300, 9.223_372_036_854_776e18, 1.844_674_407_370_955_2e19];

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// Nulls, bools, integers of every size and sign, floats (whole, negative zero, huge, tiny), and strings with
/// NUL, newlines, unicode, or thousands of characters.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        2 => Just(Value::Null),
        2 => any::<bool>().prop_map(Value::from),
        3 => (-3i64..600).prop_map(Value::from),
        2 => any::<i64>().prop_map(Value::from),
        2 => any::<u64>().prop_map(Value::from),
        2 => any::<f64>().prop_map(float),
        2 => prop::sample::select(&EDGE_FLOATS[..]).prop_map(float),
        3 => any::<String>().prop_map(Value::from),
        3 => "[a-z@.\u{0}é😀 \n\"\\\\]{0,12}".prop_map(Value::from),
        1 => (0usize..2_000, any::<char>()).prop_map(|(n, c)| Value::String(c.to_string().repeat(n))),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![3 => prop::sample::select(NAMES).prop_map(str::to_owned), 1 => any::<String>(), 1 => "[a-z/~]{0,3}"]
}

/// Any JSON value, up to six levels deep and eight wide.
fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((name(), inner), 0..8).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A value nested `depth` arrays and objects deep around `leaf`: around the depth the worker can read back.
fn deep() -> impl Strategy<Value = Value> {
    (100usize..140, scalar())
        .prop_map(|(depth, leaf)| (0..depth).fold(leaf, |v, i| if i % 2 == 0 { json!([v]) } else { json!({ "k": v }) }))
}

/// `plausible` most of the time, any value sometimes, missing sometimes.
fn field(plausible: impl Strategy<Value = Value> + 'static) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![18 => plausible.prop_map(Some), 1 => json().prop_map(Some), 1 => Just(None)]
}

fn object(fields: Vec<(&str, Option<Value>)>, extra: Option<(String, Value)>) -> Value {
    let mut map: Map<String, Value> = fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v))).collect();
    map.extend(extra);
    Value::Object(map)
}

/// Payloads close to a valid account, each field now and then wrong, missing or anything.
fn account_like() -> impl Strategy<Value = Value> {
    let owner = (
        field(prop_oneof![
            Just(json!("a@example.com")),
            Just(json!("not an email")),
            "[a-z]{1,5}@[a-z]{1,5}\\.com".prop_map(Value::from)
        ]),
        field(prop_oneof![(0i64..280).prop_map(Value::from), Just(Value::Null)]),
    )
        .prop_map(|(email, age)| object(vec![("email", email), ("age", age)], None));
    (
        (
            field(any::<i64>().prop_map(Value::from)),
            field("[a-z-]{0,12}".prop_map(Value::from)),
            field((-2i64..520).prop_map(Value::from)),
            field("\\PC{0,42}".prop_map(Value::from)),
        ),
        (
            field(owner),
            field(prop_oneof![Just(Value::Null), "\\PC{0,10}".prop_map(Value::from)]),
            field(prop::collection::vec("[a-z]{0,5}".prop_map(Value::from), 0..4).prop_map(Value::Array)),
            prop::option::weighted(0.2, (name(), json())),
        ),
    )
        .prop_map(|((id, region, seats, name), (owner, note, tags, extra))| {
            object(
                vec![
                    ("accountId", id),
                    ("region", region),
                    ("seats", seats),
                    ("name", name),
                    ("owner", owner),
                    ("note", note),
                    ("tags", tags),
                ],
                extra,
            )
        })
}

/// Payloads close to a valid series.
fn series_like() -> impl Strategy<Value = Value> {
    let at = prop_oneof![3 => any::<u64>().prop_map(Value::from), 1 => scalar()];
    let value = prop_oneof![3 => any::<f64>().prop_map(float), 1 => scalar()];
    let point = (field(at), field(value)).prop_map(|(at, value)| object(vec![("at", at), ("value", value)], None));
    let labels =
        prop::collection::btree_map(name(), prop_oneof![3 => "\\PC{0,6}".prop_map(Value::from), 1 => scalar()], 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()));
    (field(prop::collection::vec(point, 0..5).prop_map(Value::Array)), field(labels))
        .prop_map(|(points, labels)| object(vec![("points", points), ("labels", labels)], None))
}

/// Whether `path` is a JSON pointer into `payload`, or names a property missing from an object it points to.
fn locates(payload: &Value, path: &str) -> bool {
    if path.is_empty() || payload.pointer(path).is_some() {
        return true;
    }
    path.rsplit_once('/').is_some_and(|(parent, _)| payload.pointer(parent).is_some_and(Value::is_object))
}

/// A refusal of `payload` says, on one line, which kind refused it and where in the payload each fault is.
fn clear_refusal(kind: &str, payload: &Value, violations: &[Violation]) -> Result<(), TestCaseError> {
    prop_assert!(!violations.is_empty(), "a refusal without a violation");
    for v in violations {
        prop_assert!(v.path.is_empty() || v.path.starts_with('/'), "not a JSON pointer: {:?}", v.path);
        prop_assert!(locates(payload, &v.path), "{:?} is nowhere in the payload ({})", v.path, v);
        prop_assert!(!v.message.trim().is_empty() && !v.message.contains('\n'), "{:?}", v.message);
        // A fault of one field is placed at that field, not at the payload as a whole.
        prop_assert!(!v.path.is_empty() || !payload.is_object(), "a fault inside an object placed at `/`: {}", v);
    }
    let text = Error::InvalidPayload { kind: kind.to_owned(), violations: violations.to_vec() }.to_string();
    prop_assert!(text.contains(&format!("kind `{kind}`")) && !text.contains('\n'), "{}", text);
    Ok(())
}

/// Validates `payload` as a `J`: an acceptance deserializes into `J`, a refusal is clear.
fn validates_as<J: Job + Debug>(payload: &Value) -> Result<(), TestCaseError> {
    let kind = Kind::of::<J>().map_err(|e| TestCaseError::fail(format!("kind of {}: {e}", J::KIND)))?;
    match kind.validate(payload) {
        Ok(()) => {
            let typed = serde_json::from_value::<J>(payload.clone());
            prop_assert!(typed.is_ok(), "{} accepted {} but it does not deserialize: {:?}", J::KIND, payload, typed);
        }
        Err(Error::InvalidPayload { kind, violations }) => {
            prop_assert_eq!(&kind, J::KIND);
            clear_refusal(J::KIND, payload, &violations)?;
        }
        Err(other) => prop_assert!(false, "{} refused {} with an undocumented error: {}", J::KIND, payload, other),
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn payloads_are_accepted_as_their_type_or_refused_at_a_path(
        account in prop_oneof![4 => account_like(), 1 => json()],
        series in prop_oneof![4 => series_like(), 1 => json()],
        any in prop_oneof![6 => json(), 1 => deep()],
    ) {
        validates_as::<Account>(&account)?;
        validates_as::<Series>(&series)?;
        validates_as::<Tagged>(&json!({ "key": any.clone(), "scope": null, "data": any.clone() }))?;
        validates_as::<Tagged>(&any)?;
        validates_as::<Blob>(&any)?;
    }
}

/// `value` with every object rebuilt from its entries in reverse order.
fn reordered(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().rev().map(|(k, v)| (k.clone(), reordered(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(reordered).collect()),
        scalar => scalar.clone(),
    }
}

/// `value` with its first number respelled: an integer as a float, a float's zero sign flipped.
fn respelled(value: &Value) -> Value {
    fn go(value: &mut Value) -> bool {
        match value {
            Value::Number(n) => {
                *value = match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => float(i as f64),
                    (None, Some(f)) if f == 0.0 => float(-f),
                    (None, Some(f)) => float(f),
                    (None, None) => return false,
                };
                true
            }
            Value::Array(items) => items.iter_mut().any(go),
            Value::Object(map) => map.values_mut().any(go),
            _ => false,
        }
    }
    let mut out = value.clone();
    go(&mut out);
    out
}

/// One generated intent and two others: the same one spelled differently, and one that may differ.
#[derive(Debug, Clone)]
enum Intents {
    /// `fuzz_tagged` (key fields `key` and `scope`): the same key values with other data, then other values.
    Fields { key: Value, scope: Option<String>, spell_null: bool, other_key: Value, other_scope: Option<String> },
    /// `fuzz_blob` (a hash of the payload): the same data reordered, then other data.
    Hash { data: Value, other: Value },
}

fn intents() -> impl Strategy<Value = Intents> {
    // The other value: often the same one, or a respelling of it, so equal values are generated as often as
    // different ones.
    let pair = || {
        json().prop_flat_map(|v| {
            let other = prop_oneof![Just(v.clone()), Just(respelled(&v)), json()];
            (Just(v), other)
        })
    };
    let scope = prop_oneof![Just(None), Just(Some(String::new())), "\\PC{0,4}".prop_map(Some)];
    prop_oneof![
        (pair(), scope.clone(), any::<bool>(), scope).prop_map(|((key, other_key), scope, spell_null, other_scope)| {
            Intents::Fields { key, scope, spell_null, other_key, other_scope }
        }),
        pair().prop_map(|(data, other)| Intents::Hash { data, other }),
    ]
}

/// The payloads of a case, its kind, and whether the third payload carries the same intent as the first.
fn payloads(case: &Intents) -> Result<(std::sync::Arc<Kind>, [Value; 3], bool), Error> {
    Ok(match case {
        Intents::Fields { key, scope, spell_null, other_key, other_scope } => {
            // A missing optional key field and a null one are the same value of it.
            let with = |key: &Value, scope: &Option<String>, data: Value, null: bool| {
                let mut p = json!({ "key": key, "data": data });
                if scope.is_some() || null {
                    p["scope"] = json!(scope);
                }
                p
            };
            let first = with(key, scope, json!(1), *spell_null);
            let again = with(&reordered(key), scope, json!(["other", "data"]), !*spell_null);
            let other = with(other_key, other_scope, json!(1), false);
            (Kind::of::<Tagged>()?, [first, again, other], key == other_key && scope == other_scope)
        }
        Intents::Hash { data, other } => {
            let same = data == other;
            (
                Kind::of::<Blob>()?,
                [json!({ "data": data }), json!({ "data": reordered(data) }), json!({ "data": other })],
                same,
            )
        }
    })
}

/// Enqueues the three payloads in one batch and the second again on its own, in a transaction rolled back
/// after, and checks which collapsed.
async fn check_keys(db: &DatabaseConnection, case: &Intents) -> Result<(), TestCaseError> {
    let fail = |e: Error| TestCaseError::fail(e.to_string());
    let (kind, [first, again, other], same) = payloads(case).map_err(fail)?;
    let txn = outbox::begin(db).await.map_err(fail)?;
    let checked = async {
        let out = match outbox::enqueue_batch_raw(
            &txn,
            &kind,
            vec![first.clone(), again.clone(), other.clone()],
            EnqueueOpts::new(),
        )
        .await
        {
            Ok(out) => out,
            // Values this wild may be refused (too deep, too large), as long as the refusal is clear.
            Err(Error::InvalidPayload { violations, .. }) => {
                let at_fault =
                    [&first, &again, &other].into_iter().any(|p| clear_refusal(kind.name(), p, &violations).is_ok());
                prop_assert!(at_fault, "a refusal that locates nothing: {:?}", violations);
                return Ok(());
            }
            Err(Error::PayloadTooLarge { .. }) => return Ok(()),
            Err(e) => return Err(fail(e)),
        };
        let id = out[0].id().to_owned();
        prop_assert!(out[0].is_new());
        prop_assert_eq!(&out[1], &Enqueued::Existing(id.clone()), "the same intent spelled otherwise got its own job");
        if same {
            prop_assert_eq!(&out[2], &Enqueued::Existing(id.clone()), "equal key values got their own job");
        } else if !same {
            prop_assert!(out[2].is_new() && out[2].id() != id, "different key values collapsed: {:?}", out);
        }
        let single = outbox::enqueue_raw(&txn, &kind, again.clone(), EnqueueOpts::new()).await.map_err(fail)?;
        prop_assert_eq!(single, Enqueued::Existing(id.clone()), "a single enqueue of the same intent got its own job");
        let key = outbox::ops::get(&txn, &id).await.map_err(fail)?.idempotency_key.unwrap_or_default();
        prop_assert!(!key.is_empty() && key.len() <= MAX_KEY_BYTES, "a stored key of {} bytes", key.len());
        if !same {
            let other_key = outbox::ops::get(&txn, out[2].id()).await.map_err(fail)?.idempotency_key;
            prop_assert_ne!(Some(key), other_key);
        }
        Ok(())
    }
    .await;
    txn.rollback().await.map_err(|e| TestCaseError::fail(format!("rolling back: {e}")))?;
    checked
}

conformance!(same_intents_collapse_onto_one_key_and_different_ones_do_not, mysql);
async fn same_intents_collapse_onto_one_key_and_different_ones_do_not(t: TestDb) {
    let rt = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(config());
    // The runner is synchronous; each case blocks this runtime thread on its own database work.
    let result = tokio::task::block_in_place(|| {
        runner.run(&intents(), |case| rt.block_on(check_keys(&t.db, &case))).map_err(|e| e.to_string())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn a_type_mismatch_the_schema_lets_through_is_placed_at_its_field() {
    // Shrunk by proptest from `payloads_are_accepted_as_their_type_or_refused_at_a_path`.
    let payload = json!({ "points": [{ "at": 1e300, "value": 0 }], "labels": {} });
    let err = Kind::of::<Series>().expect("kind").validate(&payload).expect_err("1e300 is no u64");
    assert!(err.to_string().contains("at /points/0/at:"), "{err}");
    let payload = json!({ "points": [{ "at": 1.0, "value": 0 }], "labels": {} });
    let err = Kind::of::<Series>().expect("kind").validate(&payload).expect_err("1.0 is no u64 for serde");
    assert!(err.to_string().contains("at /points/0/at:"), "{err}");
    let payload = json!({
        "accountId": u64::MAX, "region": "eu", "seats": 3, "name": "n", "owner": { "email": "a@b.co" }, "tags": []
    });
    let err = Kind::of::<Account>().expect("kind").validate(&payload).expect_err("u64::MAX is no i64");
    assert!(err.to_string().contains("at /accountId:"), "{err}");
}

conformance!(zero_and_negative_zero_collapse, mysql);
async fn zero_and_negative_zero_collapse(t: TestDb) {
    // Shrunk by proptest from `same_intents_collapse_onto_one_key_and_different_ones_do_not`.
    let db = &t.db;
    assert_eq!(json!(0.0), json!(-0.0), "equal JSON values");
    let kind = Kind::of::<Tagged>().expect("kind");
    let first = outbox::enqueue_raw(db, &kind, json!({ "key": 0.0, "data": 1 }), EnqueueOpts::new()).await;
    let again = outbox::enqueue_raw(db, &kind, json!({ "key": -0.0, "data": 1 }), EnqueueOpts::new()).await;
    assert_eq!(again.expect("enqueue"), Enqueued::Existing(first.expect("enqueue").id().to_owned()));
}
