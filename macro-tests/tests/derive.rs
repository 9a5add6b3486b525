//! `#[derive(Job)]` on valid payload types: the generated `KIND` and `OPTS`, checked against what serde and
//! schemars actually produce.

use outbox::{Job, KindOpts};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every option set; key fields renamed by `rename_all`, by their own `rename`, and a raw identifier.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(
    kind = "billing.charge:v2/eu-1",
    queue = "billing",
    priority = -7,
    max_attempts = 12,
    unique = true,
    sequence = "tenant:{tenantId}/{{{invoice}}}",
    on_sequence_failure = "continue",
    concurrency = 4,
    timeout = "90s"
)]
struct Charge {
    #[job(key)]
    tenant_id: i64,
    amount_cents: i64,
    #[serde(rename = "invoice")]
    #[job(key)]
    invoice_id: String,
    #[job(key)]
    r#type: String,
}

/// Flow control: a rate per tenant counted in tokens, and fair share by the same key.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(
    kind = "llm_call",
    rate = "40000/1m burst 10000",
    rate_key = "{tenantId}",
    fair = "{tenantId}",
    cost = "{tokens}"
)]
struct LlmCall {
    tenant_id: String,
    tokens: u32,
}

/// A fixed cost under a plain rate.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "webhook", rate = "20/s", cost = 3)]
struct Webhook {
    url: String,
}

#[test]
fn flow_options() {
    let rate = outbox::flow::Rate::per(40_000, std::time::Duration::from_secs(60)).with_burst(10_000);
    assert_eq!(LlmCall::OPTS.rate, Some(rate));
    assert_eq!((LlmCall::OPTS.rate_key, LlmCall::OPTS.fair), (Some("{tenantId}"), Some("{tenantId}")));
    assert_eq!(LlmCall::OPTS.cost, Some("{tokens}"));
    assert_eq!(Webhook::OPTS.rate.map(|r| r.to_string()).as_deref(), Some("20/1s"));
    assert_eq!(Webhook::OPTS.cost, Some("3"));
    let kind = outbox::Kind::of::<LlmCall>().expect("kind");
    assert!(kind.rate_per_key() && kind.fair());
    let _ = (LlmCall { tenant_id: String::new(), tokens: 0 }.tokens, Webhook { url: String::new() }.url);
}

/// Only the kind: every option takes its default.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "ping")]
struct Ping {
    at: i64,
}

/// Options split over two attributes, some left to their defaults, and no key fields.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "notify", unique = false)]
#[job(queue = "mail")]
struct Notify {
    user_id: i64,
}

/// Another rename rule, and a field renamed only on the serialize side.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
#[job(kind = "audit", max_attempts = 1)]
struct Audit {
    #[job(key)]
    actor_id: i64,
    note: String,
    #[job(key)]
    #[serde(rename(serialize = "evt", deserialize = "event"))]
    event_name: String,
}

/// A tuple struct without key fields is a valid payload.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "user.touch")]
struct Touch(i64);

/// So is a unit struct.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "tick", priority = 2147483647)]
struct Tick;

/// Options passed through `macro_rules!` fragments.
macro_rules! job_with_priority {
    ($name:ident, $kind:expr, $priority:expr) => {
        #[derive(Job, Serialize, Deserialize, JsonSchema)]
        #[job(kind = $kind, priority = $priority)]
        struct $name {
            #[job(key)]
            id: i64,
        }
    };
}
job_with_priority!(FromMacro, "from_macro", -3);

fn is_job<J: Job>() -> (&'static str, KindOpts) {
    (J::KIND, J::OPTS)
}

/// Asserts each key field names a property in the serialized payload and in the JSON schema.
fn assert_keys_are_properties<J: Job>(payload: &J) {
    let value = serde_json::to_value(payload).expect("payload serializes");
    let object = value.as_object().expect("payload is a JSON object");
    let schema = schemars::schema_for!(J).to_value();
    for field in J::OPTS.key_fields {
        assert!(object.contains_key(*field), "{field} missing from {value}");
        assert!(schema["properties"].get(*field).is_some(), "{field} missing from schema {schema}");
    }
}

