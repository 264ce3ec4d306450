//! `kvroute verify` of a large receipt holds neither the receipt nor a tree of it: it
//! streams the file and compares it with the oracle's pieces as they come, so
//! memory does not grow with the receipt.
//! A receipt of about 203 MB (64 workers, 4,000 events) is written, then verified by
//! the `kvroute` binary as a child process.
//!
//! The bound is fixed, whatever the receipt's size: the binary, the trace and the
//! oracle's state of it (SPEC.md's state: caches, loads, the two logs as small entries),
//! the channel's pieces in flight and one decision on a difference. The verifier before
//! this one held about 33 bytes per receipt byte (2.94 GB for 89 MB); the first
//! streaming one, over an oracle that still built its whole receipt, about 2.
//!
//! The peak is the children's `ru_maxrss` (the largest of every waited child), so this
//! file holds one test.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

/// The fixed bound, for a receipt of any size (the trace here is about 1 MB).
const BOUND_BYTES: u64 = 96_000_000;

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

/// Writes the trace's receipt, as `replay --format json` writes it, from the oracle's
/// pieces as they come (the differential tests say its bytes are core's), so this
/// process never holds the receipt. That matters for the figure: a child's
/// `ru_maxrss` starts from its parent's peak (the child shares the parent's memory
/// until it execs), so a parent that once held the 200 MB receipt would make any child
/// look as large. `receipt_digest` sorts before the runs it hashes: a placeholder of
/// its fixed length is written, then overwritten once the digest is known.
fn write_receipt_streamed(trace_text: &str, receipt: &std::path::Path) {
    use std::io::{Seek, SeekFrom, Write};
    use std::ops::ControlFlow;
    const HEAD: &[u8] = br#"{"format":"kvroute-receipt/1","#;
    let placeholder = format!(r#""receipt_digest":"sha256:{}","#, "0".repeat(64));
    let mut out = std::io::BufWriter::new(std::fs::File::create(receipt).unwrap());
    let mut first = true;
    let mut sink = |piece: kvroute_oracle::ReceiptPiece<'_>| {
        let bytes = match piece {
            kvroute_oracle::ReceiptPiece::Structure(bytes) => bytes,
            kvroute_oracle::ReceiptPiece::Element { bytes, .. } => bytes,
        };
        if std::mem::take(&mut first) {
            let rest = bytes
                .strip_prefix(HEAD)
                .expect("the receipt starts with its format");
            out.write_all(HEAD).unwrap();
            out.write_all(placeholder.as_bytes()).unwrap();
            out.write_all(rest).unwrap();
        } else {
            out.write_all(bytes).unwrap();
        }
        ControlFlow::Continue(())
    };
    let streamed = kvroute_oracle::replay_streaming(trace_text.as_bytes(), &mut sink);
    let Ok(kvroute_oracle::Streamed::Complete { receipt_digest }) = streamed else {
        panic!("the trace is valid and the oracle streams it whole");
    };
    out.write_all(b"\n").unwrap();
    let mut file = out.into_inner().unwrap();
    file.seek(SeekFrom::Start(HEAD.len() as u64)).unwrap();
    let member = format!(r#""receipt_digest":"{receipt_digest}","#);
    assert_eq!(member.len(), placeholder.len());
    file.write_all(member.as_bytes()).unwrap();
}

#[test]
fn verifying_a_receipt_of_over_200_mb_holds_neither_the_receipt_nor_a_tree_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("wide.json");
    let receipt = dir.path().join("wide.r.json");
    let trace_text = wide_trace(64, 4_000);
    std::fs::write(&trace, &trace_text).unwrap();
    write_receipt_streamed(&trace_text, &receipt);
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
    let bound_bytes = BOUND_BYTES;
    eprintln!(
        "verify of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes (bound {bound_bytes})"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "verify of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
