//! `delete_file`: remove one file (or symlink) beneath the root, harmless to run again.

use std::io;

use outbox::{Job, JobContext, JobError, Violation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::atomic;
use crate::create_file::path_rule;
use crate::error::{Error, Result};
use crate::root::{self, Root, checked, classify};

/// Deletes the file at `path` beneath the root. A symlink there is removed itself, never its target; a
/// directory there fails the job permanently.
///
/// A missing file is an error only when `requireExists` holds and no earlier run of this job could have
/// deleted it (the first run): a retry after a crash that followed the deletion succeeds. The job
/// output records `path` and `deleted` (whether this attempt removed something).
///
/// A field the kind does not know (a misspelt `requireExists`) is refused at enqueue, naming it.
#[derive(Job, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "delete_file", sequence = "fs:{path:path}", validate = Self::check)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeleteFile {
    /// Relative to the root, `/`-separated, normalized; never leaving the root.
    pub path: String,
    /// Fail (on the first run) when there is nothing to delete (default false).
    #[serde(default)]
    pub require_exists: bool,
}

impl DeleteFile {
    /// Rules beyond the schema, checked at enqueue and before the handler runs.
    fn check(&self) -> Result<(), Vec<Violation>> {
        path_rule("/path", &self.path).map_or(Ok(()), |v| Err(vec![v]))
    }
}

/// Removes the entry; `Ok(false)` when there was none.
pub(crate) fn remove(root: &Root, path: &str) -> Result<bool> {
    let rel = checked(path)?;
    let Some(dir) = root.parent(&rel, false)? else { return Ok(false) };
    match dir.symlink_metadata(rel.name) {
        Ok(meta) if meta.is_dir() => return Err(Error::IsDirectory { path: root::shown(path) }),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(classify("looking at", path)(e)),
    }
    // unlinkat without AT_REMOVEDIR: a directory swapped in since the look fails with EISDIR, and a symlink
    // is removed itself.
    match dir.remove_file(rel.name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(classify("deleting", path)(e)),
    }
    atomic::sync_dir(&dir).map_err(classify("syncing the directory of", path))?;
    Ok(true)
}

/// The registered handler: deletes on the blocking pool, records `path` and `deleted`.
pub(crate) async fn handle(root: Root, job: DeleteFile, ctx: JobContext) -> std::result::Result<Value, JobError> {
    let DeleteFile { path, require_exists } = job;
    let task_path = path.clone();
    let deleted = tokio::task::spawn_blocking(move || remove(&root, &task_path))
        .await
        .map_err(|e| JobError::retry(format!("the task deleting `{}` died: {e}", root::shown(&path))))?
        .map_err(Error::into_job_error)?;
    // Only the first run can be sure nobody deleted the file on this job's behalf; `run` counts every start,
    // even those whose attempt was given back at shutdown.
    if !deleted && require_exists && ctx.run() <= 1 {
        return Err(Error::NotFound { path: root::shown(&path) }.into_job_error());
    }
    tracing::info!(job_id = ctx.id(), path = %root::shown(&path), deleted, attempt = ctx.attempt(), "file deleted");
    Ok(json!({ "path": path, "deleted": deleted }))
}
