//! `kvroute import mooncake` holds one line, not the input or the trace it writes so an
//! input of any length fits in memory: it writes the canonical trace event by event as it
//! reads the lines. Reading the whole file, then building the trace and its canonical
//! bytes, held the input plus several times it (the written trace spells each block out as
//! a `{"key":..,"tokens":..}` segment); sharing each distinct block's key while writing
//! held a key per distinct block, which grows with the input as Mooncake's ids do.
//!
//! The peak is the child's `ru_maxrss` (`getrusage(RUSAGE_CHILDREN)`), the largest of
//! every waited child of this process, so this file holds one test and runs one child.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/idle_rss.rs"]
mod idle_rss;
#[path = "support/peak_rss.rs"]
mod peak_rss;

/// About `target_bytes` of Mooncake JSON Lines: non-decreasing timestamps, prompts of
/// up to 16 blocks, the first one of 61 shared prefixes and the rest new ids, as a
/// Mooncake trace's ids keep growing (hundreds of thousands of distinct blocks).
fn mooncake_lines(target_bytes: usize) -> String {
    let mut out = String::new();
    let mut line = 0u64;
    let mut next_id = 1_000u64;
    while out.len() < target_bytes {
        line += 1;
        let blocks = 1 + line % 16;
        let mut ids = vec![(line % 61).to_string()];
        for _ in 1..blocks {
            ids.push(next_id.to_string());
            next_id += 1;
        }
        writeln!(
            out,
            r#"{{"timestamp": {}, "input_length": {}, "output_length": {}, "hash_ids": [{}]}}"#,
            line / 3,
            512 * blocks - line % 100,
            1 + line % 300,
            ids.join(", ")
        )
        .unwrap();
    }
    out
}

#[test]
fn importing_a_long_mooncake_trace_holds_a_fraction_of_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mooncake.jsonl");
    let text = mooncake_lines(6_000_000);
    std::fs::write(&input, &text).unwrap();
    let input_bytes = text.len() as u64;
    drop(text);
    let out = dir.path().join("trace.json");
    let idle_bytes = idle_rss::idle_import_bytes(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["import", "mooncake"])
        .arg(&input)
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
    // The binary's own pages (measured: they grow with the binary, about 17 MB for a
    // debug build), an eighth of the input and 3 MB for the line and the writer's
    // buffers: holding the input alone exceeds it.
    let bound_bytes = idle_bytes + input_bytes / 8 + 3_000_000;
    eprintln!(
        "import of {input_bytes} bytes of lines ({written_bytes} bytes of trace) peaked at \
         {peak_bytes} bytes (bound {bound_bytes}, the binary idle {idle_bytes})"
    );
    assert!(
        peak_bytes <= bound_bytes,
        "import of {input_bytes} bytes of lines peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
