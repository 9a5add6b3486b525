//! Atomic replacement of a file, and what stands at a path before it: every job that writes a file goes
//! through here, so a reader (or a crash) sees either the old content or the new, never a torn file.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, File, OpenOptions, OpenOptionsExt};
use sha2::{Digest, Sha256};

/// What stands at a name in a directory, looked at without following a symlink there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Nothing.
    Absent,
    /// A regular file.
    File {
        /// Its sha256, lowercase hex.
        sha256: String,
        /// Its size in bytes.
        size: u64,
    },
    /// A directory.
    Directory,
    /// A symlink, FIFO, socket or device: named by what it is.
    Other(&'static str),
}

/// sha256 of `bytes`, lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Read-only and safe on whatever stands there: `O_NONBLOCK` so opening a FIFO cannot hang (it is refused
/// after the open, by type); `O_NOFOLLOW` unless `follow`, so a symlink at the last component is not read.
pub(crate) fn read_options(follow: bool) -> OpenOptions {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let mut options = OpenOptions::new();
    options.read(true).custom_flags(flags);
    options
}

/// sha256 and size of everything readable from `file`, streamed.
pub(crate) fn hash_file(file: &mut File) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let size = io::copy(file, &mut hasher)?;
    Ok((hex::encode(hasher.finalize()), size))
}

fn describe(file_type: cap_std::fs::FileType) -> Entry {
    use cap_std::fs::FileTypeExt;
    if file_type.is_dir() {
        Entry::Directory
    } else if file_type.is_symlink() {
        Entry::Other("a symbolic link")
    } else if file_type.is_fifo() {
        Entry::Other("a fifo")
    } else if file_type.is_socket() {
        Entry::Other("a socket")
    } else {
        Entry::Other("a device")
    }
}

/// What stands at `name` in `dir`. A regular file is hashed through a handle that refuses to follow a
/// symlink and is checked again after opening, so a swap between the look and the read is caught.
pub(crate) fn inspect(dir: &Dir, name: &str) -> io::Result<Entry> {
    let meta = match dir.symlink_metadata(name) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Entry::Absent),
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Ok(describe(meta.file_type()));
    }
    let mut file = match dir.open_with(name, &read_options(false)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Entry::Absent),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(describe(meta.file_type()));
    }
    let (sha256, size) = hash_file(&mut file)?;
    Ok(Entry::File { sha256, size })
}

/// The content of the regular file `name` in `dir` if it is one and at most `max` bytes long.
pub(crate) fn read_small(dir: &Dir, name: &str, max: u64) -> io::Result<Option<Vec<u8>>> {
    let file = match dir.open_with(name, &read_options(false)) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        // A symlink (refused by O_NOFOLLOW) or anything else unreadable is no usable record.
        Err(_) => return Ok(None),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > max {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// Makes the directory's entries (a rename, a new link, an unlink) durable.
pub(crate) fn sync_dir(dir: &Dir) -> io::Result<()> {
    // cap-std opens directories `O_PATH`, which cannot be fsynced; a read-only handle of `.` can.
    dir.open_with(".", OpenOptions::new().read(true))?.sync_all()
}

/// Makes the regular file `name` durable (after a crash, content already in place may be in the page cache
/// only).
pub(crate) fn sync_file(dir: &Dir, name: &str) -> io::Result<()> {
    dir.open_with(name, &read_options(false))?.sync_all()
}

/// How [`write_atomic`] treats a file already at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replace {
    /// Replace whatever is there (rename over it).
    Always,
    /// Fail with `AlreadyExists` if anything appeared there (link, never rename).
    Never,
}

static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to a temporary file beside `name` in `dir`, fsyncs it, moves it to `name` and fsyncs the
/// directory. With [`Replace::Never`] the move is a hard link, which fails instead of replacing a file that
/// appeared since the caller looked.
pub(crate) fn write_atomic(dir: &Dir, name: &str, content: &[u8], replace: Replace) -> io::Result<()> {
    let (temp, mut file) = create_temp(dir)?;
    let placed = (|| {
        file.write_all(content)?;
        file.sync_all()?;
        match replace {
            Replace::Always => dir.rename(&temp, dir, name),
            Replace::Never => dir.hard_link(&temp, dir, name),
        }
    })();
    // After a rename the temporary name is gone; after a link or a failure it must go.
    if replace == Replace::Never || placed.is_err() {
        let _ = dir.remove_file(&temp);
    }
    placed?;
    sync_dir(dir)
}

/// A new temporary file in `dir`, named so that leftovers of a crash are recognisable (`.outbox-*.tmp`).
fn create_temp(dir: &Dir) -> io::Result<(String, File)> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    loop {
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let temp = format!(".outbox-{}-{seq}.tmp", std::process::id());
        match dir.open_with(&temp, &options) {
            Ok(file) => return Ok((temp, file)),
            // A leftover of an earlier process with the same pid: take the next number.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}
