//! `outbox work` survives its environment: started while the database's disk is full, it stays up, says
//! why it waits, and drains every job once space is given back, with nobody restarting it.

use std::process::{Command, Stdio};
use std::time::Duration;

use outbox::EnqueueOpts;
use outbox_tests::{ChildProcess, Signal, Tmpfs, eventually, scalar, sqlite_url};

const JOBS: usize = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_on_a_full_disk_waits_and_then_drains_every_job() {
    let test = "a_worker_started_on_a_full_disk_waits_and_then_drains_every_job";
    let Some(disk) = Tmpfs::mount(test, "8m") else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("files");
    std::fs::create_dir(&root).expect("root");
    let db_path = disk.path().join("queue.db");
    let url = sqlite_url(&db_path);
    let db = outbox::connect(&url).await.expect("create the database");
    {
        outbox::migrate(&db).await.expect("migrate");
        let jobs: Vec<outbox_fs::CreateFile> = (0..JOBS)
            .map(|n| outbox_fs::CreateFile {
                path: format!("f/{n}.txt"),
                content: format!("file {n}"),
                overwrite: false,
            })
            .collect();
        outbox::enqueue_batch(&db, &jobs, EnqueueOpts::new()).await.expect("enqueue");
        // An empty write-ahead log: nothing the worker writes has room set aside. This connection stays open
        // (so the shared-memory file stays), as an application's would.
        outbox_tests::exec(&db, "PRAGMA wal_checkpoint(TRUNCATE)", vec![]).await;
    }
    let filler = disk.fill("filler");

    let stderr_path = dir.path().join("worker.stderr");
    let mut worker = ChildProcess::spawn(
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(["work", "--database-url"])
            .arg(&db_path)
            .arg("--root")
            .arg(&root)
            .env_remove("OUTBOX_DATABASE_URL")
            .env_remove("RUST_LOG")
            .env("OUTBOX_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&stderr_path).expect("stderr file"))),
    );
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    // Each try the worker makes logs a line saying why it waits: three of them, and it is still up.
    let tries = || stderr().lines().filter(|l| l.contains("full")).count();
    let noticed = eventually(Duration::from_secs(30), || async { tries() >= 3 }).await;
    assert!(noticed, "the worker did not say three times that the disk is full:\n{}", stderr());
    assert!(worker.try_wait().expect("worker status").is_none(), "the worker exited on a full disk:\n{}", stderr());

    std::fs::remove_file(&filler).expect("give the space back");
    let reader = db;
    let drained = eventually(Duration::from_secs(90), || async {
        scalar(&reader, "SELECT COUNT(*) FROM outbox_jobs WHERE status = 'completed'").await == JOBS as i64
    })
    .await;
    worker.signal(Signal::TERM);
    let status = worker.wait().expect("worker exit");
    let log = stderr();
    assert!(drained, "not every job completed once space came back:\n{log}");
    assert!(status.success(), "the worker's exit: {status:?}\n{log}");
    assert_eq!(scalar(&reader, "SELECT COUNT(*) FROM outbox_jobs").await, JOBS as i64, "0 lost");
    for n in 0..JOBS {
        let content = std::fs::read_to_string(root.join(format!("f/{n}.txt"))).expect("the file was written");
        assert_eq!(content, format!("file {n}"));
    }
    eprintln!("{}", log.lines().filter(|l| l.contains("WARN")).take(3).collect::<Vec<_>>().join("\n"));
}
