//! `create_file`: write a file atomically beneath the root, harmless to run again.

use outbox::{Job, JobContext, JobError, Violation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::atomic::{self, Entry, Replace};
use crate::error::{Error, Result};
use crate::root::{self, Root, checked, classify};

/// Writes `content` to `path` beneath the root: parents are created, the file is replaced atomically (temp
/// file, fsync, rename, directory fsync).
///
/// Running it again is harmless: a target that already holds exactly `content` counts as done. A target
/// holding other content fails the job permanently unless `overwrite` is set. The job output records
/// `path`, `sha256` (lowercase hex), `size` and `written` (false when the content was already there).
///
/// A field the kind does not know (a misspelt `overwrite`) is refused at enqueue, naming it, rather than
/// ignored.
#[derive(Job, Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[job(kind = "create_file", sequence = "fs:{path:path}", validate = Self::check)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateFile {
    /// Relative to the root, `/`-separated, normalized; never leaving the root.
    pub path: String,
    /// The file's content (UTF-8).
    pub content: String,
    /// Replace a file that holds other content (default false: fail instead).
    #[serde(default)]
    pub overwrite: bool,
}

impl CreateFile {
    /// Rules beyond the schema, checked at enqueue and before the handler runs.
    fn check(&self) -> Result<(), Vec<Violation>> {
        path_rule("/path", &self.path).map_or(Ok(()), |v| Err(vec![v]))
    }
}

/// The lexical path rules as a violation at `pointer`.
pub(crate) fn path_rule(pointer: &str, path: &str) -> Option<Violation> {
    root::check(path).err().map(|rule| Violation {
        path: pointer.to_owned(),
        message: format!("path `{}` is refused: {rule}", root::shown_refused(path)),
    })
}

/// What `create_file` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) sha256: String,
    pub(crate) size: u64,
    /// False when the content was already in place.
    pub(crate) written: bool,
}

/// Writes `content` at `path` like `create_file` does (also used for extraction answers and sidecars).
pub(crate) fn write(root: &Root, path: &str, content: &[u8], overwrite: bool) -> Result<Written> {
    let rel = checked(path)?;
    let dir = root.parent(&rel, true)?.ok_or_else(|| Error::Internal("a created parent is missing".into()))?;
    let sha256 = atomic::sha256_hex(content);
    let size = content.len() as u64;
    let entry = atomic::inspect(&dir, rel.name).map_err(classify("reading", path))?;
    if entry == (Entry::File { sha256: sha256.clone(), size }) {
        // Done before (a re-run after a crash between rename and completion): make sure it is durable.
        atomic::sync_file(&dir, rel.name).map_err(classify("syncing", path))?;
        atomic::sync_dir(&dir).map_err(classify("syncing the directory of", path))?;
        return Ok(Written { sha256, size, written: false });
    }
    refuse(path, &entry, overwrite)?;
    let replace = if overwrite { Replace::Always } else { Replace::Never };
    match atomic::write_atomic(&dir, rel.name, content, replace) {
        Ok(()) => Ok(Written { sha256, size, written: true }),
        // Without overwrite, something appeared since the look above: judge it as the look would have.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let entry = atomic::inspect(&dir, rel.name).map_err(classify("reading", path))?;
            if entry == (Entry::File { sha256: sha256.clone(), size }) {
                return Ok(Written { sha256, size, written: false });
            }
            refuse(path, &entry, false)?;
            Err(classify("writing", path)(e))
        }
        Err(e) => Err(classify("writing", path)(e)),
    }
}

/// Whether the entry at `path` (not holding the wanted content) may be replaced.
fn refuse(path: &str, entry: &Entry, overwrite: bool) -> Result<()> {
    match entry {
        Entry::Directory => Err(Error::IsDirectory { path: root::shown(path) }),
        Entry::File { sha256, .. } if !overwrite => {
            Err(Error::Conflict { path: root::shown(path), found: format!("other content (sha256 {sha256})") })
        }
        Entry::Other(what) if !overwrite => Err(Error::Conflict { path: root::shown(path), found: (*what).into() }),
        Entry::Absent | Entry::File { .. } | Entry::Other(_) => Ok(()),
    }
}

/// The registered handler: writes on the blocking pool, records `path`, `sha256`, `size` and `written`.
pub(crate) async fn handle(root: Root, job: CreateFile, ctx: JobContext) -> std::result::Result<Value, JobError> {
    let CreateFile { path, content, overwrite } = job;
    let task_path = path.clone();
    let done = tokio::task::spawn_blocking(move || write(&root, &task_path, content.as_bytes(), overwrite))
        .await
        .map_err(|e| JobError::retry(format!("the task writing `{}` died: {e}", root::shown(&path))))?;
    let Written { sha256, size, written } = done.map_err(Error::into_job_error)?;
    tracing::info!(job_id = ctx.id(), path = %root::shown(&path), sha256 = %sha256, size, written, "file created");
    Ok(json!({ "path": path, "sha256": sha256, "size": size, "written": written }))
}
