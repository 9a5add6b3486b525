//! The application the examples share: orders, and the confirmation e-mail each order implies. The quickstart
//! (`quickstart.rs`) runs it; `tests/orders.rs` tests it with `outbox::testing`, as an application tests
//! its own jobs.

use outbox::{EnqueueOpts, Job, JobContext, JobError};
use schemars::JsonSchema;
use sea_orm::entity::prelude::*;
use sea_orm::{ActiveValue::Set, ConnectionTrait, DatabaseTransaction, Schema};
use serde::{Deserialize, Serialize};

/// The domain: orders.
pub mod order {
    use sea_orm::entity::prelude::*;

    /// One order.
    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "orders")]
    pub struct Model {
        /// Its id.
        #[sea_orm(primary_key)]
        pub id: i64,
        /// Who placed it.
        pub customer: String,
        /// Its total, in cents.
        pub total_cents: i64,
    }

    /// Orders relate to nothing else here.
    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// The side effect an order implies: a confirmation e-mail, keyed by order so it is sent once per order.
#[derive(Job, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "send_order_confirmation", queue = "mail", max_attempts = 5)]
#[serde(rename_all = "camelCase")]
pub struct SendOrderConfirmation {
    /// The order.
    #[job(key)]
    pub order_id: i64,
    /// Where the confirmation goes.
    #[schemars(email)]
    pub email: String,
}

/// The application's error: its own refusals, database errors, and the outbox's.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The order was refused.
    #[error("order refused: {0}")]
    Refused(String),
    /// A database statement failed.
    #[error(transparent)]
    Db(#[from] DbErr),
    /// The outbox refused the job.
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
}

/// Creates the orders table if it is missing.
pub async fn create_orders_table<C: ConnectionTrait>(db: &C) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    db.execute(&Schema::new(backend).create_table_from_entity(order::Entity).if_not_exists().to_owned()).await?;
    Ok(())
}

/// Writes an order and its confirmation job in the caller's transaction.
pub async fn place_order(txn: &DatabaseTransaction, customer: &str, total_cents: i64) -> Result<i64, AppError> {
    let order =
        order::ActiveModel { customer: Set(customer.into()), total_cents: Set(total_cents), ..Default::default() }
            .insert(txn)
            .await?;
    let job = SendOrderConfirmation { order_id: order.id, email: format!("{customer}@example.com") };
    outbox::enqueue(txn, &job, EnqueueOpts::new()).await?;
    Ok(order.id)
}

/// The handler: "sends" the confirmation and records where it went. A mailbox the mail server rejects for
/// good (here, any address at `bounce.example`) fails the job without retrying.
pub async fn send_order_confirmation(
    job: SendOrderConfirmation,
    ctx: JobContext,
) -> Result<serde_json::Value, JobError> {
    if job.email.ends_with("@bounce.example") {
        return Err(JobError::permanent(format!(
            "mailbox {} rejected the confirmation of order {}",
            job.email, job.order_id
        )));
    }
    tracing::info!(order_id = job.order_id, attempt = ctx.attempt(), "sending the order confirmation");
    Ok(serde_json::json!({ "sent_to": job.email, "order_id": job.order_id }))
}
