use outbox::Job;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[job(kind = "confirm_order", subject = "order:{order_id}")]
struct ConfirmOrder {
    order_id: u64,
}

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "ship_order", subject = "order:{id")]
struct ShipOrder {
    id: u64,
}

#[derive(Job, Serialize, Deserialize, JsonSchema)]
#[job(kind = "bill_order", subject = 42)]
struct BillOrder {
    id: u64,
}

fn main() {}
