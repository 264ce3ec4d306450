//! `kvroute import vllm-events` holds the converted trace until both inputs are read
//! (its ticks count from the earliest time of both, and its events are ordered by
//! them), but reads it back through validation from canonical bytes made as they are
//! read, into compactly held events: neither the trace's bytes nor a second typed trace
//! is held. Making the bytes whole and parsing them into a second trace held about
//! three times the written trace; this holds under twice it, plus the binary.
//!
//! The peak is the child's `ru_maxrss` (`getrusage(RUSAGE_CHILDREN)`), the largest of
//! every waited child of this process, so this file holds one test and runs one child.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/engine_events");

/// The fixture capture's messages repeated `times` times under increasing sequence
/// numbers, as one publisher sending the same stores and removals again and again.
fn repeated_capture(times: u64) -> String {
    let capture = std::fs::read_to_string(format!("{FIXTURES}/vllm.capture.jsonl")).unwrap();
    let messages: Vec<serde_json::Value> = capture
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut out = String::new();
    let mut seq = 0u64;
    for _ in 0..times {
        for message in &messages {
            let mut message = message.clone();
            message["seq"] = seq.into();
            seq += 1;
            writeln!(out, "{message}").unwrap();
        }
    }
    out
}

#[test]
fn importing_a_long_capture_holds_under_twice_the_written_trace() {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("capture.jsonl");
    std::fs::write(&capture, repeated_capture(10_000)).unwrap();
    let out = dir.path().join("trace.json");
    let output = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["import", "vllm-events"])
        .arg(&capture)
        .arg("--requests")
        .arg(format!("{FIXTURES}/requests.jsonl"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the import succeeds: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written_bytes = std::fs::metadata(&out).unwrap().len();
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    // Twice the trace plus 20 MB for the binary and the converter's tables; holding the
    // trace, its bytes and a second trace at once (about 3x, 49 MB for this 10 MB
    // trace) exceeds it.
    let bound_bytes = 2 * written_bytes + 20_000_000;
    eprintln!(
        "import of a capture writing {written_bytes} bytes of trace peaked at {peak_bytes} \
         bytes (bound {bound_bytes})"
    );
    assert!(
        written_bytes > 8_000_000,
        "the trace is large enough to tell"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "the import peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
