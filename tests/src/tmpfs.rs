//! A small real filesystem for tests of a full disk: a `tmpfs` mounted on a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted `tmpfs`, unmounted when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a `tmpfs` of `size` (`mount -o size=`, such as `256k`). Mounting needs root (or
    /// `CAP_SYS_ADMIN`): without it `test` is skipped with a visible message, and fails under `CI`.
    pub fn mount(test: &str, size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(Tmpfs { dir }),
            Ok(out) => {
                crate::unavailable(test, &format!("cannot mount a tmpfs: {}", String::from_utf8_lossy(&out.stderr)));
                None
            }
            Err(e) => {
                crate::unavailable(test, &format!("cannot run mount: {e}"));
                None
            }
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `name` until the filesystem has no byte left for it; the error that stopped it must be
    /// "no space left on device".
    pub fn fill(&self, name: &str) -> PathBuf {
        use std::io::Write;
        const ENOSPC: i32 = 28;
        let path = self.dir.path().join(name);
        let mut file = std::fs::File::create(&path).expect("create the filler");
        // Big blocks first, then single bytes for the rest of the last page.
        for block in [vec![0u8; 4096], vec![0u8; 1]] {
            loop {
                match file.write(&block) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(ENOSPC) => break,
                    Err(e) => panic!("filling {}: {e}", path.display()),
                }
            }
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy, so a handle a failed test left open cannot keep the mount; TempDir then removes the directory.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}
