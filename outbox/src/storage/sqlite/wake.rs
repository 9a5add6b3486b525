//! Wake-ups from other processes on SQLite (Linux): one thread per process watches the directories of the
//! database files this process works on, through one inotify instance. A commit in WAL mode appends to the
//! `-wal` file, whoever makes it: a worker of another process, the `outbox` command, `sqlite3`, a program in
//! any language. On such a write the thread asks the database whether anything was committed
//! (`PRAGMA data_version` on a connection of its own, which changes whenever another connection commits) and
//! wakes this process's workers, waits and feed readers when it was.
//!
//! The write event comes before the commit is visible: SQLite appends the frames, syncs them (at
//! `synchronous = FULL`) and only then publishes the commit in the shared-memory index. So after an event the
//! thread looks again in growing steps (0.1 ms, doubling to 5 ms for the first 250 ms, then to 250 ms) for 2 s,
//! waking at each change of the version. A change does not end the look: the events read with the one that
//! started it (the kernel even merges a commit's event into the previous one while both are unread) may be
//! a later commit's, not published yet, whose event has been read already. A write that commits nothing (a
//! rollback's spill, a checkpoint) just ends there. Nothing runs while the watched directories are quiet: the
//! thread blocks in `poll` with no timeout while no look is pending.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;

/// Another process committed something: wakes the workers, the waits and the feed readers of this one.
fn external() {
    crate::wake::wake_heard();
    crate::wake::outcome_written();
}

/// The first look after a write event; each next one waits twice as long, up to [`FAST_STEP`] for
/// [`FAST_FOR`], then up to [`SLOW_STEP`].
const FIRST_STEP: Duration = Duration::from_micros(100);
const FAST_STEP: Duration = Duration::from_millis(5);
const FAST_FOR: Duration = Duration::from_millis(250);
const SLOW_STEP: Duration = Duration::from_millis(250);
/// How long after the last write event a commit is looked for (a slow fsync included).
const LOOK_FOR: Duration = Duration::from_secs(2);

/// Interest in one database file: while any is held, commits to it by other processes wake this one.
pub(crate) struct FileWatch {
    file: PathBuf,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        if let Some(watcher) = WATCHER.get().and_then(|w| w.as_ref()) {
            watcher.unwatch(&self.file);
        }
    }
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatch").field("file", &self.file).finish()
    }
}

/// Watches `file` (an SQLite database) until the returned guard is dropped; `None` when it cannot be watched
/// (the reason is logged), in which case polling is all there is.
pub(crate) fn watch(file: &Path) -> Option<FileWatch> {
    let watcher = WATCHER.get_or_init(Watcher::start).as_ref()?;
    let file = match canonical(file) {
        Ok(file) => file,
        Err(e) => {
            tracing::debug!(file = %file.display(), error = %e, "cannot watch the database file; polling only");
            return None;
        }
    };
    match watcher.watch(&file) {
        Ok(()) => Some(FileWatch { file }),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot watch the database's directory for commits of other processes; they are seen at the next poll");
            None
        }
    }
}

/// The file's absolute path with links resolved (SQLite writes `-wal` beside the file a link points to); for
/// a file not created yet, its directory's. The directory is what is watched.
fn canonical(file: &Path) -> std::io::Result<PathBuf> {
    if let Ok(resolved) = file.canonicalize() {
        return Ok(resolved);
    }
    let name = file.file_name().ok_or_else(|| std::io::Error::other("not a file name"))?;
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.canonicalize()?,
        _ => std::env::current_dir()?,
    };
    Ok(dir.join(name))
}

static WATCHER: OnceLock<Option<Watcher>> = OnceLock::new();

struct Watcher {
    fd: Arc<OwnedFd>,
    state: Arc<Mutex<State>>,
}

/// What is watched: directories by path (their watch descriptor and how many files in them are watched),
/// and files by path (how many guards), with the names in their directory that announce a commit.
#[derive(Default)]
struct State {
    dirs: HashMap<PathBuf, (i32, usize)>,
    files: HashMap<PathBuf, usize>,
    /// (watch descriptor, file name) → the database file it belongs to: `x.db-wal` and `x.db` (the latter for
    /// a database in rollback-journal mode, whose commits write the file itself).
    names: HashMap<(i32, OsString), PathBuf>,
    /// Connections opened as a file's watch began, with the data version then, for the thread to take over:
    /// a commit made after the watch began changes the version from this one.
    opened: HashMap<PathBuf, Look>,
}

impl State {
    /// Drops everything watched through the watch descriptor `wd`, which the kernel removed.
    fn forget(&mut self, wd: i32) {
        let files: Vec<PathBuf> = self.names.iter().filter(|((w, _), _)| *w == wd).map(|(_, f)| f.clone()).collect();
        self.names.retain(|(w, _), _| *w != wd);
        self.dirs.retain(|_, (w, _)| *w != wd);
        for file in files {
            self.files.remove(&file);
            self.opened.remove(&file);
        }
    }
}

