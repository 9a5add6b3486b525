//! `claude_extraction` against a counting test extractor: hash checked at enqueue, answer and sidecar
//! written, no second call for an answer already on disk, retryable and permanent errors.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{TestDb, conformance, env, job, output, sha256_hex};
use outbox::{EnqueueOpts, Error, JobStatus};
use outbox_fs::ClaudeExtraction;
use outbox_fs::extract::{ExtractError, ExtractRequest, Extraction, Extractor, Usage};

/// Answers every prompt with its hash; the first `fail_first` calls fail with `failure`.
struct Counting {
    calls: AtomicUsize,
    fail_first: usize,
    failure: ExtractError,
}

impl Counting {
    fn new(fail_first: usize, failure: ExtractError) -> Arc<Counting> {
        Arc::new(Counting { calls: AtomicUsize::new(0), fail_first, failure })
    }
    fn answering() -> Arc<Counting> {
        Counting::new(0, ExtractError::Permanent(String::new()))
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Extractor for Counting {
    fn extract<'a>(
        &'a self,
        request: &'a ExtractRequest,
    ) -> Pin<Box<dyn Future<Output = Result<Extraction, ExtractError>> + Send + 'a>> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.fail_first {
                return Err(self.failure.clone());
            }
            Ok(Extraction {
                text: format!("answer to {}\n", request.prompt_hash),
                model: "claude-test-1".into(),
                usage: Usage { input_tokens: 120, output_tokens: 30, ..Usage::default() },
                cost_usd: Some(0.0042),
            })
        })
    }
}

fn worker(e: &common::Env, extractor: Arc<Counting>) -> outbox::WorkerBuilder {
    let builder =
        outbox::Worker::builder(&e.db).poll_interval(Duration::from_millis(20)).retry_policy(outbox::RetryPolicy {
            base: Duration::from_millis(10),
            max: Duration::from_millis(50),
            jitter: 0.0,
        });
    outbox_fs::register_handlers(builder, &e.root, Some(extractor))
}

conformance!(enqueue_rejects_a_prompt_hash_that_is_not_the_prompts, mysql);
async fn enqueue_rejects_a_prompt_hash_that_is_not_the_prompts(t: TestDb) {
    let e = env(t);
    let mut job_in = ClaudeExtraction::new("List the requirements.", "answers/r1.md", "REQ-1");
    job_in.prompt_hash = sha256_hex(b"another prompt");
    let err = outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.expect_err("wrong hash");
    let Error::InvalidPayload { violations, .. } = &err else { panic!("{err}") };
    assert_eq!(violations.iter().map(|v| v.path.as_str()).collect::<Vec<_>>(), ["/promptHash"], "{err}");
    assert!(!err.to_string().contains("List the requirements"), "the prompt stays out of errors: {err}");
    job_in.prompt_hash = job_in.prompt_hash.to_uppercase();
    assert!(outbox::enqueue(&e.db, &job_in, EnqueueOpts::new()).await.is_err(), "hex is lowercase");
    let escaping = ClaudeExtraction::new("p", "../answers/r1.md", "REQ-1");
    let err = outbox::enqueue(&e.db, &escaping, EnqueueOpts::new()).await.expect_err("escape");
    assert!(err.to_string().contains("at /targetPath") && err.to_string().contains("`..`"), "{err}");
}

