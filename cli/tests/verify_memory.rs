//! `kvroute verify` of a large receipt holds neither the receipt nor a tree of it: it
//! streams the file and compares it with the oracle's pieces as they come (issue 23).
//! A receipt of about 203 MB (64 workers, 4,000 events) is written, then verified by
//! the `kvroute` binary as a child process.
//!
//! The bound is a fixed 96 MB for verify's own side (the binary, the trace, the
//! channel's pieces in flight, one decision on a difference) plus, while the oracle's
//! streaming API is the shim over the whole-receipt oracle
//! ([`kvroute_cli::verify::ORACLE_HOLDS_ITS_RECEIPT`]), what that oracle holds: its
//! receipt's bytes and the runs behind them, allowed as 3 bytes per receipt byte. The
//! verifier before this one held about 33 bytes per receipt byte (2.94 GB for 89 MB).
//!
//! The peak is the children's `ru_maxrss` (the largest of every waited child), so this
//! file holds one test.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

/// A `scale` trace of `workers` workers and `requests` requests with two-segment
/// prefixes from a small key space, a store every 16 events.
fn wide_trace(workers: usize, requests: u64) -> String {
    let mut out = String::from(r#"{"format":"kvroute-trace/1","limits":"scale","workers":["#);
    for w in 0..workers {
        if w > 0 {
            out.push(',');
        }
        write!(
            out,
            r#"{{"id":"w{w:02}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
        )
        .unwrap();
    }
    out.push_str(r#"],"events":["#);
    let mut epochs = vec![0u64; workers];
    for seq in 1..=requests {
        if seq > 1 {
            out.push(',');
        }
        let family = seq % 29;
        if seq % 16 == 0 {
            let w = (seq / 16) as usize % workers;
            epochs[w] += 1;
            write!(
                out,
                r#"{{"seq":{seq},"tick":{seq},"type":"cache","op":"store","worker":"w{w:02}","epoch":{},"tenant":"t","model":"m","adapter":"base","segments":[{{"key":"f{family}b0","tokens":64}}]}}"#,
                epochs[w]
            )
            .unwrap();
            continue;
        }
        write!(
            out,
            r#"{{"seq":{seq},"tick":{seq},"type":"request","id":"r{seq}","tenant":"t","model":"m","adapter":"base","prefix":[{{"key":"f{family}b0","tokens":64}},{{"key":"f{family}b1","tokens":64}}],"prompt_tokens":{},"decode_tokens":{}}}"#,
            256 + seq % 256,
            1 + seq % 64
        )
        .unwrap();
    }
    out.push_str("]}");
    out
}

#[test]
fn verifying_a_receipt_of_over_200_mb_holds_neither_the_receipt_nor_a_tree_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("wide.json");
    let receipt = dir.path().join("wide.r.json");
    let trace_text = wide_trace(64, 4_000);
    std::fs::write(&trace, &trace_text).unwrap();
    // The oracle writes the receipt here (it is optimised in test builds; core's writer
    // in a debug build takes longer than the whole check), with replay's newline, and
    // is gone before verify starts. Its bytes are core's: the differential tests say so.
    let mut bytes = kvroute_oracle::replay(trace_text.as_bytes()).expect("the trace is valid");
    bytes.push(b'\n');
    std::fs::write(&receipt, &bytes).unwrap();
    drop(bytes);
    drop(trace_text);
    let kvroute = env!("CARGO_BIN_EXE_kvroute");
    let receipt_bytes = std::fs::metadata(&receipt).unwrap().len();
    assert!(
        receipt_bytes >= 200_000_000,
        "a {receipt_bytes}-byte receipt"
    );
    let verified = Command::new(kvroute)
        .arg("verify")
        .arg("--trace")
        .arg(&trace)
        .arg(&receipt)
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(String::from_utf8_lossy(&verified.stdout).starts_with("ok: the receipt matches"));
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    let oracle_bytes = if kvroute_cli::verify::ORACLE_HOLDS_ITS_RECEIPT {
        3 * receipt_bytes
    } else {
        0
    };
    let bound_bytes = 96_000_000 + oracle_bytes;
    eprintln!(
        "verify of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes (bound {bound_bytes})"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "verify of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
