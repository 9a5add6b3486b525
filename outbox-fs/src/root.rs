//! The confined root: every payload path is checked lexically, then resolved beneath one directory handle
//! with cap-std, which refuses (openat2 `RESOLVE_BENEATH`, or its own resolver where that is missing) any
//! resolution that leaves the root, also through symlinks and directories swapped for symlinks mid-flight.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::error::{Error, Result};

/// The rule broken by a path that resolves outside the root.
pub(crate) const RULE_SYMLINK: &str = "it resolves outside the root (through a symlink)";

/// Longest file name most filesystems accept, in bytes (Linux `NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;
/// Longest payload path, in bytes (Linux `PATH_MAX`). The kernel counts a terminating NUL in its limit, but
/// no call here hands it a whole payload path: the parent directory and the name are resolved apart.
pub(crate) const PATH_MAX: usize = 4096;

/// A directory that bounds every path of the filesystem jobs: payload paths are relative to it and can never
/// reach outside it.
///
/// Cheap to clone; clones share one open directory handle, so a root that is renamed while jobs run stays
/// the same directory.
#[derive(Clone)]
pub struct Root {
    dir: Arc<Dir>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Root").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Root {
    /// Opens `path` (an existing directory) as the root.
    pub fn open(path: impl AsRef<Path>) -> Result<Root> {
        let path = path.as_ref();
        let dir = Dir::open_ambient_dir(path, ambient_authority())
            .map_err(|source| Error::Root { path: path.to_owned(), source })?;
        Ok(Root { dir: Arc::new(dir), path: Arc::new(path.to_owned()) })
    }

    /// The root as it was given to [`Root::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// The directory holding `rel`, opened beneath the root; created (with its parents) when `create` holds.
    /// `Ok(None)`: it does not exist (or a file stands where a directory should) and `create` is false.
    ///
    /// Everything a job does afterwards goes through this one handle, so a directory swapped for a symlink
    /// later cannot redirect the rest of the job's steps.
    pub(crate) fn parent(&self, rel: &RelPath<'_>, create: bool) -> Result<Option<Dir>> {
        let Some(parent) = rel.parent else {
            return self.dir.try_clone().map(Some).map_err(classify("opening the root for", rel.full));
        };
        // A directory removed by someone else between creating and opening it is created again; give up
        // after a few rounds rather than chase a tree that keeps changing.
        let mut rounds = 0;
        loop {
            rounds += 1;
            if create {
                match self.dir.create_dir_all(parent) {
                    // Something not a directory is in the way (a symlink out of the root, a file): opening
                    // it below says which.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    other => other.map_err(classify("creating the parent directories of", rel.full))?,
                }
            }
            match self.dir.open_dir(parent) {
                Ok(dir) => return Ok(Some(dir)),
                Err(e) if !create && matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                    return Ok(None);
                }
                Err(e) if create && e.kind() == io::ErrorKind::NotFound && rounds < 3 => continue,
                Err(e) => return Err(classify("opening the parent directory of", rel.full)(e)),
            }
        }
    }
}

/// A payload path that passed the lexical rules: `parent/name`, both relative and normalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RelPath<'a> {
    pub(crate) full: &'a str,
    pub(crate) parent: Option<&'a str>,
    pub(crate) name: &'a str,
}

/// Checks a payload path against the lexical rules; the error is the rule it breaks.
///
/// Paths must be normalized (no `.` or empty components) besides staying beneath the root: the reconciler
/// groups jobs by the path string, so `a/./b` and `a/b` must not be two names for one file.
pub(crate) fn check(path: &str) -> std::result::Result<RelPath<'_>, &'static str> {
    if path.is_empty() {
        return Err("it is empty");
    }
    if path.contains('\0') {
        return Err("it contains a NUL byte");
    }
    if path.contains('\\') {
        return Err("it contains a backslash (the separator is `/`)");
    }
    if path.starts_with('/') {
        return Err("it is absolute (paths are relative to the root)");
    }
    // Lengths are bytes of UTF-8, as the filesystem counts them; checked here, a path that can never be
    // created fails at enqueue instead of on every attempt.
    if path.len() > PATH_MAX {
        return Err("it is longer than 4096 bytes (the filesystem's limit for a path)");
    }
    for component in path.split('/') {
        match component {
            ".." => return Err("it has a `..` component"),
            "." | "" => return Err("it is not normalized (an empty or `.` component)"),
            c if c.len() > NAME_MAX => {
                return Err("it has a component longer than 255 bytes (the filesystem's limit for a file name)");
            }
            _ => {}
        }
    }
    Ok(match path.rsplit_once('/') {
        Some((parent, name)) => RelPath { full: path, parent: Some(parent), name },
        None => RelPath { full: path, parent: None, name: path },
    })
}

