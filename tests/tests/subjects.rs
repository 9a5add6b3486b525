//! Jobs about a domain row: subjects set at enqueue or derived from the payload, refused when no job could carry
//! them; jobs as sea-orm entities, joined to the application's own table; and jobs enqueued and cancelled from an
//! application's `ActiveModelBehavior` hooks, in the caller's transaction.

use outbox::entity::job;
use outbox::prelude::*;
use outbox::{Error, JobStatus, ops};
use outbox_tests::{Probe, TestDb, conformance, exec, scalar};
use sea_orm::sea_query::{Expr, ExprTrait, JoinType};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QueryTrait, Set, TransactionTrait};
use serde::{Deserialize, Serialize};

/// The confirmation of an order, about the order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Job)]
#[job(kind = "test.confirm_order", subject = "order:{order_id}")]
struct ConfirmOrder {
    #[serde(skip_serializing_if = "Option::is_none")]
    order_id: Option<i64>,
    note: String,
}

fn confirm(order_id: i64) -> ConfirmOrder {
    ConfirmOrder { order_id: Some(order_id), note: String::new() }
}

/// The application's own table, an entity whose hooks enqueue and cancel its confirmation in the transaction that
/// saves or deletes the order.
mod order {
    use outbox::EnqueueOpts;
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
    #[sea_orm(table_name = "orders")]
    pub(crate) struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub(crate) id: i64,
        pub(crate) customer: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub(crate) enum Relation {}

    /// The subject the order's jobs carry.
    pub(crate) fn subject(id: i64) -> String {
        format!("order:{id}")
    }

    #[async_trait::async_trait]
    impl ActiveModelBehavior for ActiveModel {
        /// A new order's confirmation is enqueued through the same transaction: it commits or rolls back with it.
        async fn after_save<C: ConnectionTrait>(model: Model, db: &C, insert: bool) -> Result<Model, DbErr> {
            if insert {
                outbox::enqueue(db, &super::confirm(model.id), EnqueueOpts::new()).await?;
            }
            Ok(model)
        }

        /// A deleted order's jobs that have not started are cancelled with it.
        async fn before_delete<C: ConnectionTrait>(self, db: &C) -> Result<Self, DbErr> {
            if let sea_orm::ActiveValue::Set(id) | sea_orm::ActiveValue::Unchanged(id) = &self.id {
                outbox::ops::cancel_subject(db, &subject(*id)).await?;
            }
            Ok(self)
        }
    }
}

async fn orders_table(t: &TestDb) {
    exec(&t.db, "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL)", vec![]).await;
}

async fn jobs_of(t: &TestDb, subject: &str) -> i64 {
    scalar(&t.db, &format!("SELECT COUNT(*) FROM outbox_jobs WHERE subject = '{subject}'")).await
}

conformance!(an_order_saved_through_its_active_model_enqueues_in_its_transaction, mysql);
/// Saving an order through its active model in a transaction that rolls back leaves no job; one that commits leaves
/// exactly one, about the order; deleting the order cancels its pending jobs in the same transaction.
async fn an_order_saved_through_its_active_model_enqueues_in_its_transaction(t: TestDb) {
    orders_table(&t).await;
    let new = |id: i64| order::ActiveModel { id: Set(id), customer: Set("ada".into()) };

    let txn = t.db.begin().await.expect("begin");
    new(1).insert(&txn).await.expect("insert in a transaction");
    assert_eq!(scalar(&txn, "SELECT COUNT(*) FROM outbox_jobs").await, 1, "the hook's job, seen by its transaction");
    txn.rollback().await.expect("rollback");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0, "rolled back with the order");

    let txn = t.db.begin().await.expect("begin");
    let saved = new(1).insert(&txn).await.expect("insert");
    txn.commit().await.expect("commit");
    assert_eq!(jobs_of(&t, "order:1").await, 1);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 1, "exactly one job");
    let jobs = ops::by_subject(&t.db, "order:1", 10).await.expect("by subject");
    assert_eq!((jobs.len(), jobs[0].kind.as_str(), jobs[0].status), (1, "test.confirm_order", JobStatus::Pending));

    // A second enqueue about the order, then the order deleted in a transaction that rolls back: nothing changes.
    outbox::enqueue(&t.db, &ConfirmOrder { order_id: Some(1), note: "again".into() }, EnqueueOpts::new())
        .await
        .expect("enqueue");
    let txn = t.db.begin().await.expect("begin");
    order::ActiveModel::from(saved.clone()).delete(&txn).await.expect("delete");
    txn.rollback().await.expect("rollback");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'pending'").await, 2);
    // Committed, the delete cancels both.
    let txn = t.db.begin().await.expect("begin");
    order::ActiveModel::from(saved).delete(&txn).await.expect("delete");
    txn.commit().await.expect("commit");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'cancelled'").await, 2);
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM orders").await, 0);
}

