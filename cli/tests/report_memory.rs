//! `kvroute report` of a receipt file streams it and keeps only what its page shows:
//! the aggregates and the decisions its levels of detail can show, not the runs. The
//! receipt here is a JSON Lines one of 1,500 requests on 64 workers (about 80 MB,
//! nearly all candidate rows), made by `import mooncake` and `replay` from generated
//! Mooncake lines; its page details 300 of its 6,000 decisions. The bound is a quarter
//! of the receipt's bytes plus [`ALLOWANCE_BYTES`]. Holding the parsed runs took more
//! than the receipt's size (a release build peaked at 104 MB on this receipt), and
//! reading it whole 12 to 25 times that.
//!
//! The peak is `ru_maxrss` of every waited child (see `support/peak_rss.rs`): the import
//! and the replay that make the receipt are children too, and each holds far less than
//! the bound (a replay keeps the routing state, not the receipt), so the figure read
//! is the report's.

use std::path::Path;
use std::process::Command;

#[path = "support/peak_rss.rs"]
mod peak_rss;

const REQUESTS: u64 = 1500;
const WORKERS: &str = "64";
/// The binary (a debug build), its buffers, the decisions held for the page's detail
/// (a few hundred of 64 rows) and the page, rendered at full detail first.
const ALLOWANCE_BYTES: u64 = 50_000_000;

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
fn a_report_of_a_large_receipt_holds_what_its_page_shows_not_the_receipt() {
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
    let bound_bytes = receipt_bytes / 4 + ALLOWANCE_BYTES;
    println!("receipt {receipt_bytes} bytes, peak {peak_bytes} bytes, bound {bound_bytes}");
    assert!(receipt_bytes > 70_000_000, "{receipt_bytes}");
    assert!(
        peak_bytes <= bound_bytes,
        "report of a {receipt_bytes}-byte receipt peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