impl Watcher {
    fn start() -> Option<Watcher> {
        let fd = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK) {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch database files (inotify); commits of other processes are seen at the next poll");
                return None;
            }
        };
        let state = Arc::new(Mutex::new(State::default()));
        let thread = Looker { fd: Arc::clone(&fd), state: Arc::clone(&state), looked: HashMap::new() };
        match std::thread::Builder::new().name("outbox-watch".into()).spawn(move || thread.run()) {
            Ok(_) => Some(Watcher { fd, state }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the thread that watches database files");
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watch(&self, file: &Path) -> rustix::io::Result<()> {
        if let Some(refs) = self.lock().files.get_mut(file) {
            *refs += 1;
            return Ok(());
        }
        // The data version from before the watch began, read without the lock (opening a connection touches
        // the disk): a commit made after it changes the version.
        let mut look = Look { conn: None, version: None, pending: None };
        look.version = look.read(file).map(|(v, _)| v);
        let mut state = self.lock();
        if let Some(refs) = state.files.get_mut(file) {
            *refs += 1;
            return Ok(());
        }
        let (dir, name) = split(file);
        let wd = match state.dirs.get_mut(&dir) {
            Some((wd, refs)) => {
                *refs += 1;
                *wd
            }
            None => {
                let flags = WatchFlags::MODIFY | WatchFlags::CREATE | WatchFlags::MOVED_TO;
                let wd = inotify::add_watch(self.fd.as_fd(), &dir, flags)?;
                state.dirs.insert(dir, (wd, 1));
                wd
            }
        };
        state.opened.insert(file.to_path_buf(), look);
        let mut wal = name.clone();
        wal.push("-wal");
        state.names.insert((wd, wal), file.to_path_buf());
        state.names.insert((wd, name), file.to_path_buf());
        state.files.insert(file.to_path_buf(), 1);
        Ok(())
    }

    fn unwatch(&self, file: &Path) {
        let mut state = self.lock();
        let Some(refs) = state.files.get_mut(file) else { return };
        *refs -= 1;
        if *refs > 0 {
            return;
        }
        state.files.remove(file);
        state.opened.remove(file);
        state.names.retain(|_, f| f != file);
        let (dir, _) = split(file);
        if let Some((wd, refs)) = state.dirs.get_mut(&dir) {
            *refs -= 1;
            if *refs == 0 {
                let wd = *wd;
                state.dirs.remove(&dir);
                // The directory may be gone already (a test's temporary one), which removed the watch.
                let _ = inotify::remove_watch(self.fd.as_fd(), wd);
            }
        }
    }
}

fn split(file: &Path) -> (PathBuf, OsString) {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = file.file_name().map(OsStr::to_os_string).unwrap_or_default();
    (dir, name)
}

/// The watching thread: reads write events and looks for the commits they announce.
struct Looker {
    fd: Arc<OwnedFd>,
    state: Arc<Mutex<State>>,
    /// Per watched file: a connection of its own, the last data version seen, and the pending look (since
    /// when, and the next step).
    looked: HashMap<PathBuf, Look>,
}

struct Look {
    conn: Option<Connection>,
    version: Option<i64>,
    pending: Option<Pending>,
}

/// A look for a commit after a write event: since the last event, the current step, and when it is due.
#[derive(Clone, Copy)]
struct Pending {
    since: Instant,
    step: Duration,
    due: Instant,
}

impl Looker {
    fn run(mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        loop {
            let now = Instant::now();
            let due = self.looked.values().filter_map(|l| l.pending.map(|p| p.due)).min();
            let timeout = due.map(|d| {
                let wait = d.saturating_duration_since(now);
                Timespec { tv_sec: wait.as_secs() as _, tv_nsec: wait.subsec_nanos() as _ }
            });
            let mut fds = [PollFd::new(self.fd.as_ref(), PollFlags::IN)];
            match poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "watching database files failed; commits of other processes are seen at the next poll");
                    return;
                }
            }
            let (written, overflow) = self.read_events(&mut buf);
            let now = Instant::now();
            if overflow {
                // Events were lost: any file may have had a commit.
                tracing::debug!("the database file watch overflowed; waking everyone");
                external();
            }
            self.start_looks(&written, overflow, now);
            self.look(now);
        }
    }

    /// Starts a look at each file a batch of events wrote to (at every file, when events were lost).
    fn start_looks(&mut self, written: &[PathBuf], overflow: bool, now: Instant) {
        for (file, look) in &mut self.looked {
            if overflow || written.contains(file) {
                look.pending = Some(Pending { since: now, step: FIRST_STEP, due: now });
            }
        }
    }

    /// The files written since the last read, each once, and whether the kernel dropped events.
    fn read_events(&mut self, buf: &mut [MaybeUninit<u8>]) -> (Vec<PathBuf>, bool) {
        let mut written: Vec<PathBuf> = Vec::new();
        let mut overflow = false;
        let mut reader = inotify::Reader::new(self.fd.as_ref(), buf);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (file, look) in state.opened.drain() {
            self.looked.insert(file, look);
        }
        loop {
            match reader.next() {
                Ok(event) => {
                    let flags = event.events();
                    if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                        overflow = true;
                    }
                    if flags.contains(ReadFlags::IGNORED) {
                        // The directory is gone, and its watch with it: its files are watched no more, so a
                        // new watch of a directory made again at that path starts afresh.
                        state.forget(event.wd());
                        continue;
                    }
                    let Some(name) = event.file_name() else { continue };
                    if let Some(file) = state.names.get(&(event.wd(), bytes_name(name.to_bytes())))
                        && !written.contains(file)
                    {
                        written.push(file.clone());
                    }
                }
                Err(Errno::AGAIN | Errno::INTR) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "reading database file events");
                    break;
                }
            }
        }
        // Files no longer watched lose their connection.
        self.looked.retain(|file, _| state.files.contains_key(file));
        (written, overflow)
    }

    /// Looks for a commit in every file whose look is due; wakes once if any shows one, and says whether it did.
    fn look(&mut self, now: Instant) -> bool {
        let mut committed = false;
        for (file, look) in &mut self.looked {
            let Some(p) = look.pending.filter(|p| p.due <= now) else { continue };
            match look.read(file) {
                Some((version, false)) if look.version == Some(version) => {
                    let waited = now.duration_since(p.since);
                    let cap = if waited < FAST_FOR { FAST_STEP } else { SLOW_STEP };
                    let step = (p.step * 2).min(cap);
                    look.pending = (waited < LOOK_FOR).then_some(Pending { since: p.since, step, due: now + step });
                }
                // A changed version, or one read on a new connection (versions compare only on one
                // connection), or none at all: the write may well have been a commit.
                read => {
                    committed = true;
                    look.version = read.map(|(v, _)| v);
                    // The events that started this look may hold a later commit, still being synced: look on,
                    // in the same growing steps, until the look's time is up (starting over at the first step
                    // after each commit read the version every 0.1 ms through a busy drain). A version that
                    // cannot be read ends it.
                    let waited = now.duration_since(p.since);
                    let cap = if waited < FAST_FOR { FAST_STEP } else { SLOW_STEP };
                    let step = (p.step * 2).min(cap);
                    look.pending = (look.version.is_some() && waited < LOOK_FOR).then_some(Pending {
                        since: p.since,
                        step,
                        due: now + step,
                    });
                }
            }
        }
        if committed {
            external();
        }
        committed
    }
}