/// [`check`] as the crate's error.
pub(crate) fn checked(path: &str) -> Result<RelPath<'_>> {
    check(path).map_err(|rule| Error::Escape { path: shown_refused(path), rule })
}

/// A refused path as its refusal shows it: [`shown`], with the middle of a path too long to read cut out.
pub(crate) fn shown_refused(path: &str) -> String {
    const KEPT: usize = 60;
    if path.chars().count() <= 3 * KEPT {
        return shown(path);
    }
    let head: String = path.chars().take(KEPT).collect();
    let tail: String = path.chars().skip(path.chars().count() - KEPT).collect();
    format!("{}...{} ({} bytes)", shown(&head), shown(&tail), path.len())
}

/// The path as it may appear in messages and logs: control characters (NUL included) escaped.
pub(crate) fn shown(path: &str) -> String {
    path.chars().flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] }).collect()
}

/// Whether cap-std refused a resolution because it would leave the root. cap-std reports escapes (its own,
/// and the kernel's `EXDEV` under `RESOLVE_BENEATH`) as this one `PermissionDenied` error.
pub(crate) fn is_escape(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::PermissionDenied && err.to_string().contains("outside of the filesystem")
}

/// Maps an I/O error on `path` to the crate's error, turning escapes into [`Error::Escape`].
pub(crate) fn classify(op: &'static str, path: &str) -> impl FnOnce(io::Error) -> Error {
    let path = shown(path);
    move |source| {
        if is_escape(&source) {
            Error::Escape { path, rule: RULE_SYMLINK }
        } else if source.kind() == io::ErrorKind::IsADirectory {
            Error::IsDirectory { path }
        } else {
            Error::Io { op, path, source }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        for (path, rule) in [
            ("", "empty"),
            ("a/\0b", "NUL"),
            ("a\\b", "backslash"),
            ("/etc/passwd", "absolute"),
            ("../x", "`..`"),
            ("a/../../x", "`..`"),
            ("a/..", "`..`"),
            ("a//b", "normalized"),
            ("a/./b", "normalized"),
            ("a/", "normalized"),
            (".", "normalized"),
        ] {
            let err = check(path).expect_err(path);
            assert!(err.contains(rule), "{path:?}: {err}");
        }
        assert_eq!(check("a/b/c.txt"), Ok(RelPath { full: "a/b/c.txt", parent: Some("a/b"), name: "c.txt" }));
        assert_eq!(check("c"), Ok(RelPath { full: "c", parent: None, name: "c" }));
        assert!(check("..hidden/...").is_ok(), "dots inside names are names");
    }

    #[test]
    fn lengths_are_counted_in_bytes() {
        // 'é' is two bytes and '€' three: counted in chars, the refused ones would pass.
        let name_255 = format!("{}a", "é".repeat(127));
        let name_256 = "é".repeat(128);
        assert_eq!((name_255.len(), name_256.len(), name_256.chars().count()), (255, 256, 128));
        assert!(check(&name_255).is_ok());
        assert!(check(&format!("dir/{name_256}/x")).expect_err("256").contains("255 bytes"));

        // 17 components of 240 bytes and 16 slashes.
        let path_4096 = vec!["€".repeat(80); 17].join("/");
        assert_eq!(path_4096.len(), 4096);
        assert!(check(&path_4096).is_ok());
        let path_4097 = format!("{path_4096}x");
        assert!(check(&path_4097).expect_err("4097").contains("longer than 4096 bytes"));
        assert!(path_4097.chars().count() < PATH_MAX);
    }

    #[test]
    fn refusals_of_long_paths_show_both_ends_and_the_length() {
        let long = format!("start/{}/end.txt", "x".repeat(5000));
        let shown = shown_refused(&long);
        assert!(shown.starts_with("start/xxx") && shown.ends_with("xx/end.txt (5014 bytes)"), "{shown}");
        assert!(shown.len() < 200, "{shown}");
        assert_eq!(shown_refused("a/\0b"), "a/\\u{0}b");
    }

    #[test]
    fn shown_escapes_control_characters() {
        assert_eq!(shown("a\0b\n"), "a\\u{0}b\\n");
        assert_eq!(shown("ünï/cöde"), "ünï/cöde");
    }
}
