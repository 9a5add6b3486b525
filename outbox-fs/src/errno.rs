//! What an operating system error means for a job: how it reads in a message, and whether waiting can
//! clear it.

use std::io;

/// Conditions of the machine rather than of the job: a full disk or quota, a filesystem remounted read-only,
/// a failing device, exhausted descriptors or memory. An operator (or time) clears them, and the job must
/// still be there when that happens, so they are retried.
const RETRYABLE: &[libc::c_int] = &[
    libc::ENOSPC,
    libc::EDQUOT,
    libc::EROFS,
    libc::EIO,
    libc::EAGAIN,
    libc::EBUSY,
    libc::EINTR,
    libc::ENOMEM,
    libc::EMFILE,
    libc::ENFILE,
    libc::ESTALE,
];

/// The payload asks for what the tree cannot hold until someone changes the tree: a file where a directory
/// must be (`a` in `a/b`), a name the filesystem refuses.
const PERMANENT: &[libc::c_int] = &[libc::ENOTDIR, libc::ENAMETOOLONG];

/// Names of the errnos a filesystem job meets, as `errno(3)` spells them.
const NAMES: &[(libc::c_int, &str)] = &[
    (libc::ENOSPC, "ENOSPC"),
    (libc::EDQUOT, "EDQUOT"),
    (libc::EROFS, "EROFS"),
    (libc::EIO, "EIO"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::EBUSY, "EBUSY"),
    (libc::EINTR, "EINTR"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EMFILE, "EMFILE"),
    (libc::ENFILE, "ENFILE"),
    (libc::ESTALE, "ESTALE"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::EACCES, "EACCES"),
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::EEXIST, "EEXIST"),
    (libc::EISDIR, "EISDIR"),
    (libc::ELOOP, "ELOOP"),
    (libc::EXDEV, "EXDEV"),
    (libc::EFBIG, "EFBIG"),
    (libc::EMLINK, "EMLINK"),
    (libc::ETXTBSY, "ETXTBSY"),
];

/// Whether retrying can never help. Errors without an errno fall back on their kind.
pub(crate) fn is_permanent(err: &io::Error) -> bool {
    match err.raw_os_error() {
        Some(code) if RETRYABLE.contains(&code) => false,
        Some(code) if PERMANENT.contains(&code) => true,
        _ => matches!(err.kind(), io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename),
    }
}

/// The error as a message says it: the system's text and the errno's name (`No space left on device
/// (ENOSPC)`), so an operator can search for it; std's own `(os error 28)` says less.
pub(crate) fn describe(err: &io::Error) -> String {
    let Some(code) = err.raw_os_error() else { return err.to_string() };
    let text = err.to_string();
    let text = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text);
    match NAMES.iter().find(|(c, _)| *c == code) {
        Some((_, name)) => format!("{text} ({name})"),
        None => format!("{text} (errno {code})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_conditions_retry_and_say_their_errno() {
        for (code, name) in [
            (libc::ENOSPC, "No space left on device (ENOSPC)"),
            (libc::EDQUOT, "Disk quota exceeded (EDQUOT)"),
            (libc::EROFS, "Read-only file system (EROFS)"),
            (libc::EIO, "Input/output error (EIO)"),
        ] {
            let err = io::Error::from_raw_os_error(code);
            assert!(!is_permanent(&err), "{name} retries");
            assert_eq!(describe(&err), name);
        }
    }

    #[test]
    fn what_the_tree_refuses_is_permanent() {
        for code in [libc::ENOTDIR, libc::ENAMETOOLONG] {
            assert!(is_permanent(&io::Error::from_raw_os_error(code)), "{code}");
        }
        assert!(!is_permanent(&io::Error::from_raw_os_error(libc::EACCES)), "a fixable permission retries");
        assert_eq!(describe(&io::Error::from_raw_os_error(libc::ENOTDIR)), "Not a directory (ENOTDIR)");
    }

    #[test]
    fn errors_without_a_known_errno_keep_their_text() {
        assert_eq!(describe(&io::Error::other("cut short")), "cut short");
        assert!(!is_permanent(&io::Error::other("cut short")));
        assert!(is_permanent(&io::Error::from(io::ErrorKind::NotADirectory)));
        // Names are for the errnos jobs meet; the rest still say which errno they are.
        let rare = io::Error::from_raw_os_error(libc::ENOTSOCK);
        assert!(describe(&rare).ends_with(&format!("(errno {})", libc::ENOTSOCK)), "{}", describe(&rare));
    }
}
