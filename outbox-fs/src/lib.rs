//! # outbox-fs
//!
//! Filesystem side effects kept in step with the database, and the reconciler that reports drift.
//!
//! Three job kinds, each confined to a [`Root`] directory that no payload path can leave (lexical rules at
//! enqueue; cap-std's beneath-the-root resolution at run time, through symlinks too):
//!
//! - [`CreateFile`] (`create_file`): write a file atomically; running it again is harmless.
//! - [`DeleteFile`] (`delete_file`): delete a file or symlink; running it again is harmless.
//! - [`ClaudeExtraction`] (`claude_extraction`): answer a frozen prompt through an [`extract::Extractor`]
//!   once, writing the answer atomically beside a sidecar that keeps a re-run from paying twice.
//!
//! [`register_handlers`] puts their handlers on a worker; [`reconcile`] checks that the tree still shows what
//! the latest completed job of every path left there, and reports every discrepancy without fixing any.
//!
//! ```
//! use outbox::{EnqueueOpts, Worker};
//! use outbox_fs::{CreateFile, ReconcileOpts, Root};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let tmp = tempfile::tempdir()?;
//! # let url = format!("sqlite://{}?mode=rwc", tmp.path().join("outbox.db").display());
//! # std::fs::create_dir(tmp.path().join("files"))?;
//! let db = outbox::connect(&url).await?;
//! outbox::migrate(&db).await?;
//! let root = Root::open(tmp.path().join("files"))?;
//!
//! let job = CreateFile { path: "notes/hello.txt".into(), content: "hello\n".into(), overwrite: false };
//! outbox::enqueue(&db, &job, EnqueueOpts::new()).await?;
//! outbox_fs::register_handlers(Worker::builder(&db), &root, None).build().await?.drain().await?;
//! assert_eq!(std::fs::read_to_string(tmp.path().join("files/notes/hello.txt"))?, "hello\n");
//!
//! // Escaping paths never reach the queue.
//! let escape = CreateFile { path: "../etc/passwd".into(), content: String::new(), overwrite: true };
//! assert!(outbox::enqueue(&db, &escape, EnqueueOpts::new()).await.is_err());
//!
//! let report = outbox_fs::reconcile(&db, &root, ReconcileOpts::new()).await?;
//! assert!(report.is_clean());
//! # Ok(()) }
//! ```

mod atomic;
mod claude_extraction;
mod create_file;
mod delete_file;
mod errno;
mod error;
pub mod extract;
mod reconcile;
mod register;
mod root;
mod startup;

pub use claude_extraction::ClaudeExtraction;
pub use create_file::CreateFile;
pub use delete_file::DeleteFile;
pub use error::{Error, Result};
pub use reconcile::{Discrepancy, DiscrepancyKind, Progress, ReconcileOpts, Report, reconcile};
pub use register::register_handlers;
pub use root::Root;
pub use startup::{STALE_TEMP_AGE, reconcile_at_start};