impl Look {
    /// The file's data version, and whether it was read on a connection opened just now (on first use, or
    /// after an error); `None` if it cannot be read.
    fn read(&mut self, file: &Path) -> Option<(i64, bool)> {
        let fresh = self.conn.is_none();
        if fresh {
            let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let opened = Connection::open_with_flags(file, flags).and_then(|conn| {
                // Never wait for a lock: the next event or step looks again.
                conn.busy_timeout(Duration::ZERO)?;
                Ok(conn)
            });
            match opened {
                Ok(conn) => self.conn = Some(conn),
                Err(e) => {
                    tracing::debug!(file = %file.display(), error = %e, "cannot open the database to look for commits");
                    return None;
                }
            }
        }
        let read = self.conn.as_ref()?.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0));
        match read {
            Ok(v) => Some((v, fresh)),
            Err(e) => {
                tracing::debug!(file = %file.display(), error = %e, "cannot read the database's data version");
                self.conn = None;
                None
            }
        }
    }
}

fn bytes_name(bytes: &[u8]) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(bytes).to_os_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two commits whose write events the thread read in one batch, the second published only after the look
    /// that saw the first (its frames were being synced): with no event after it, the second is announced by the
    /// look's next step, not left to the workers' next poll.
    #[test]
    fn a_commit_published_after_the_look_that_saw_the_one_before_it_is_announced() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("queue.db");
        // Another program's connection.
        let writer = Connection::open(&file).expect("open");
        writer.pragma_update(None, "journal_mode", "WAL").expect("WAL");
        writer.execute_batch("CREATE TABLE t (n INTEGER)").expect("table");
        let mut look = Look { conn: None, version: None, pending: None };
        look.version = look.read(&file).map(|(v, _)| v);
        assert!(look.version.is_some(), "the data version is read");
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).expect("inotify");
        let looked = HashMap::from([(file.clone(), look)]);
        let mut looker = Looker { fd: Arc::new(fd), state: Arc::default(), looked };

        writer.execute("INSERT INTO t VALUES (1)", []).expect("first commit");
        let batch = Instant::now();
        // The batch holds both commits' events; when the thread looks, only the first is published.
        looker.start_looks(std::slice::from_ref(&file), false, batch);
        assert!(looker.look(batch), "the first commit is announced");
        writer.execute("INSERT INTO t VALUES (2)", []).expect("second commit, published after the look");
        let next_step = batch + Duration::from_millis(1);
        assert!(looker.look(next_step), "the second commit is left to the next poll");
        // Nothing more was committed: the look goes on quietly until its time is up, then ends.
        assert!(!looker.look(next_step + Duration::from_millis(1)), "a wake-up with nothing committed");
        assert!(!looker.look(batch + LOOK_FOR), "a wake-up with nothing committed");
        assert!(looker.looked[&file].pending.is_none(), "the look ends {LOOK_FOR:?} after the events");
    }
}
