//! Worker processes for the multi-process tests: children of the `outbox-test-worker` binary and the run logs
//! they leave.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use outbox_tests::ChildProcess;

/// How a child worker is started.
pub(crate) struct Spawn<'a> {
    pub(crate) url: &'a str,
    pub(crate) log: &'a Path,
    /// `drain`, `serve` or `hang` (see the binary's docs).
    pub(crate) mode: &'a str,
    pub(crate) lease_ms: u64,
    pub(crate) concurrency: usize,
    /// Where the child's stderr goes (its warnings with `OUTBOX_LOG=warn`); inherited when `None`.
    pub(crate) stderr: Option<&'a Path>,
}

impl Spawn<'_> {
    /// Starts the child in a process group of its own, killed with the group when the handle is dropped.
    pub(crate) fn start(&self) -> ChildProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-test-worker"));
        command
            .arg(self.url)
            .arg(self.log)
            .arg(self.mode)
            .arg(self.lease_ms.to_string())
            .arg(self.concurrency.to_string());
        if let Some(path) = self.stderr {
            command.stderr(Stdio::from(std::fs::File::create(path).expect("child stderr file")));
            command.env("OUTBOX_LOG", "warn");
        }
        ChildProcess::spawn(&mut command)
    }
}

/// Waits for every child without blocking the runtime; past `timeout` kills them all and panics.
pub(crate) async fn wait_all(children: &mut [ChildProcess], timeout: Duration) -> Vec<ExitStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    loop {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                *status = child.try_wait().expect("wait for a worker process");
            }
        }
        if statuses.iter().all(Option::is_some) {
            return statuses.into_iter().flatten().collect();
        }
        if tokio::time::Instant::now() >= deadline {
            for child in children.iter_mut() {
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("worker processes still running after {timeout:?}: {statuses:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every handler execution the children logged.
#[derive(Debug, Default)]
pub(crate) struct Runs {
    /// Executions per job id, with the attempt and process of each.
    pub(crate) by_job: HashMap<String, Vec<(i64, u32)>>,
    /// Executions per log file.
    pub(crate) per_log: Vec<usize>,
}

impl Runs {
    pub(crate) fn read(logs: &[PathBuf]) -> Runs {
        Runs::read_after_kills(logs, &[])
    }

    /// [`Runs::read`] of processes some of which were SIGKILLed (their pids in `killed`): a line cut short is
    /// allowed as the last of a log whose process was killed, and left out; anywhere else it fails the test.
    pub(crate) fn read_after_kills(logs: &[PathBuf], killed: &[u32]) -> Runs {
        let mut runs = Runs::default();
        for log in logs {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            runs.per_log.push(lines.len());
            for (i, line) in lines.iter().enumerate() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let parsed = match fields.as_slice() {
                    [id, _n, attempt, pid] => {
                        attempt.parse::<i64>().ok().zip(pid.parse::<u32>().ok()).map(|r| (*id, r))
                    }
                    _ => None,
                };
                let Some((id, run)) = parsed else {
                    let pid = lines.first().and_then(|l| l.split_whitespace().nth(3)).and_then(|p| p.parse().ok());
                    let cut_short = i + 1 == lines.len() && pid.is_some_and(|p| killed.contains(&p));
                    assert!(cut_short, "{}: malformed run log line: {line:?}", log.display());
                    continue;
                };
                runs.by_job.entry(id.to_owned()).or_default().push(run);
            }
        }
        runs
    }

    /// Jobs executed more than once, with their executions.
    pub(crate) fn twice(&self) -> Vec<(&String, &Vec<(i64, u32)>)> {
        let mut twice: Vec<_> = self.by_job.iter().filter(|(_, runs)| runs.len() > 1).collect();
        twice.sort();
        twice
    }
}

/// One handler run: when it began, and when it ended unless its process was killed first.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) job: String,
    pub(crate) key: u64,
    pub(crate) seq: u32,
    pub(crate) pid: u32,
    pub(crate) begin: u64,
    pub(crate) end: Option<u64>,
}

/// The runs in a log of `B`/`E` lines, in order of their beginning.
pub(crate) fn runs(log: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut open: HashMap<(String, u32), usize> = HashMap::new();
    let mut runs: Vec<Run> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [what, job, key, seq, pid, at] = f.as_slice() else { panic!("malformed run line {line:?}") };
        let (pid, at): (u32, u64) = (pid.parse().expect("pid"), at.parse().expect("time"));
        match *what {
            "B" => {
                open.insert(((*job).to_owned(), pid), runs.len());
                runs.push(Run {
                    job: (*job).to_owned(),
                    key: key.parse().expect("key"),
                    seq: seq.parse().expect("seq"),
                    pid,
                    begin: at,
                    end: None,
                });
            }
            "E" => {
                let i =
                    open.remove(&((*job).to_owned(), pid)).unwrap_or_else(|| panic!("an end without a begin: {line}"));
                runs[i].end = Some(at);
            }
            other => panic!("unknown mark {other:?} in {line:?}"),
        }
    }
    runs.sort_by_key(|r| r.begin);
    runs
}

