//! `kvroute replay --format jsonl` holds the routing state and the events compactly, not a
//! typed copy and a compiled copy of every event, so memory follows the state and not the
//! input. The trace here is made of what those copies cost most: 20,000 events (18,750
//! requests, the rest stores) on 2 workers, each request with a 32-segment prefix drawn
//! from 64 families (so 2,048 keys), about 20 MB of text. Held as typed events plus their
//! compiled copy, a request cost about 1.4 kB (896 bytes typed, 512 compiled); held
//! compactly it costs one 64-byte record, its id's bytes and its share of the validation
//! tables, and an identical run of segments is stored once. The bound is the state's
//! allowance ([`STATE_ALLOWANCE_BYTES`]) plus 128 bytes an event, which the typed trace
//! alone already exceeds.
//!
//! The peak is the child's `ru_maxrss`, read with `getrusage(RUSAGE_CHILDREN)` after it
//! is waited for. That figure is the largest of every waited child of this process, so
//! this file holds one test and runs one child.

use std::io::{BufWriter, Write};
use std::process::{Command, Stdio};

#[path = "support/peak_rss.rs"]
mod peak_rss;

const EVENTS: u64 = 20_000;
const SEGMENTS: u64 = 32;
/// The binary (a debug build maps about 14.6 MB replaying the built-in lab trace), its
/// buffers, the 2 workers' state and the 2,048 keys.
const STATE_ALLOWANCE_BYTES: u64 = 20_000_000;

/// Writes a `scale` trace of [`EVENTS`] events on 2 workers, a store every 16 events,
/// to `out`, never holding it: until the child execs, it shares this process's memory,
/// and its peak counts what this process holds.
fn write_trace(out: &mut impl Write) -> std::io::Result<()> {
    write!(
        out,
        r#"{{"format":"kvroute-trace/1","limits":"scale","events":["#
    )?;
    let mut epochs = [0u64; 2];
    for seq in 1..=EVENTS {
        if seq > 1 {
            write!(out, ",")?;
        }
        let family = seq % 64;
        let tick = seq / 4;
        if seq % 16 == 0 {
            let w = (seq / 16 % 2) as usize;
            epochs[w] += 1;
            write!(
                out,
                r#"{{"seq":{seq},"tick":{tick},"type":"cache","op":"store","worker":"w{w}","epoch":{},"tenant":"t","model":"m","adapter":"base","segments":[{{"key":"f{family}b0","tokens":16}}]}}"#,
                epochs[w]
            )?;
            continue;
        }
        write!(
            out,
            r#"{{"seq":{seq},"tick":{tick},"type":"request","id":"r{seq}","tenant":"t","model":"m","adapter":"base","prefix":["#
        )?;
        for b in 0..SEGMENTS {
            if b > 0 {
                write!(out, ",")?;
            }
            write!(out, r#"{{"key":"f{family}b{b}","tokens":16}}"#)?;
        }
        write!(
            out,
            r#"],"prompt_tokens":{},"decode_tokens":{}}}"#,
            SEGMENTS * 16 + seq % 512,
            1 + seq % 64
        )?;
    }
    write!(out, r#"],"workers":["#)?;
    for w in 0..2 {
        if w > 0 {
            write!(out, ",")?;
        }
        write!(
            out,
            r#"{{"id":"w{w}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
        )?;
    }
    write!(out, "]}}")
}

#[test]
fn replaying_a_large_trace_as_json_lines_holds_the_state_not_a_copy_of_each_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("requests.json");
    let mut file = BufWriter::new(std::fs::File::create(&path).unwrap());
    write_trace(&mut file).unwrap();
    file.into_inner().unwrap().sync_all().unwrap();
    // The receipt goes to /dev/null: what is measured is the replay, not a pipe's
    // reader.
    let status = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["replay", "--format", "jsonl"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .unwrap();
    assert!(status.success(), "the replay succeeds");
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    let bound_bytes = STATE_ALLOWANCE_BYTES + 128 * EVENTS;
    eprintln!(
        "replay --format jsonl of {EVENTS} events peaked at {peak_bytes} bytes (bound {bound_bytes})"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "replay --format jsonl of {EVENTS} events peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
