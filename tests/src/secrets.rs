//! Pieces of the tests that capture what is logged, run a test alone in a child process (with canary
//! secrets in its environment), and look for the canaries wherever the framework writes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement};

use crate::ChildProcess;

/// Everything a tracing subscriber wrote: `with_writer(move || captured.clone())`.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }

    /// What was written so far, byte for byte.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("lock").clone()
    }

    /// Installs the process's global subscriber at trace level for every crate, writing here.
    pub fn everything() -> Captured {
        let logs = Captured::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    }
}

/// What a child test process printed, and whether its one test passed.
#[derive(Debug)]
pub struct ChildRun {
    /// The name of the test it ran.
    pub name: String,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    success: bool,
}

impl ChildRun {
    /// Panics unless the child exited successfully having run its one test.
    pub fn assert_passed(&self) {
        assert!(
            self.success && self.stdout.contains("1 passed"),
            "{} failed or did not run:\n{}\n{}",
            self.name,
            self.stdout,
            self.stderr
        );
    }
}

/// Runs the ignored test `name` of this test binary alone in a child process, with `child_var` set (the
/// `_child` tests refuse to run without it) and whatever else `setup` gives the command: setting variables in
/// this process needs `unsafe`, and a global log capture wants a process of its own. A child still running
/// after five minutes fails the test and is killed with its process group.
pub fn run_child(name: &str, child_var: &str, setup: impl FnOnce(&mut std::process::Command)) -> ChildRun {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command.args(["--exact", name, "--ignored", "--nocapture"]);
    setup(&mut command);
    command.env(child_var, "1").stdin(std::process::Stdio::null());
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let out = ChildProcess::spawn(&mut command).output_within(Duration::from_secs(300));
    ChildRun {
        name: name.to_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
    }
}

/// Every column of every row of an SQLite database's job and event tables, as text.
pub async fn job_rows(db: &sea_orm::DatabaseConnection) -> String {
    let query = |sql: String| db.query_all_raw(Statement::from_string(DbBackend::Sqlite, sql));
    let mut out = String::new();
    for table in ["outbox_jobs", "outbox_job_events"] {
        let columns: Vec<String> = query(format!("SELECT name FROM pragma_table_info('{table}')"))
            .await
            .expect("columns")
            .iter()
            .map(|r| r.try_get_by_index::<String>(0).expect("column name"))
            .collect();
        assert!(columns.len() > 3, "{table}: {columns:?}");
        let list = columns.iter().map(|c| format!("CAST(\"{c}\" AS TEXT)")).collect::<Vec<_>>().join(", ");
        let rows = query(format!("SELECT {list} FROM {table}")).await.expect("rows");
        assert!(table != "outbox_jobs" || !rows.is_empty(), "no job rows to look in");
        for row in rows {
            for i in 0..columns.len() {
                let value = row.try_get_by_index::<Option<String>>(i).expect("a column as text");
                out.push_str(value.as_deref().unwrap_or("NULL"));
                out.push('|');
            }
            out.push('\n');
        }
    }
    out
}

/// Where `text` holds one of `canaries` (`(variable, secret)`) or any `fragment` bytes of one, each
/// described without repeating it.
pub fn leaks(text: &str, canaries: &[(&str, &str)], fragment: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (var, secret) in canaries {
        let hit = (0..=secret.len() - fragment).find_map(|i| text.find(&secret[i..i + fragment]).map(|at| (i, at)));
        if let Some((piece, at)) = hit {
            let start = text.floor_char_boundary(at.saturating_sub(80));
            let end = text.ceil_char_boundary((at + 80).min(text.len()));
            let context = canaries.iter().fold(text[start..end].to_owned(), |t, (_, s)| {
                (0..=s.len() - fragment).fold(t, |t, i| t.replace(&s[i..i + fragment], "<CANARY>"))
            });
            out.push(format!("{var} (from byte {piece} of it) at byte {at}: ...{context}..."));
        }
    }
    out
}
