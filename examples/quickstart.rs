//! Run with: `cargo run --example quickstart` (from the workspace root).
//!
//! One SQLite file, `quickstart.db` in the working directory (`OUTBOX_QUICKSTART_DB` overrides it): an order
//! row and the job that sends its confirmation are written in one transaction; a transaction that fails
//! leaves neither; the same intent enqueued twice collapses onto one job; a worker drains the queue; the
//! operator functions summarise what happened. The application's code (the order, its job and the handler) is
//! in `src/lib.rs`, and `tests/orders.rs` tests it.

use std::time::Duration;

use outbox::{EnqueueOpts, Worker, ops};
use outbox_examples::{
    AppError, SendOrderConfirmation, create_orders_table, order, place_order, send_order_confirmation,
};
use sea_orm::{EntityTrait, PaginatorTrait};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sea_orm=warn,sqlx=warn".into()),
        )
        .init();
    // The same program runs on PostgreSQL: OUTBOX_QUICKSTART_URL=postgres://user@host/db
    let db = match std::env::var("OUTBOX_QUICKSTART_URL") {
        Ok(url) => outbox::connect(&url).await?,
        Err(_) => {
            let path = std::env::var("OUTBOX_QUICKSTART_DB").unwrap_or_else(|_| "quickstart.db".into());
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
            outbox::connect(&format!("sqlite://{path}?mode=rwc")).await?
        }
    };
    outbox::migrate(&db).await?;
    create_orders_table(&db).await?;

    // 1. An order and its job commit together.
    let order_id: i64 = outbox::transaction(&db, async |txn| place_order(txn, "ada", 4_200).await).await?;
    println!("order {order_id} placed with its confirmation job");

    // 2. A transaction that fails after enqueueing leaves neither the order nor the job.
    let failed: Result<i64, AppError> = outbox::transaction(&db, async |txn| {
        place_order(txn, "grace", -1).await?;
        Err(AppError::Refused("a negative total; the order and its job roll back together".into()))
    })
    .await;
    if let Err(e) = failed {
        println!("second order: {e}");
    }

    // 3. The same intent again (a retried request, say) collapses onto the pending job.
    let again =
        outbox::enqueue(&db, &SendOrderConfirmation { order_id, email: "ada@example.com".into() }, EnqueueOpts::new())
            .await?;
    println!("duplicate enqueue: new job written = {}, job {}", again.is_new(), again.id());

    // 4. An invalid payload is refused before anything is written.
    let invalid = outbox::enqueue(
        &db,
        &SendOrderConfirmation { order_id: 99, email: "not an address".into() },
        EnqueueOpts::new(),
    )
    .await;
    if let Err(e) = invalid {
        println!("invalid payload refused: {e}");
    }

    // 5. A worker drains the queue.
    Worker::builder(&db)
        .concurrency(4)
        .poll_interval(Duration::from_millis(100))
        .register(send_order_confirmation)
        .build()
        .await?
        .drain()
        .await?;

    // 6. What the operator sees.
    let stats = ops::stats(&db, Duration::from_secs(3600)).await?;
    let orders = order::Entity::find().count(&db).await?;
    println!("\nsummary: {orders} order(s) in the database");
    for c in &stats.counts {
        println!("  {:<26} {:<10} {}", c.kind, c.status, c.count);
    }
    println!(
        "  failed: {}, stuck: {}, keys enqueued more than once: {}",
        stats.failed.len(),
        stats.stuck.len(),
        stats.duplicates.len()
    );
    for d in &stats.durations {
        println!("  {} completed {} job(s), mean run {:.1} ms", d.kind, d.completed, d.avg_run_ms);
    }
    Ok(())
}
