//! Registering the filesystem handlers on a worker.

use std::sync::Arc;

use outbox::{JobContext, WorkerBuilder};

use crate::claude_extraction::{self, ClaudeExtraction};
use crate::create_file::{self, CreateFile};
use crate::delete_file::{self, DeleteFile};
use crate::extract::Extractor;
use crate::root::Root;

/// Registers the handlers of `create_file` and `delete_file` on `builder`, all confined to `root`, and of
/// `claude_extraction` when an `extractor` is given (without one, extraction jobs stay pending for a
/// worker that has one).
pub fn register_handlers(builder: WorkerBuilder, root: &Root, extractor: Option<Arc<dyn Extractor>>) -> WorkerBuilder {
    let (create_root, delete_root) = (root.clone(), root.clone());
    let builder = builder
        .register(move |job: CreateFile, ctx: JobContext| create_file::handle(create_root.clone(), job, ctx))
        .register(move |job: DeleteFile, ctx: JobContext| delete_file::handle(delete_root.clone(), job, ctx));
    match extractor {
        Some(extractor) => {
            let root = root.clone();
            builder.register(move |job: ClaudeExtraction, ctx: JobContext| {
                claude_extraction::handle(root.clone(), Arc::clone(&extractor), job, ctx)
            })
        }
        None => builder,
    }
}
