//! `kvroute validate` of a large trace holds what the validated trace needs, not the
//! document: it streams the file, so memory follows the trace's state. Reading the whole
//! text and a tree of it peaked at about 16 bytes of memory per byte of trace; a typed
//! trace of a `String` per name and key, about 2.4 (66.6 MB for this 24 MB trace). With the
//! repeated strings shared it peaks at 38.1 MB, so the bound here is 1.5 bytes per byte
//! plus a fixed 16 MB allowance for the binary (52 MB): the unshared trace fails it.
//!
//! The peak is the child's `ru_maxrss`, read with `getrusage(RUSAGE_CHILDREN)` after it
//! is waited for. That figure is the largest of every waited child of this process, so
//! this file holds one test and runs one child.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

/// About 24 MB of `scale` trace: 8 workers, requests with eight-segment prefixes from a
/// small key space, a store every 16 events (the shape of bench-table's 200 MB trace).
fn scale_trace(target_bytes: usize) -> String {
    let mut out = String::from(r#"{"format":"kvroute-trace/1","limits":"scale","events":["#);
    let mut epochs = [0u64; 8];
    let mut seq = 0u64;
    while out.len() < target_bytes {
        seq += 1;
        if seq > 1 {
            out.push(',');
        }
        let family = seq % 61;
        let tick = seq / 4;
        if seq.trailing_zeros() >= 4 {
            let w = (seq / 16 % 8) as usize;
            epochs[w] += 1;
            write!(
                out,
                r#"{{"seq":{seq},"tick":{tick},"type":"cache","op":"store","worker":"w{w}","epoch":{},"tenant":"t","model":"m","adapter":"base","segments":[{{"key":"f{family}b0","tokens":64}}]}}"#,
                epochs[w]
            )
            .unwrap();
            continue;
        }
        write!(
            out,
            r#"{{"seq":{seq},"tick":{tick},"type":"request","id":"r{seq}","tenant":"t","model":"m","adapter":"base","prefix":["#
        )
        .unwrap();
        for b in 0..8 {
            if b > 0 {
                out.push(',');
            }
            write!(out, r#"{{"key":"f{family}b{b}","tokens":64}}"#).unwrap();
        }
        write!(
            out,
            r#"],"prompt_tokens":{},"decode_tokens":{}}}"#,
            512 + seq % 512,
            1 + seq % 256
        )
        .unwrap();
    }
    // `workers` after `events`, as a streamed reader must accept.
    out.push_str(r#"],"workers":["#);
    for w in 0..8 {
        if w > 0 {
            out.push(',');
        }
        write!(
            out,
            r#"{{"id":"w{w}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
        )
        .unwrap();
    }
    out.push_str("]}");
    out
}

#[test]
fn validating_a_large_trace_holds_less_than_one_and_a_half_bytes_per_byte_of_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scale.json");
    let text = scale_trace(24_000_000);
    std::fs::write(&path, &text).unwrap();
    let trace_bytes = text.len() as u64;
    drop(text);
    let output = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the trace validates: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("ok: 8 workers"));
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    let bound_bytes = 3 * trace_bytes / 2 + 16_000_000;
    eprintln!(
        "validate of a {trace_bytes}-byte trace peaked at {peak_bytes} bytes (bound {bound_bytes})"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "validate of a {trace_bytes}-byte trace peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
