//! `kvroute import bailian` end to end (SPEC.md §18): the committed four-line fixture
//! becomes the committed trace byte for byte, with the report's lines, and the import
//! refuses to write over its own input.
//!
//! The golden `fixtures/bailian/four-lines.trace.json` was checked by hand against
//! §18.1: ticks 500, 1,250, 2,000 and 3,000 (3.0005 s rounded down), ids `r<k>-c<chat>`,
//! blocks of 16 tokens with the remainder last (40: 16, 16, 8; 60: 16, 16, 16, 12; 17:
//! 16, 1), keys chained from the empty parent as Python's
//! `"k" + sha256(parent.encode() + b"\0" + id.to_bytes(8, "big")).hexdigest()[:16]`
//! gives them, eight idle workers `w0`..`w7`, the default policy and no sharing.

use std::path::Path;
use std::process::{Command, Output};

const FIXTURE: &str = "../fixtures/bailian/four-lines.jsonl";
const GOLDEN: &str = "../fixtures/bailian/four-lines.trace.json";

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn the_four_line_fixture_imports_as_the_hand_checked_trace_with_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b.json");
    let imported = kvroute(&["import", "bailian", FIXTURE, "-o", path_str(&out)]);
    let stderr = String::from_utf8_lossy(&imported.stderr).to_string();
    assert_eq!(imported.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(GOLDEN).unwrap(),
        "the import's bytes are the golden's"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines[0].starts_with("imported 4 requests, 8 workers, 11 segments -> "));
    assert_eq!(
        lines[1..],
        [
            "sessions: 3 root requests (parent_chat_id -1), 1 later turns",
            r#"types: "search" x1, "text" x2"#,
            "re-chained: a naive matcher credits 5 blocks, a prefix cache could reuse 3; 2 (40.00%) credited wrongly",
        ]
    );
    let validated = kvroute(&["validate", path_str(&out)]);
    assert_eq!(validated.status.code(), Some(0));
}

#[test]
fn an_output_that_is_the_input_is_refused_and_the_input_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("b.jsonl");
    std::fs::copy(FIXTURE, &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let refused = kvroute(&[
        "import",
        "bailian",
        path_str(&input),
        "-o",
        path_str(&input),
    ]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(!refused.stderr.is_empty());
    assert_eq!(std::fs::read(&input).unwrap(), before);
}
