//! The SQLite worker connection's busy handler, against real locks on a real file.

use super::*;

fn config(path: PathBuf, busy_timeout: Duration) -> StoreConfig {
    StoreConfig {
        path,
        synchronous: "NORMAL".into(),
        busy_timeout,
        worker_id: "test".into(),
        kinds_json: "[]".into(),
        one_kind: false,
        flows: Vec::new(),
        queues_json: None,
    }
}

/// The worker's busy handler waits out another writer, gets the lock soon after it is free, and gives up
/// after the busy timeout while it is not.
#[test]
fn the_busy_handler_waits_for_the_lock_then_gives_up_at_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("busy.db");
    Connection::open(&path).expect("create the file");
    let holder = open_connection(&config(path.clone(), Duration::from_secs(1))).expect("open");
    holder.execute_batch("CREATE TABLE t (x INTEGER)").expect("create");

    // Freed after 100 ms: the waiter gets the lock then, not at its 10 s timeout.
    holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let waiter_config = config(path.clone(), Duration::from_secs(10));
    let waiter = std::thread::spawn(move || {
        let conn = open_connection(&waiter_config).expect("open");
        let start = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO t VALUES (1); COMMIT").expect("write after the lock is free");
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    holder.execute_batch("COMMIT").expect("unlock");
    let waited = waiter.join().expect("waiter");
    assert!(waited < Duration::from_secs(5), "waited {waited:?} for a lock freed after 100 ms");

    // Held throughout: the waiter gives up after its 200 ms, with SQLITE_BUSY.
    holder.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let conn = open_connection(&config(path, Duration::from_millis(200))).expect("open");
    let start = Instant::now();
    let err = conn.execute_batch("BEGIN IMMEDIATE").expect_err("the lock is held");
    let waited = start.elapsed();
    assert_eq!(err.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy), "{err}");
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "gave up after {waited:?}");
    holder.execute_batch("COMMIT").expect("unlock");
}

/// The worker's connection commits a cycle that only claims at `NORMAL`, everything else at the database's
/// setting, and never syncs more than the database asks for.
#[test]
fn a_cycle_that_only_claims_does_not_wait_for_the_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sync.db");
    Connection::open(&path).expect("create the file");
    let level = |actor: &Actor| -> i64 {
        actor.conn.query_row("PRAGMA synchronous", [], |row| row.get(0)).expect("read PRAGMA synchronous")
    };
    for (setting, strict) in [("FULL", 2), ("EXTRA", 3), ("NORMAL", 1), ("OFF", 0)] {
        let config = StoreConfig { synchronous: setting.into(), ..config(path.clone(), Duration::from_secs(1)) };
        let conn = open_connection(&config).expect("open");
        let (_tx, rx) = mpsc::unbounded_channel();
        let mut actor = Actor {
            conn,
            config,
            rx,
            _watch: super::super::watch_file(&path),
            relaxed: false,
            wake: Default::default(),
        };
        assert_eq!(level(&actor), strict, "{setting} as opened");
        actor.durability_for(true);
        assert_eq!(level(&actor), strict.min(1), "{setting} for a cycle that only claims");
        actor.durability_for(false);
        assert_eq!(level(&actor), strict, "{setting} for a cycle that writes outcomes");
        actor.durability_for(true);
        let _ = actor.extend(&[], 0);
        assert_eq!(level(&actor), strict, "{setting} for a lease renewal after a claim");
    }
}
