//! Case `idle_cpu`: the CPU time the command-line worker (`outbox work`) uses while it waits on an empty
//! database.

use std::time::{Duration, Instant};

use crate::BoxError;
use crate::scratch::{Scratch, Target};

/// Case `idle_cpu`: the CPU time an idle `outbox work` (the command-line worker, found beside this binary)
/// uses over [`IDLE_SECS`] on a database with nothing to do, as a percentage of one core.
pub(crate) async fn idle_cpu(target: &Target) -> Result<f64, BoxError> {
    let exe = std::env::current_exe()?;
    let outbox = exe.with_file_name("outbox");
    if !outbox.exists() {
        return Err(format!(
            "idle_cpu runs the `outbox` command, which is not beside this binary ({}): build it with `cargo build --release -p outbox-cli`",
            outbox.display()
        )
        .into());
    }
    let scratch = Scratch::new(target).await?;
    let root = tempfile::tempdir()?;
    let url = match &scratch.prepared.location {
        crate::scratch::Location::File(path) => format!("sqlite://{}", path.display()),
        crate::scratch::Location::Url(url) => url.clone(),
    };
    let mut child = tokio::process::Command::new(&outbox)
        .args(["--database-url", &url, "work", "--root"])
        .arg(root.path())
        .env("OUTBOX_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().ok_or("the outbox worker exited at once")?;
    // Measured from once it registered: start-up (migrations, kinds, first claim) is not idling.
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox::ops::workers(&scratch.db).await?.is_empty() {
        if Instant::now() > deadline {
            return Err("idle_cpu: the outbox worker did not register within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = cpu_ticks(pid)?;
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(IDLE_SECS)).await;
    let ticks = cpu_ticks(pid)? - before;
    let secs = began.elapsed().as_secs_f64();
    child.kill().await?;
    scratch.remove().await?;
    let per_sec = rustix::param::clock_ticks_per_second().max(1) as f64;
    Ok(ticks as f64 / per_sec / secs * 100.0)
}

/// How long `idle_cpu` watches the idle worker.
pub(crate) const IDLE_SECS: u64 = 60;

/// User and system CPU time of process `pid` so far, in clock ticks (`/proc/<pid>/stat`, fields 14 and 15).
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64, BoxError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').ok_or("unreadable /proc stat")?.1.split_whitespace().collect();
    let field = |n: usize| -> Result<u64, BoxError> { Ok(fields.get(n - 3).ok_or("short /proc stat")?.parse()?) };
    Ok(field(14)? + field(15)?)
}
