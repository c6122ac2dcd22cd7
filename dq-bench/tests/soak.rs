//! A short `dq-bench soak` (30 s of load, the worker killed every 5 s), so the soak keeps
//! working between the long runs: it must reconcile with nothing lost, stuck or dead, no
//! duplicate a kill does not explain and no invariant violated. Speed and memory drift are
//! reported by the soak, never asserted here.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest the short soak may take: 30 s of load, a drain bounded by the soak itself
/// (its farthest due time plus margins), worker start-ups, on a loaded 2-core machine.
const LIMIT: Duration = Duration::from_secs(600);

/// `fault-worker`, next to `dq-bench` in the target directory, built (or found fresh) by the
/// same cargo: a selection of test targets (`--test soak`) builds dq-bench's binary but not
/// dq-faults', which could then be stale. `--workspace --bins` is what `cargo test
/// --workspace` builds, so this rebuilds nothing else.
fn fault_worker() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--workspace", "--bins"])
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --workspace --bins failed");
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_dq-bench")).with_file_name("fault-worker");
    assert!(worker.is_file(), "no fault-worker at {}", worker.display());
    worker
}

#[test]
fn a_short_soak_loses_nothing_and_explains_every_duplicate() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq-bench"))
        .args([
            "soak",
            "--minutes",
            "0.5",
            "--kill-every",
            "5",
            "--rate",
            "100",
            "--max-delay",
            "10",
            "--report-every",
            "10",
            "--fault-worker",
        ])
        .arg(fault_worker())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("dq-bench starts");
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the soak did not end within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = reader.join().expect("reader");
    let line = out.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {out}"));
    let n = |field: &str| {
        report[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {report}"))
    };
    assert_eq!(n("lost"), 0, "{report}");
    assert_eq!(n("stuck"), 0, "{report}");
    assert_eq!(n("duplicates_unexplained"), 0, "{report}");
    assert_eq!(n("violations"), 0, "{report}");
    assert_eq!(report["reconciliation"]["dead"], 0, "{report}");
    assert_eq!(report["ok"], true, "{report}");
    assert!(status.success(), "exit {status}: {report}");
    // The soak did what it says: jobs ran, the worker was killed, the mix was mixed.
    assert!(n("kills") >= 2, "{report}");
    assert!(report["reconciliation"]["succeeded"].as_u64() > Some(0));
    let load = &report["load"];
    assert!(load["flaky"].as_u64() > Some(0), "{report}");
    assert!(load["cancel"]["cancelled"].as_u64() > Some(0), "{report}");
    assert!(
        load["reschedule"]["rescheduled"].as_u64() > Some(0),
        "{report}"
    );
    assert_eq!(
        report["soak"]["reference"],
        "half time (the run is shorter than 10 minutes)"
    );
}
