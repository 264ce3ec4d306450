//! `kvroute report` of a receipt file streams it: the peak follows the runs it parses,
//! not a copy of the file's bytes plus a JSON tree of them, which together took 12 to
//! 25 times the receipt's size. The receipt here is a JSON Lines one of 100 requests on
//! 512 workers (about 40 MB, nearly all candidate rows), made by `import mooncake` and
//! `replay` from generated Mooncake lines. The bound is twice the receipt's bytes plus
//! [`ALLOWANCE_BYTES`]; read whole, the report of this receipt peaked at about 1.1 GB.
//!
//! The peak is `ru_maxrss` of every waited child (see `support/peak_rss.rs`): the import
//! and the replay that make the receipt are children too, and each holds far less than
//! the bound (a replay keeps the routing state, not the receipt), so the figure read
//! is the report's.

use std::path::Path;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

const REQUESTS: u64 = 100;
const WORKERS: &str = "512";
/// The binary (a debug build), its buffers and the page: rendered at full detail first
/// (512 rows a decision), it is well over the 10 MB budget before detail is cut, and
/// that render alone takes about 150 MB.
const ALLOWANCE_BYTES: u64 = 160_000_000;

fn kvroute(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs");
    assert!(
        out.status.success(),
        "kvroute {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

#[test]
fn a_report_of_a_large_receipt_holds_less_than_twice_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let lines: String = (0..REQUESTS)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 1024, \"output_length\": 16, \"hash_ids\": [{}, {}]}}\n",
                i * 100,
                i % 7,
                i
            )
        })
        .collect();
    let mooncake = dir.path().join("m.jsonl");
    std::fs::write(&mooncake, lines).unwrap();
    let trace = dir.path().join("m.json");
    kvroute(&[
        "import",
        "mooncake",
        s(&mooncake),
        "--workers",
        WORKERS,
        "-o",
        s(&trace),
    ]);
    let receipt = dir.path().join("r.jsonl");
    kvroute(&[
        "replay",
        s(&trace),
        "--format",
        "jsonl",
        "--out",
        s(&receipt),
    ]);
    let page = dir.path().join("page.html");
    kvroute(&["report", s(&receipt), "-o", s(&page)]);
    let receipt_bytes = std::fs::metadata(&receipt).unwrap().len();
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    let bound_bytes = 2 * receipt_bytes + ALLOWANCE_BYTES;
    println!("receipt {receipt_bytes} bytes, peak {peak_bytes} bytes, bound {bound_bytes}");
    assert!(receipt_bytes > 30_000_000, "{receipt_bytes}");
    assert!(
        peak_bytes <= bound_bytes,
        "report of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
