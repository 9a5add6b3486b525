//! `claude_extraction`: run a frozen prompt through an [`Extractor`] once, and keep the answer beside its
//! prompt hash so a re-run does not pay twice.

use std::sync::Arc;

use outbox::{Job, JobContext, JobError, Violation};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::atomic;
use crate::create_file::{self, Written, path_rule};
use crate::error::{Error, Result};
use crate::extract::{ExtractRequest, Extraction, Extractor, Usage};
use crate::root::{self, Root, checked, classify};

/// Suffix of the sidecar file written beside each answer.
const SIDECAR_SUFFIX: &str = ".extraction.json";
/// Sidecars are a few hundred bytes; anything far larger is not one of ours.
const SIDECAR_MAX_BYTES: u64 = 64 * 1024;

/// Asks the model `prompt` and writes the answer atomically to `targetPath` beneath the root, with a sidecar
/// `<targetPath>.extraction.json` recording the prompt hash, model, usage, cost and the answer's sha256.
///
/// `promptHash` must be the sha256 (lowercase hex) of `prompt`; `requirementId` and `promptHash` form the
/// idempotency key. When the target already holds an answer whose sidecar records the same prompt hash and
/// the file's sha256, the job succeeds without calling the model. The job output records `path`, `sha256`,
/// `size`, `prompt_hash`, `requirement_id`, `model`, `usage`, `cost_usd` and `reused`; a reused answer
/// costs this job nothing, so its `usage` is zero and `cost_usd` 0.
///
/// A field the kind does not know is refused at enqueue, naming it.
#[derive(Job, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[job(
    kind = "claude_extraction",
    max_attempts = 5,
    sequence = "fs:{targetPath:path}",
    validate = Self::check
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaudeExtraction {
    /// The frozen prompt, sent verbatim.
    pub prompt: String,
    /// Where the answer goes, relative to the root.
    pub target_path: String,
    /// The requirement the answer belongs to.
    #[job(key)]
    pub requirement_id: String,
    /// sha256 (lowercase hex) of `prompt`.
    #[job(key)]
    pub prompt_hash: String,
}

impl std::fmt::Debug for ClaudeExtraction {
    // Prompts can be long and private; logs get their size and hash only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaudeExtraction")
            .field("prompt", &format_args!("<{} bytes>", self.prompt.len()))
            .field("target_path", &self.target_path)
            .field("requirement_id", &self.requirement_id)
            .field("prompt_hash", &self.prompt_hash)
            .finish()
    }
}

impl ClaudeExtraction {
    /// A job for `prompt` with its hash computed.
    pub fn new(prompt: impl Into<String>, target_path: impl Into<String>, requirement_id: impl Into<String>) -> Self {
        let prompt = prompt.into();
        let prompt_hash = atomic::sha256_hex(prompt.as_bytes());
        ClaudeExtraction { prompt, target_path: target_path.into(), requirement_id: requirement_id.into(), prompt_hash }
    }

    /// Rules beyond the schema, checked at enqueue and before the handler runs.
    fn check(&self) -> Result<(), Vec<Violation>> {
        let mut violations: Vec<Violation> = path_rule("/targetPath", &self.target_path).into_iter().collect();
        // The sidecar is written after the answer is paid for: a name it cannot have must fail here.
        let last = self.target_path.rsplit('/').next().unwrap_or_default();
        if violations.is_empty() && last.len() + SIDECAR_SUFFIX.len() > root::NAME_MAX {
            violations.push(Violation {
                path: "/targetPath".into(),
                message: format!("the file name leaves no room for the `{SIDECAR_SUFFIX}` sidecar (255 bytes)"),
            });
        } else if violations.is_empty() && self.target_path.len() + SIDECAR_SUFFIX.len() > root::PATH_MAX {
            violations.push(Violation {
                path: "/targetPath".into(),
                message: format!("the path leaves no room for the `{SIDECAR_SUFFIX}` sidecar (4096 bytes)"),
            });
        }
        let expected = atomic::sha256_hex(self.prompt.as_bytes());
        if self.prompt_hash != expected {
            violations.push(Violation {
                path: "/promptHash".into(),
                message: format!(
                    "`{}` is not the sha256 (lowercase hex) of the prompt",
                    root::shown(&self.prompt_hash)
                ),
            });
        }
        if self.requirement_id.is_empty() {
            violations.push(Violation { path: "/requirementId".into(), message: "the requirement id is empty".into() });
        }
        if violations.is_empty() { Ok(()) } else { Err(violations) }
    }
}

/// What the sidecar beside an answer records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sidecar {
    requirement_id: String,
    prompt_hash: String,
    model: String,
    usage: Usage,
    cost_usd: Option<f64>,
    /// sha256 of the answer file.
    sha256: String,
    size: u64,
    written_at: chrono::DateTime<chrono::Utc>,
}

fn sidecar_path(target: &str) -> String {
    format!("{target}{SIDECAR_SUFFIX}")
}

