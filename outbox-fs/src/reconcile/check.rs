//! What one path looks like on disk against what its latest completed job says must be true there.

use std::io;

use cap_std::fs::FileTypeExt;

use super::DiscrepancyKind;
use crate::atomic::{hash_file, read_options};
use crate::error::Error;
use crate::root::{self, RULE_SYMLINK, Root, is_escape};

/// What the latest completed job of a path left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expect {
    /// A regular file, with this sha256 when the job recorded one.
    Present(Option<String>),
    /// Nothing at all.
    Absent,
}

/// The discrepancy at `path`, if any. Only looks: opens read-only and never blocks on a FIFO.
pub(super) fn check(root: &Root, path: &str, expect: &Expect) -> Option<DiscrepancyKind> {
    if let Err(rule) = root::check(path) {
        return Some(DiscrepancyKind::OutsideRoot { rule: rule.into() });
    }
    match expect {
        Expect::Present(sha256) => check_present(root, path, sha256.as_deref()),
        Expect::Absent => check_absent(root, path),
    }
}

fn unreadable(err: impl std::fmt::Display) -> Option<DiscrepancyKind> {
    Some(DiscrepancyKind::Unreadable { error: err.to_string() })
}

fn check_present(root: &Root, path: &str, expected: Option<&str>) -> Option<DiscrepancyKind> {
    // Followed like any reader of the tree would, but never out of the root.
    let mut file = match root.dir().open_with(path, &read_options(true)) {
        Ok(file) => file,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
            return Some(DiscrepancyKind::Missing);
        }
        Err(e) if is_escape(&e) => return Some(DiscrepancyKind::OutsideRoot { rule: RULE_SYMLINK.into() }),
        Err(e) => return unreadable(e),
    };
    let file_type = match file.metadata() {
        Ok(meta) => meta.file_type(),
        Err(e) => return unreadable(e),
    };
    if file_type.is_dir() {
        return unreadable("a directory stands where the file should be");
    }
    if !file_type.is_file() {
        let what = if file_type.is_fifo() {
            "a fifo"
        } else if file_type.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return unreadable(format!("{what} stands where the file should be"));
    }
    let actual = match hash_file(&mut file) {
        Ok((sha256, _)) => sha256,
        Err(e) => return unreadable(e),
    };
    match expected {
        Some(expected) if expected != actual => {
            Some(DiscrepancyKind::ContentChanged { expected: expected.to_owned(), actual })
        }
        _ => None,
    }
}

fn check_absent(root: &Root, path: &str) -> Option<DiscrepancyKind> {
    let rel = match root::checked(path) {
        Ok(rel) => rel,
        Err(e) => return unreadable(e),
    };
    let dir = match root.parent(&rel, false) {
        Ok(Some(dir)) => dir,
        Ok(None) => return None,
        Err(Error::Escape { rule, .. }) => return Some(DiscrepancyKind::OutsideRoot { rule: rule.into() }),
        Err(e) => return unreadable(e),
    };
    match dir.symlink_metadata(rel.name) {
        Ok(_) => Some(DiscrepancyKind::ShouldBeAbsent),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => unreadable(e),
    }
}
