//! Handing claimed jobs to the program that reads `outbox claim`'s output. Written to a pipe, a line is handed
//! over once the reader has read it: a reader that exits having read less (`outbox claim --limit 10 | head -1`)
//! leaves the rest of the pipe unread, and those jobs are given back instead of staying claimed for their
//! lease. Each line waits for the one before it to be read, so a reader that reads ahead in blocks (as `head`
//! does) still takes one line at a time. A file or a terminal takes what is written.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::fs::FileType;

/// Standard output, and whether it is a pipe.
pub(crate) struct Output {
    out: io::Stdout,
    pipe: bool,
}

impl Output {
    pub(crate) fn stdout() -> Output {
        let out = io::stdout();
        let pipe = rustix::fs::fstat(out.as_fd()).is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Fifo);
        Output { out, pipe }
    }

    /// Writes `line`; on a pipe, returns once the reader has read it, or at `until` with the reader still there
    /// (what it reads later is its own: the lease brings the job back if it never runs).
    /// A reader gone before it read the line is an error of kind `BrokenPipe`; `stopped` turning true before
    /// it read the line (a signal), one of kind `Interrupted`.
    pub(crate) async fn hand_over(
        &mut self,
        line: &str,
        until: tokio::time::Instant,
        stopped: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        {
            let mut out = self.out.lock();
            out.write_all(line.as_bytes())?;
            out.flush()?;
        }
        if self.pipe { read_by_reader(&self.out, until, stopped).await } else { Ok(()) }
    }
}

/// Waits until the pipe `out` writes to is empty, or until `deadline`; an error once no one reads it, or once
/// `stopped`.
async fn read_by_reader(
    out: &io::Stdout,
    deadline: tokio::time::Instant,
    stopped: &dyn Fn() -> bool,
) -> io::Result<()> {
    let mut nap = Duration::from_micros(50);
    loop {
        if rustix::io::ioctl_fionread(out.as_fd())? == 0 {
            return Ok(());
        }
        // The write end of a pipe without readers polls as an error.
        let mut fds = [PollFd::new(out, PollFlags::empty())];
        poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 }))?;
        if fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP) {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the reader closed the pipe before reading the job"));
        }
        if stopped() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "stopped before the reader read the job"));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(());
        }
        // Nothing tells a writer that its pipe was read: it looks again, soon at first.
        tokio::time::sleep(nap).await;
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}
