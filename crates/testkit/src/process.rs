//! A service process a test started itself, killed when dropped: a failed
//! assertion unwinds past the test's own `kill`, and a process left running
//! keeps consuming its topics and holds the test harness's output pipe open
//! (`cargo test` then waits on it instead of reporting the failure).

use std::process::{Child, ExitStatus};

/// Owns a child process; SIGKILL and reap on [`kill`](Self::kill) or drop.
#[derive(Debug)]
pub struct KillOnDrop(Child);

impl KillOnDrop {
    pub fn new(child: Child) -> Self {
        Self(child)
    }

    /// SIGKILL (no drain, no commit) and wait for the exit. Killing a process
    /// that has already exited is not an error: it is reaped all the same.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Waits for the process to exit by itself (e.g. after a SIGTERM the test
    /// sent), for its exit status.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.0.wait()
    }
}

impl From<Child> for KillOnDrop {
    fn from(child: Child) -> Self {
        Self(child)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}
