//! What an operating system error means for a job: how it reads in a message, and whether waiting can
//! clear it.

use std::io;

/// What waiting does for an errno.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// A condition of the machine rather than of the job: a full disk or quota, a filesystem remounted
    /// read-only, a failing device, exhausted descriptors or memory. An operator (or time) clears it, and
    /// the job must still be there when that happens, so it is retried.
    Retry,
    /// The payload asks for what the tree cannot hold until someone changes the tree: a file where a
    /// directory must be (`a` in `a/b`), a name the filesystem refuses.
    Permanent,
    /// Decided by the error's kind, like an error without an errno.
    ByKind,
}

/// The errnos a filesystem job meets, as `errno(3)` names them, and what waiting does for each.
const ERRNOS: &[(libc::c_int, &str, Fate)] = &[
    (libc::ENOSPC, "ENOSPC", Fate::Retry),
    (libc::EDQUOT, "EDQUOT", Fate::Retry),
    (libc::EROFS, "EROFS", Fate::Retry),
    (libc::EIO, "EIO", Fate::Retry),
    (libc::EAGAIN, "EAGAIN", Fate::Retry),
    (libc::EBUSY, "EBUSY", Fate::Retry),
    (libc::EINTR, "EINTR", Fate::Retry),
    (libc::ENOMEM, "ENOMEM", Fate::Retry),
    (libc::EMFILE, "EMFILE", Fate::Retry),
    (libc::ENFILE, "ENFILE", Fate::Retry),
    (libc::ESTALE, "ESTALE", Fate::Retry),
    (libc::ENOTDIR, "ENOTDIR", Fate::Permanent),
    (libc::ENAMETOOLONG, "ENAMETOOLONG", Fate::Permanent),
    (libc::EACCES, "EACCES", Fate::ByKind),
    (libc::EPERM, "EPERM", Fate::ByKind),
    (libc::ENOENT, "ENOENT", Fate::ByKind),
    (libc::EEXIST, "EEXIST", Fate::ByKind),
    (libc::EISDIR, "EISDIR", Fate::ByKind),
    (libc::ELOOP, "ELOOP", Fate::ByKind),
    (libc::EXDEV, "EXDEV", Fate::ByKind),
    (libc::EFBIG, "EFBIG", Fate::ByKind),
    (libc::EMLINK, "EMLINK", Fate::ByKind),
    (libc::ETXTBSY, "ETXTBSY", Fate::ByKind),
];

fn known(err: &io::Error) -> Option<&'static (libc::c_int, &'static str, Fate)> {
    let code = err.raw_os_error()?;
    ERRNOS.iter().find(|(c, _, _)| *c == code)
}

/// Whether retrying can never help. Errors without an errno fall back on their kind.
pub(crate) fn is_permanent(err: &io::Error) -> bool {
    match known(err).map(|(_, _, fate)| *fate) {
        Some(Fate::Retry) => false,
        Some(Fate::Permanent) => true,
        Some(Fate::ByKind) | None => {
            matches!(err.kind(), io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename)
        }
    }
}

/// The error as a message says it: the system's text and the errno's name (`No space left on device
/// (ENOSPC)`), so an operator can search for it; std's own `(os error 28)` says less.
pub(crate) fn describe(err: &io::Error) -> String {
    let Some(code) = err.raw_os_error() else { return err.to_string() };
    let text = err.to_string();
    let text = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text);
    match known(err) {
        Some((_, name, _)) => format!("{text} ({name})"),
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
