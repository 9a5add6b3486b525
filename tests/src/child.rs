//! Child processes that cannot outlive the test that started them.
//!
//! Each child is the leader of a process group of its own, so everything it starts (a browser under
//! chromedriver, a worker under a shell script) shares its group, and dropping the guard — at the end of the
//! test or while a panic unwinds — SIGKILLs the whole group and reaps the child.

use std::io::Read;
use std::ops::{Deref, DerefMut};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

/// SIGKILLs the process group `pgid` when dropped. For children spawned some other way (a
/// `tokio::process::Command` with `process_group(0)`); [`ChildProcess`] holds one.
#[derive(Debug)]
pub struct GroupGuard {
    pgid: u32,
    /// When the leader started (clock ticks since boot), to tell it from a later process given its pid.
    leader_start: Option<u64>,
}

impl GroupGuard {
    /// Guards the group led by the process `pid` (spawned with `process_group(0)`), while it still runs.
    pub fn new(pid: u32) -> GroupGuard {
        GroupGuard { pgid: pid, leader_start: start_time(pid) }
    }

    /// Sends `signal` to every process in the group; `false` when there is none, or when the group's id now
    /// belongs to a stranger.
    pub fn signal(&self, signal: Signal) -> bool {
        // Linux keeps a pid from reuse while a process group of that id has a member, so the id can only have
        // passed to a stranger once the group was empty and its leader reaped: then a process runs under the
        // leader's pid that started at another time.
        if let Some(now) = start_time(self.pgid)
            && Some(now) != self.leader_start
        {
            return false;
        }
        let Some(pid) = i32::try_from(self.pgid).ok().and_then(Pid::from_raw) else { return false };
        kill_process_group(pid, signal).is_ok()
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::KILL);
    }
}

/// When the process `pid` started, in clock ticks since boot (`/proc/<pid>/stat`, field 22); `None` once it
/// has been reaped.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces: the state is field 3.
    stat.rsplit_once(')')?.1.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// A [`Child`] in a process group of its own, killed with its group and reaped when dropped.
#[derive(Debug)]
pub struct ChildProcess {
    group: GroupGuard,
    child: Child,
}

impl ChildProcess {
    /// Spawns `command` as the leader of a new process group; panics, naming the program, if it cannot start.
    pub fn spawn(command: &mut Command) -> ChildProcess {
        let child =
            command.process_group(0).spawn().unwrap_or_else(|e| panic!("spawn {:?}: {e}", command.get_program()));
        ChildProcess { group: GroupGuard::new(child.id()), child }
    }

    /// Sends `signal` to the child alone (`SIGTERM` for a graceful stop), not to its group.
    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// `Child::wait_with_output`, bounded: waits at most `timeout` for the child to exit and collects what it
    /// wrote to its piped stdout and stderr. Past `timeout` it panics, and the guard kills the child's group.
    pub fn output_within(mut self, timeout: Duration) -> Output {
        fn read_all(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.read_to_end(&mut bytes);
                }
                bytes
            })
        }
        let (stdout, stderr) = (read_all(self.child.stdout.take()), read_all(self.child.stderr.take()));
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the child") {
                break status;
            }
            assert!(Instant::now() < deadline, "the child did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        };
        // Whatever the child left running could hold the pipes open, and the reads below wait for their end.
        self.group.signal(Signal::KILL);
        Output { status, stdout: stdout.join().expect("read stdout"), stderr: stderr.join().expect("read stderr") }
    }

    /// Sends `signal` to the child's whole process group.
    pub fn signal_group(&self, signal: Signal) -> bool {
        self.group.signal(signal)
    }
}

impl Deref for ChildProcess {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for ChildProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.group.signal(Signal::KILL);
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grandchild (`sleep` under `sh`) goes down with the guard, even after the shell has exited.
    #[test]
    fn dropping_the_guard_kills_the_whole_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let child = ChildProcess::spawn(Command::new("sh").args(["-c", &script]));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let grandchild = loop {
            if let Ok(text) = std::fs::read_to_string(&pid_file)
                && let Ok(pid) = text.trim().parse::<u32>()
            {
                break pid;
            }
            assert!(std::time::Instant::now() < deadline, "the shell never wrote its child's pid");
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
        };
        assert!(alive(grandchild), "the grandchild runs before the drop");
        drop(child);
        // SIGKILL is delivered before kill(2) returns; the grandchild, reparented to init, may linger as a
        // zombie for a moment, which `alive` does not count.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(grandchild) {
            assert!(std::time::Instant::now() < deadline, "the grandchild {grandchild} outlived the guard");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
