//! Run with: `cargo run --example files` (from the workspace root).
//!
//! Files kept in step with the database. In `outbox-files-example/` under the system's temp directory
//! (`OUTBOX_FILES_DIR` overrides it): `files.db` holds a `notes` table and the outbox; `tree/` is the root
//! the file jobs are confined to. Each note is written together with the job that publishes it as
//! `notes/<id>.md`, in one transaction; deleting a note enqueues the deletion of its file the same way. A
//! worker runs the jobs, someone edits a published file by hand, and the reconciler reports the drift.

use std::time::Duration;

use outbox::{EnqueueOpts, Worker};
use outbox_fs::{CreateFile, DeleteFile, ReconcileOpts, Root};
use sea_orm::entity::prelude::*;
use sea_orm::{ActiveValue::Set, DatabaseTransaction, Schema};

/// The domain: notes.
mod note {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "notes")]
    pub(crate) struct Model {
        #[sea_orm(primary_key)]
        pub id: i64,
        pub title: String,
        pub body: String,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub(crate) enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// The application's error.
#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Db(#[from] DbErr),
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
    #[error(transparent)]
    Fs(#[from] outbox_fs::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

fn note_path(id: i64) -> String {
    format!("notes/{id}.md")
}

/// Writes a note and the job that publishes it, in the caller's transaction.
async fn add_note(txn: &DatabaseTransaction, title: &str, body: &str) -> Result<i64, AppError> {
    let note = note::ActiveModel { title: Set(title.into()), body: Set(body.into()), ..Default::default() }
        .insert(txn)
        .await?;
    let file = CreateFile { path: note_path(note.id), content: format!("# {title}\n\n{body}\n"), overwrite: true };
    outbox::enqueue(txn, &file, EnqueueOpts::new()).await?;
    Ok(note.id)
}

/// Deletes a note and enqueues the deletion of its file, in the caller's transaction.
async fn remove_note(txn: &DatabaseTransaction, id: i64) -> Result<(), AppError> {
    note::Entity::delete_by_id(id).exec(txn).await?;
    outbox::enqueue(txn, &DeleteFile { path: note_path(id), require_exists: false }, EnqueueOpts::new()).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), AppError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,sea_orm=warn,sqlx=warn".into()),
        )
        .init();
    let dir = std::env::var_os("OUTBOX_FILES_DIR")
        .map_or_else(|| std::env::temp_dir().join("outbox-files-example"), std::path::PathBuf::from);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(dir.join("tree"))?;
    let db = outbox::connect(&format!("sqlite://{}?mode=rwc", dir.join("files.db").display())).await?;
    outbox::migrate(&db).await?;
    let backend = db.get_database_backend();
    db.execute(&Schema::new(backend).create_table_from_entity(note::Entity).if_not_exists().to_owned()).await?;
    let root = Root::open(dir.join("tree"))?;

    // 1. Each note commits together with the job that publishes it.
    let mut ids = Vec::new();
    for (title, body) in [("groceries", "milk, eggs"), ("ideas", "a queue in a table"), ("draft", "to be removed")] {
        let id: i64 = outbox::transaction(&db, async |txn| add_note(txn, title, body).await).await?;
        ids.push(id);
    }
    // 2. Removing a note enqueues the deletion of its file in the same transaction.
    let draft = ids[2];
    outbox::transaction(&db, async |txn| remove_note(txn, draft).await).await?;
    println!("in {}: 3 notes written and 1 removed, each with its file job", dir.display());

    // 3. A worker runs the jobs (in order: the draft's file is created, then deleted).
    outbox_fs::register_handlers(Worker::builder(&db).poll_interval(Duration::from_millis(50)), &root, None)
        .concurrency(1)
        .build()
        .await?
        .drain()
        .await?;
    for entry in std::fs::read_dir(dir.join("tree/notes"))? {
        println!("  published {}", entry?.path().display());
    }

    // 4. Someone edits a published file by hand, and deletes another.
    std::fs::write(dir.join("tree").join(note_path(ids[0])), "# groceries\n\nchocolate\n")?;
    std::fs::remove_file(dir.join("tree").join(note_path(ids[1])))?;

    // 5. The reconciler compares the tree with the latest completed job of every path; it changes nothing.
    let opts = ReconcileOpts::new().on_progress(|p| println!("  reconciling: {}/{} jobs", p.jobs_done, p.jobs_total));
    let report = outbox_fs::reconcile(&db, &root, opts).await?;
    println!(
        "\nreconciled {} jobs over {} paths: {} ok, {} discrepancies",
        report.jobs_scanned,
        report.paths_checked,
        report.ok,
        report.discrepancies.len()
    );
    for d in &report.discrepancies {
        println!("  {d}");
    }
    Ok(())
}