/// A chaos run of sequences: `keys` sequences of `steps` steps (handlers of 0 to `sleep_mod - 1` ms), enqueued step by
/// step across keys as interleaved commits would be, drained by `processes` serving workers with `lease_ms` leases,
/// one SIGKILLed and restarted every 300 ms until every job completed (`within` at most), then checked by
/// [`check_steps`]. Answers a line saying what the run did.
pub(crate) struct Chaos {
    pub(crate) keys: u32,
    pub(crate) steps: u32,
    pub(crate) sleep_mod: u32,
    pub(crate) processes: usize,
    pub(crate) lease_ms: u64,
    pub(crate) within: Duration,
}

impl Chaos {
    pub(crate) async fn run(&self, db: &sea_orm::DatabaseConnection, url: &str, log: &Path) -> String {
        let (keys, sleep_mod) = (self.keys, self.sleep_mod);
        let jobs: Vec<outbox_tests::Step> = (0..self.steps)
            .flat_map(|seq| {
                (0..keys).map(move |key| outbox_tests::Step {
                    key,
                    seq,
                    sleep_ms: u64::from((key * 7 + seq * 13) % sleep_mod),
                })
            })
            .collect();
        for chunk in jobs.chunks(1_000) {
            outbox::enqueue_batch(db, chunk, outbox::EnqueueOpts::new()).await.expect("enqueue");
        }
        let spawn = || Spawn { url, log, mode: "serve", lease_ms: self.lease_ms, concurrency: 8, stderr: None }.start();
        let mut children: Vec<ChildProcess> = (0..self.processes).map(|_| spawn()).collect();
        let total = i64::from(keys * self.steps);
        let started = std::time::Instant::now();
        let kills = kill_every_300_ms(db, &mut children, total, self.within, spawn).await;
        for status in wait_all(&mut children, Duration::from_secs(120)).await {
            assert!(status.success(), "a worker process failed: {status}");
        }
        let (runs, reruns, twice) = check_steps(db, log, &kills, keys, self.steps).await;
        format!(
            "{} processes, {} kills, {runs} runs for {total} jobs in {:.0?} ({reruns} re-runs after a kill, {twice} \
             jobs ended twice after a kill)",
            self.processes,
            kills.len(),
            started.elapsed()
        )
    }
}

