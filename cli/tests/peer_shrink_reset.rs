//! A shrink re-runs its peer on every candidate trace, one process reset between
//! candidates when the peer offers `reset` (SPEC.md §15.2). A peer that fails a reset
//! part-way (here its second) costs that process, not the shrink: the candidate it
//! had just answered still counts, the next candidate gets a fresh process, the
//! shrunk trace is the one a peer that never fails gives, and no process is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const FIXTURE: &str = "../fixtures/stale_epoch/trace.json";

fn faulty_peer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/faulty_peer.py")
}

/// `kvroute peer run FIXTURE --diff-out DIR/shrunk.json -- python3 faulty_peer.py
/// MODE DIR/pids`: the output, the shrunk trace and every peer process id started.
fn shrink_with(mode: &str) -> (Output, Vec<u8>, Vec<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let shrunk = dir.path().join("shrunk.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["peer", "run", FIXTURE, "--diff-out"])
        .arg(&shrunk)
        .args(["--", "python3"])
        .arg(faulty_peer())
        .arg(mode)
        .arg(dir.path().join("pids"))
        .output()
        .unwrap();
    let pids = std::fs::read_to_string(dir.path().join("pids.all"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    (out, std::fs::read(&shrunk).unwrap_or_default(), pids)
}

/// The stderr line that says what the shrink kept, without the path written to.
fn first_difference_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find(|l| l.contains("first difference: "))
        .and_then(|l| l.split(" -> ").next())
        .unwrap_or_default()
        .to_owned()
}

fn assert_gone(pids: &[i32]) {
    // A killed process init has still to reap may take a moment; one left running
    // never goes, whatever the bound.
    let deadline = Instant::now() + Duration::from_secs(10);
    let exists = |pid: &i32| Path::new(&format!("/proc/{pid}")).exists();
    while pids.iter().any(exists) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!pids.iter().any(exists), "left running: {pids:?}");
}

#[test]
fn a_peer_that_fails_its_second_reset_shrinks_to_the_same_trace() {
    let (steady, steady_trace, steady_pids) = shrink_with("reset");
    let (failing, failing_trace, failing_pids) = shrink_with("reset_fails_second");
    for out in [&steady, &failing] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = first_difference_line(&steady);
    assert!(
        line.contains(" events, "),
        "{}",
        String::from_utf8_lossy(&steady.stderr)
    );
    assert_eq!(first_difference_line(&failing), line);
    assert!(!steady_trace.is_empty());
    assert_eq!(failing_trace, steady_trace);
    // The run's process, and the shrink's: one when resets work, more when every
    // process fails its second.
    assert_eq!(steady_pids.len(), 2, "{steady_pids:?}");
    assert!(failing_pids.len() > 2, "{failing_pids:?}");
    assert_gone(&steady_pids);
    assert_gone(&failing_pids);
}