conformance!(writes_answer_and_sidecar_and_never_pays_twice_for_one_prompt, mysql);
async fn writes_answer_and_sidecar_and_never_pays_twice_for_one_prompt(t: TestDb) {
    let e = env(t);
    let extractor = Counting::answering();
    let first = ClaudeExtraction::new("List the requirements.", "answers/r1.md", "REQ-1");
    let id = outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue");
    worker(&e, extractor.clone()).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(extractor.calls(), 1);
    let j = job(&e.db, id.id()).await;
    assert_eq!(j.status, JobStatus::Completed, "{:?}", j.last_error);
    let answer = std::fs::read(e.root_dir.join("answers/r1.md")).expect("answer");
    assert_eq!(answer, format!("answer to {}\n", first.prompt_hash).as_bytes());
    let out = output(&j);
    assert_eq!(out["sha256"], sha256_hex(&answer));
    assert_eq!(out["prompt_hash"], first.prompt_hash.as_str());
    assert_eq!(out["model"], "claude-test-1");
    assert_eq!((out["usage"]["input_tokens"].as_u64(), out["usage"]["output_tokens"].as_u64()), (Some(120), Some(30)));
    assert_eq!(out["cost_usd"].as_f64(), Some(0.0042));
    assert_eq!(out["reused"], false);
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(e.root_dir.join("answers/r1.md.extraction.json")).expect("sidecar"))
            .expect("sidecar json");
    assert_eq!(sidecar["prompt_hash"], first.prompt_hash.as_str());
    assert_eq!(sidecar["sha256"], sha256_hex(&answer));
    assert_eq!(sidecar["requirement_id"], "REQ-1");
    assert_eq!(sidecar["model"], "claude-test-1");

    // The same prompt again (another job: the first finished, so the key is free): answered from disk.
    let again = outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue");
    assert!(again.is_new());
    worker(&e, extractor.clone()).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(extractor.calls(), 1, "the answer on disk was reused");
    let j = job(&e.db, again.id()).await;
    assert_eq!(j.status, JobStatus::Completed, "{:?}", j.last_error);
    let out = output(&j);
    assert_eq!((out["reused"].as_bool(), out["sha256"].as_str()), (Some(true), Some(sha256_hex(&answer).as_str())));

    // A changed answer file no longer matches its sidecar: asked again.
    std::fs::write(e.root_dir.join("answers/r1.md"), "edited by hand").expect("edit");
    outbox::enqueue(&e.db, &first, EnqueueOpts::new()).await.expect("enqueue");
    worker(&e, extractor.clone()).build().await.expect("build").drain().await.expect("drain");
    assert_eq!(extractor.calls(), 2);
    assert_eq!(std::fs::read(e.root_dir.join("answers/r1.md")).expect("answer"), answer);
}

conformance!(retryable_errors_retry_and_permanent_errors_fail, mysql);
async fn retryable_errors_retry_and_permanent_errors_fail(t: TestDb) {
    let e = env(t);
    let flaky = Counting::new(2, ExtractError::Retryable("rate limited (429)".into()));
    let id = outbox::enqueue(&e.db, &ClaudeExtraction::new("p1", "r.md", "REQ-2"), EnqueueOpts::new())
        .await
        .expect("enqueue");
    let handle = worker(&e, flaky.clone()).build().await.expect("build").start();
    let done = common::eventually(Duration::from_secs(30), || {
        let db = e.db.clone();
        let id = id.id().to_owned();
        async move { job(&db, &id).await.status.is_terminal() }
    })
    .await;
    handle.shutdown().await.expect("shutdown");
    assert!(done);
    let j = job(&e.db, id.id()).await;
    assert_eq!((j.status, j.attempts, flaky.calls()), (JobStatus::Completed, 3, 3), "{:?}", j.last_error);
    let events: Vec<String> =
        outbox::ops::history(&e.db, id.id()).await.expect("history").into_iter().map(|e| e.event.to_string()).collect();
    assert_eq!(events, ["enqueued", "claimed", "retried", "claimed", "retried", "claimed", "completed"]);

    let refused = Counting::new(usize::MAX, ExtractError::Permanent("invalid x-api-key".into()));
    let id = outbox::enqueue(&e.db, &ClaudeExtraction::new("p2", "s.md", "REQ-3"), EnqueueOpts::new())
        .await
        .expect("enqueue");
    worker(&e, refused.clone()).build().await.expect("build").drain().await.expect("drain");
    let j = job(&e.db, id.id()).await;
    assert_eq!((j.status, j.attempts, refused.calls()), (JobStatus::Failed, 1, 1));
    let error = j.last_error.expect("error");
    assert!(error.contains("extraction for requirement `REQ-3` failed: invalid x-api-key"), "{error}");
    assert!(!e.root_dir.join("s.md").exists() && !e.root_dir.join("s.md.extraction.json").exists());
}

conformance!(without_an_extractor_extraction_jobs_wait_for_a_worker_that_has_one, mysql);
async fn without_an_extractor_extraction_jobs_wait_for_a_worker_that_has_one(t: TestDb) {
    let e = env(t);
    let id = outbox::enqueue(&e.db, &ClaudeExtraction::new("p", "t.md", "REQ-4"), EnqueueOpts::new())
        .await
        .expect("enqueue");
    common::worker(&e).build().await.expect("build").drain().await.expect("drain");
    let j = job(&e.db, id.id()).await;
    assert_eq!((j.status, j.attempts), (JobStatus::Pending, 0));
    let debug = format!("{:?}", ClaudeExtraction::new("a secret prompt", "t.md", "REQ-4"));
    assert!(!debug.contains("secret") && debug.contains("<15 bytes>"), "{debug}");
}
