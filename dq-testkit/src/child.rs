//! A copy of the running test binary, started as a child process to run one `#[ignore]`d test
//! (a worker in another OS process): it reports on its stdout with lines starting with a
//! prefix of the test's choosing, which the parent reads over a channel, and it is killed by
//! its pid (SIGKILL) when dropped, if not before.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

/// A child process running one test of this test binary.
pub struct TestChild {
    child: Child,
    said: UnboundedReceiver<String>,
}

impl TestChild {
    /// Starts this test binary again running only the ignored test `test` (`--exact
    /// --ignored --nocapture`), with environment variable `var` = `value` (which the test reads
    /// to know it is the child); its stdout lines starting with `says` are handed to
    /// [`TestChild::next_said`] without the prefix, its stderr goes to ours.
    pub fn spawn(test: &str, var: &str, value: &str, says: &str) -> TestChild {
        let mut child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([test, "--exact", "--ignored", "--nocapture"])
            .env(var, value)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("dq-testkit: start the child running {test}: {e}"));
        let stdout = child.stdout.take().expect("a piped stdout");
        let (tx, said) = unbounded_channel();
        let says = says.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(said) = line.strip_prefix(&says)
                    && tx.send(said.to_owned()).is_err()
                {
                    return;
                }
            }
        });
        TestChild { child, said }
    }

    /// The next line the child reports (without its prefix); panics naming `what` if none
    /// comes within `wait`, or if the child ended first.
    pub async fn next_said(&mut self, what: &str, wait: Duration) -> String {
        tokio::time::timeout(wait, self.said.recv())
            .await
            .unwrap_or_else(|_| panic!("dq-testkit: {what}: the child said nothing in {wait:?}"))
            .unwrap_or_else(|| panic!("dq-testkit: {what}: the child ended without saying it"))
    }

    /// Kills the child (SIGKILL, by its pid) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        self.kill();
    }
}