/// The answer already on disk for this prompt: the target's sha256 and size match its sidecar, whose prompt
/// hash is the job's.
fn previous_answer(root: &Root, job: &ClaudeExtraction) -> Result<Option<Sidecar>> {
    let rel = checked(&job.target_path)?;
    let Some(dir) = root.parent(&rel, false)? else { return Ok(None) };
    let sidecar_name = format!("{}{SIDECAR_SUFFIX}", rel.name);
    let bytes = atomic::read_small(&dir, &sidecar_name, SIDECAR_MAX_BYTES)
        .map_err(classify("reading the sidecar of", &job.target_path))?;
    // An unreadable or foreign sidecar only means the answer cannot be trusted: ask again.
    let Some(sidecar) = bytes.and_then(|b| serde_json::from_slice::<Sidecar>(&b).ok()) else { return Ok(None) };
    if sidecar.prompt_hash != job.prompt_hash {
        return Ok(None);
    }
    let entry = atomic::inspect(&dir, rel.name).map_err(classify("reading", &job.target_path))?;
    let matches = entry == atomic::Entry::File { sha256: sidecar.sha256.clone(), size: sidecar.size };
    Ok(matches.then_some(sidecar))
}

/// Writes the answer, then its sidecar, each atomically. A crash between the two leaves an answer without a
/// matching sidecar, which only costs a second call.
fn store(root: &Root, job: &ClaudeExtraction, answer: &Extraction) -> Result<Sidecar> {
    let Written { sha256, size, .. } = create_file::write(root, &job.target_path, answer.text.as_bytes(), true)?;
    let sidecar = Sidecar {
        requirement_id: job.requirement_id.clone(),
        prompt_hash: job.prompt_hash.clone(),
        model: answer.model.clone(),
        usage: answer.usage.clone(),
        cost_usd: answer.cost_usd,
        sha256,
        size,
        written_at: chrono::Utc::now(),
    };
    let bytes = serde_json::to_vec_pretty(&sidecar)
        .map_err(|e| Error::Internal(format!("encoding the sidecar of `{}`: {e}", root::shown(&job.target_path))))?;
    create_file::write(root, &sidecar_path(&job.target_path), &bytes, true)?;
    Ok(sidecar)
}

async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> std::result::Result<T, JobError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Error::into_job_error),
        Err(e) => Err(JobError::retry(format!("the task {what} died: {e}"))),
    }
}

fn output(job: &ClaudeExtraction, sidecar: &Sidecar, reused: bool) -> Value {
    let (usage, cost) = if reused { (Usage::default(), Some(0.0)) } else { (sidecar.usage.clone(), sidecar.cost_usd) };
    json!({
        "path": job.target_path,
        "sha256": sidecar.sha256,
        "size": sidecar.size,
        "prompt_hash": job.prompt_hash,
        "requirement_id": job.requirement_id,
        "model": sidecar.model,
        "usage": usage,
        "cost_usd": cost,
        "reused": reused,
    })
}

/// The registered handler.
pub(crate) async fn handle(
    root: Root,
    extractor: Arc<dyn Extractor>,
    job: ClaudeExtraction,
    ctx: JobContext,
) -> std::result::Result<Value, JobError> {
    let job = Arc::new(job);
    let (r, j) = (root.clone(), Arc::clone(&job));
    if let Some(sidecar) = blocking("looking for a previous answer", move || previous_answer(&r, &j)).await? {
        tracing::info!(job_id = ctx.id(), requirement_id = %job.requirement_id, prompt_hash = %job.prompt_hash,
            path = %root::shown(&job.target_path), model = %sidecar.model, "extraction already answered; reused");
        return Ok(output(&job, &sidecar, true));
    }
    let request = ExtractRequest {
        prompt: job.prompt.clone(),
        prompt_hash: job.prompt_hash.clone(),
        requirement_id: job.requirement_id.clone(),
    };
    let answer = tokio::select! {
        answer = extractor.extract(&request) => answer,
        // Giving the attempt back at shutdown is cheaper than waiting out a long model call.
        () = ctx.cancelled() => return Err(JobError::retry("interrupted by shutdown before the model answered")),
    };
    let answer = answer
        .map_err(|source| Error::Extract { requirement_id: job.requirement_id.clone(), source }.into_job_error())?;
    let (r, j) = (root, Arc::clone(&job));
    let sidecar = blocking("writing the answer", move || store(&r, &j, &answer)).await?;
    tracing::info!(job_id = ctx.id(), requirement_id = %job.requirement_id, prompt_hash = %job.prompt_hash,
        path = %root::shown(&job.target_path), model = %sidecar.model, input_tokens = sidecar.usage.input_tokens,
        output_tokens = sidecar.usage.output_tokens, cost_usd = ?sidecar.cost_usd, "extraction written");
    Ok(output(&job, &sidecar, false))
}
