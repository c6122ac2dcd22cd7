//! Small process helpers: liveness by pid, signals by pid, and log tails.

use std::path::Path;
use std::process::{Command, Stdio};

/// Whether `pid` names a live process: it exists in `/proc` and is neither a zombie nor dead.
///
/// A killed `redis-server` lingers as a zombie until the wrapper script reaps it; for our
/// purposes (is the port still served? did the kill work?) that counts as gone.
pub(crate) fn pid_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: `pid (comm) state ...`; comm may itself contain spaces and parentheses.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z" | "X" | "x"))
}

/// Sends signal `sig` (a name like `KILL`, `TERM`, `STOP`, or a number) to `pid` with bash's
/// `kill` builtin.
pub(crate) fn send_signal(pid: u32, sig: &str) -> Result<(), String> {
    if sig.is_empty() || !sig.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("not a signal name: {sig:?}"));
    }
    let out = Command::new("bash")
        .args(["-c", r#"kill -s "$1" "$2""#, "dq-testkit-kill", sig])
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run bash to signal pid {pid}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill -s {sig} {pid} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The last `lines` lines of the text file at `path`, or a note saying why there are none.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn signal_names_are_checked() {
        assert!(send_signal(std::process::id(), "").is_err());
        assert!(send_signal(std::process::id(), "TERM; rm").is_err());
        // Signal 0 only checks that the process exists.
        assert!(send_signal(std::process::id(), "0").is_ok());
    }
}