conformance!(orders_join_their_jobs_by_subject, mysql);
/// A sea-orm query joins the application's `orders` to the jobs entity by subject and returns the jobs of one
/// customer's orders, and only those; the entity reads every column type of either backend.
async fn orders_join_their_jobs_by_subject(t: TestDb) {
    orders_table(&t).await;
    for (id, customer) in [(1, "ada"), (2, "bob"), (3, "ada")] {
        order::ActiveModel { id: Set(id), customer: Set(customer.into()) }.insert(&t.db).await.expect("order");
    }
    // A job about nothing, and one about an order that does not exist.
    outbox::enqueue(&t.db, &Probe { n: 1 }, EnqueueOpts::new()).await.expect("probe");
    outbox::enqueue(&t.db, &confirm(9), EnqueueOpts::new()).await.expect("orphan");

    let mut query = job::Entity::find().filter(order::Column::Customer.eq("ada"));
    QueryTrait::query(&mut query).join(
        JoinType::InnerJoin,
        order::Entity,
        Expr::col((job::Entity, job::Column::Subject)).eq(Expr::cust("'order:' || orders.id")),
    );
    let jobs = query.order_by_asc(job::Column::Subject).all(&t.db).await.expect("join");
    let subjects: Vec<_> = jobs.iter().map(|j| j.subject.clone().unwrap_or_default()).collect();
    assert_eq!(subjects, ["order:1", "order:3"]);
    let first = &jobs[0];
    assert_eq!((first.kind.as_str(), first.status.as_str(), first.attempts), ("test.confirm_order", "pending", 0));
    assert_eq!(first.payload["order_id"], 1);
    assert!(first.created_at.0 <= first.run_at.0 && first.completed_at.is_none(), "{first:?}");
    // Times compare as each backend stores them.
    let since = first.created_at.0 - chrono::Duration::seconds(1);
    let recent = job::Entity::find()
        .filter(job::Column::CreatedAt.gte(outbox::entity::at(&t.db, since)))
        .all(&t.db)
        .await
        .expect("by time");
    assert_eq!(recent.len(), 5);
    // The feed rows that name the job join too (its enqueue; claims and completions list many jobs in one row).
    let (job, events) = job::Entity::find_by_id(first.id.clone())
        .find_with_related(outbox::entity::job_event::Entity)
        .all(&t.db)
        .await
        .expect("history")
        .into_iter()
        .next()
        .expect("the job");
    assert_eq!(
        (job.id, events.iter().map(|e| e.event.as_str()).collect::<Vec<_>>()),
        (first.id.clone(), vec!["enqueued"])
    );
    // The entity is read-only: an active model refuses to save.
    let mut active: job::ActiveModel = first.clone().into();
    active.status = Set("completed".into());
    let err = active.update(&t.db).await.expect_err("read-only");
    assert!(err.to_string().contains("read-only through its entity"), "{err}");
}

conformance!(a_subject_no_job_could_carry_is_refused_and_nothing_is_written, mysql);
/// An empty subject, one over 256 bytes, one with NUL, and a template naming a field the payload lacks are refused
/// at enqueue with the reason, and nothing is written; the operator calls refuse the same subjects.
async fn a_subject_no_job_could_carry_is_refused_and_nothing_is_written(t: TestDb) {
    let refuse = async |job: ConfirmOrder, opts: EnqueueOpts, needle: &str| {
        let err = outbox::enqueue(&t.db, &job, opts).await.expect_err(needle);
        assert!(err.to_string().contains(needle), "{needle}: {err}");
        err
    };
    let err = refuse(confirm(1), EnqueueOpts::new().subject(""), "the subject is empty").await;
    assert!(matches!(err, Error::InvalidOpts { ref kind, .. } if kind == "test.confirm_order"), "{err:?}");
    refuse(confirm(1), EnqueueOpts::new().subject("x".repeat(257)), "257 bytes, over the limit of 256").await;
    refuse(confirm(1), EnqueueOpts::new().subject("a\0b"), "NUL").await;
    let err = refuse(
        ConfirmOrder { order_id: None, note: String::new() },
        EnqueueOpts::new(),
        "is missing, and the subject `order:{order_id}` needs it",
    )
    .await;
    assert!(err.to_string().contains("/order_id"), "names the field: {err}");
    let long = ConfirmOrder { order_id: Some(1), note: String::new() };
    refuse(long, EnqueueOpts::new().subject("y".repeat(300)), "300 bytes").await;
    // A batch with one bad subject writes none of it.
    let batch = [confirm(1), ConfirmOrder { order_id: None, note: String::new() }];
    assert!(outbox::enqueue_batch(&t.db, &batch, EnqueueOpts::new()).await.is_err());
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, 0, "nothing written");
    // Exactly 256 bytes is a subject.
    let id = outbox::enqueue(&t.db, &confirm(1), EnqueueOpts::new().subject("z".repeat(256))).await.expect("256");
    assert_eq!(ops::get(&t.db, id.id()).await.expect("get").subject.map(|s| s.len()), Some(256));
    for bad in ["", "a\0"] {
        assert!(ops::cancel_subject(&t.db, bad).await.is_err(), "cancel {bad:?}");
        assert!(ops::retry_subject(&t.db, bad).await.is_err(), "retry {bad:?}");
    }
}
