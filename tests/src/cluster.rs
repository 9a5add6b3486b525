//! A PostgreSQL cluster of the test's own, for tests that restart the server (the shared one in
//! `OUTBOX_TEST_PG_URL` serves other tests at the same time).

use std::path::PathBuf;
use std::process::{Command, Output};

/// A throwaway cluster on a free loopback port, stopped and removed when dropped.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The database `outbox` on it, owned by the user `outbox`.
    pub url: String,
}

impl PgCluster {
    /// Creates and starts a cluster with Debian's PostgreSQL binaries (`/usr/lib/postgresql/*/bin`), as the
    /// `postgres` user when running as root (the server refuses root). Without the binaries `test` is
    /// skipped with a visible message, and fails under `CI`.
    pub fn start(test: &str) -> Option<PgCluster> {
        let Some(bin) = binaries() else {
            crate::unavailable(
                test,
                "no PostgreSQL server binaries under /usr/lib/postgresql (apt install postgresql)",
            );
            return None;
        };
        let dir = tempfile::Builder::new().prefix("outbox-pg-").tempdir().expect("temp dir");
        if is_root() {
            let status = Command::new("chown").arg("postgres").arg(dir.path()).status().expect("chown");
            assert!(status.success(), "chown postgres {}", dir.path().display());
        }
        let port = free_port();
        let cluster = PgCluster { url: format!("postgres://outbox@127.0.0.1:{port}/outbox"), bin, dir };
        let data = cluster.data();
        cluster.run("initdb", &["-D", &data, "-A", "trust", "-U", "outbox", "--no-sync"]);
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -k {} -c max_connections=200 -c fsync=off",
            cluster.dir.path().display()
        );
        let log = format!("{}/server.log", cluster.dir.path().display());
        cluster.run("pg_ctl", &["-D", &data, "-l", &log, "-w", "-t", "60", "-o", &opts, "start"]);
        cluster.run("createdb", &["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "outbox", "outbox"]);
        Some(cluster)
    }

    /// `pg_ctl restart -m fast`: every connection is closed, in-flight transactions roll back, and the
    /// server refuses connections until it is back.
    pub fn restart_fast(&self) {
        // With its log file named again: a server writing to this process's pipe would keep `run` waiting.
        let log = format!("{}/server.log", self.dir.path().display());
        self.run("pg_ctl", &["-D", &self.data(), "-l", &log, "-w", "-t", "60", "-m", "fast", "restart"]);
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.path().display())
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let out = self.command(program).args(args).output().unwrap_or_else(|e| panic!("run {program}: {e}"));
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// One of the server's programs, run as `postgres` when this process is root.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").args(["-D", &self.data(), "-m", "immediate", "stop"]).output();
    }
}

fn binaries() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("pg_ctl").exists())
        .collect();
    found.sort_by_key(|p| p.to_string_lossy().into_owned());
    found.pop()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}