#[test]
fn all_options() {
    assert_eq!(Charge::KIND, "billing.charge:v2/eu-1");
    assert_eq!(
        Charge::OPTS,
        KindOpts {
            queue: "billing",
            priority: -7,
            max_attempts: 12,
            unique: true,
            key_fields: &["tenantId", "invoice", "type"],
            sequence: Some("tenant:{tenantId}/{{{invoice}}}"),
            on_sequence_failure: outbox::SequenceFailure::Continue,
            concurrency: Some(4),
            timeout: Some(std::time::Duration::from_secs(90)),
            ..KindOpts::DEFAULT
        }
    );
    let charge = Charge { tenant_id: 1, amount_cents: 250, invoice_id: "inv-9".into(), r#type: "card".into() };
    assert_eq!(
        serde_json::to_value(&charge).expect("serializes"),
        json!({"tenantId": 1, "amountCents": 250, "invoice": "inv-9", "type": "card"})
    );
    assert_keys_are_properties(&charge);
}

#[test]
fn defaults() {
    assert_eq!(is_job::<Ping>(), ("ping", KindOpts::DEFAULT));
    assert_eq!(is_job::<Touch>(), ("user.touch", KindOpts::DEFAULT));
    assert_eq!(is_job::<Tick>(), ("tick", KindOpts { priority: i32::MAX, ..KindOpts::DEFAULT }));
    assert_eq!(
        Ping::OPTS,
        KindOpts {
            queue: "default",
            priority: 0,
            max_attempts: 3,
            unique: true,
            key_fields: &[],
            sequence: None,
            on_sequence_failure: outbox::SequenceFailure::Hold,
            concurrency: None,
            timeout: None,
            rate: None,
            rate_key: None,
            fair: None,
            cost: None,
            subject: None,
        }
    );
    assert_eq!(serde_json::to_value(Ping { at: 5 }).expect("serializes"), json!({"at": 5}));
}

#[test]
fn split_attributes_and_partial_options() {
    assert_eq!(Notify::KIND, "notify");
    assert_eq!(Notify::OPTS, KindOpts { queue: "mail", unique: false, ..KindOpts::DEFAULT });
}

#[test]
fn screaming_kebab_and_serialize_only_rename() {
    assert_eq!(Audit::OPTS, KindOpts { max_attempts: 1, key_fields: &["ACTOR-ID", "evt"], ..KindOpts::DEFAULT });
    let audit = Audit { actor_id: 4, note: String::new(), event_name: "login".into() };
    let value: Value = serde_json::to_value(&audit).expect("serializes");
    assert_eq!(value, json!({"ACTOR-ID": 4, "NOTE": "", "evt": "login"}));
    let object = value.as_object().expect("object");
    for field in Audit::OPTS.key_fields {
        assert!(object.contains_key(*field), "{field} missing from {value}");
    }
}

#[test]
fn options_from_macro_fragments() {
    assert_eq!(FromMacro::KIND, "from_macro");
    assert_eq!(FromMacro::OPTS, KindOpts { priority: -3, key_fields: &["id"], ..KindOpts::DEFAULT });
    assert_keys_are_properties(&FromMacro { id: 1 });
}

/// A confirmation about its order: the subject template reads a serialized field.
#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(kind = "order.confirm", subject = "order:{orderId}")]
struct ConfirmOrder {
    order_id: u64,
}

#[test]
fn subject_template() {
    assert_eq!(ConfirmOrder::OPTS, KindOpts { subject: Some("order:{orderId}"), ..KindOpts::DEFAULT });
    let kind = outbox::Kind::of::<ConfirmOrder>().expect("kind");
    assert_eq!(kind.subject(), Some("order:{orderId}"));
    assert_eq!(serde_json::to_value(ConfirmOrder { order_id: 42 }).expect("serializes"), json!({"orderId": 42}));
}