/// Every 300 ms until `total` jobs completed (`within` at most: a guard against a hang), SIGKILLs the next of `children` and starts `respawn()`
/// in its place, after checking that each claim the killed process left is one a rescue finds; the (pid, time) of
/// every kill, for telling the reruns a kill explains.
pub(crate) async fn kill_every_300_ms(
    db: &sea_orm::DatabaseConnection,
    children: &mut [ChildProcess],
    total: i64,
    within: Duration,
    respawn: impl Fn() -> ChildProcess,
) -> Vec<(u32, u64)> {
    let mut kills: Vec<(u32, u64)> = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut victim = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done = outbox_tests::scalar(db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await;
        if done == total {
            return kills;
        }
        assert!(tokio::time::Instant::now() < deadline, "only {done} of {total} jobs completed in time");
        let child = &mut children[victim];
        let pid = child.id();
        child.kill().expect("SIGKILL");
        kills.push((pid, outbox_tests::monotonic_ns()));
        child.wait().expect("reap");
        // The killed process's claims stay claimed until their leases run out: each must be one a rescue finds.
        outbox_tests::assert_every_claim_rescuable(db, false, "after a SIGKILL").await;
        *child = respawn();
        victim = (victim + 1) % children.len();
    }
}

/// Checks the `B`/`E` log of a fleet that ran `keys` sequences of `steps` steps while processes were killed (the
/// (pid, time) of each kill in `kills`): every job completed, every claim left is rescuable, each sequence's steps
/// began in order and never overlapped but after a kill, and a job whose handler ended twice was rescued between.
/// Answers the runs, the re-runs after a kill, and the jobs that ended twice.
pub(crate) async fn check_steps(
    db: &sea_orm::DatabaseConnection,
    log: &Path,
    kills: &[(u32, u64)],
    keys: u32,
    steps: u32,
) -> (usize, usize, usize) {
    use std::collections::BTreeMap;
    let total = i64::from(keys * steps);
    // 0 lost: every job completed.
    assert_eq!(outbox_tests::scalar(db, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await, total);
    outbox_tests::assert_every_claim_rescuable(db, false, "after the fleet").await;
    let runs = runs(log);
    let killed_at: HashMap<u32, u64> = kills.iter().copied().collect();
    let mut by_key: BTreeMap<u64, Vec<&Run>> = BTreeMap::new();
    for run in &runs {
        by_key.entry(run.key).or_default().push(run);
    }
    assert_eq!(by_key.len(), keys as usize);
    let mut reruns = 0;
    for (key, key_runs) in &by_key {
        for pair in key_runs.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            // Starts follow enqueue order: a step only ever begins after the steps before it (a step may begin
            // again after a kill, never an earlier one after a later one).
            assert!(a.seq <= b.seq, "key {key}: step {} began after step {}: {a:?} then {b:?}", b.seq, a.seq);
            if a.seq == b.seq {
                reruns += 1;
            }
            // No overlap, unless the earlier run's process was killed before the later run began.
            match a.end {
                Some(end) => assert!(end <= b.begin, "key {key}: runs overlap: {a:?} and {b:?}"),
                None => {
                    let killed = killed_at.get(&a.pid).copied();
                    assert!(
                        killed.is_some_and(|k| k <= b.begin),
                        "key {key}: a run that never ended overlaps the next, and its process was not killed \
                         before: {a:?} then {b:?} (killed at {killed:?})"
                    );
                }
            }
        }
        let ran: Vec<u32> = key_runs.iter().map(|r| r.seq).collect();
        let mut distinct = ran.clone();
        distinct.dedup();
        assert_eq!(distinct, (0..steps).collect::<Vec<_>>(), "key {key}: steps ran as {ran:?}");
    }
    // 0 completed twice: a job whose handler ran to its end more than once lost its first outcome with a
    // killed process, and its history says it was rescued.
    let mut ended: HashMap<&str, u32> = HashMap::new();
    for run in runs.iter().filter(|r| r.end.is_some()) {
        *ended.entry(run.job.as_str()).or_default() += 1;
    }
    let twice: Vec<&str> = ended.iter().filter(|(_, n)| **n > 1).map(|(id, _)| *id).collect();
    for id in &twice {
        let history = outbox::ops::history(db, id).await.expect("history");
        assert!(
            history.iter().any(|e| e.event == outbox::JobEventKind::Rescued),
            "job {id} ended twice without a rescue between: {history:?}"
        );
    }
    (runs.len(), reruns, twice.len())
}
