//! Committed fixtures: `fixtures/<topic>/trace.json` with its golden `ledger.json`
//! (the receipt, pretty-printed) and `receipt.sha256`, and `fixtures/invalid/<case>/`
//! traces with the exact `expected_stderr.txt` each must produce.

use std::path::PathBuf;

/// The repository's `fixtures/` directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("fixtures")
}

fn subdirs_with_trace(dir: PathBuf) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("trace.json").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Topics of valid fixtures, sorted.
pub fn valid_topics() -> Vec<String> {
    subdirs_with_trace(root())
}

/// Names of invalid-trace cases, sorted.
pub fn invalid_cases() -> Vec<String> {
    subdirs_with_trace(root().join("invalid"))
}

/// Path of a valid fixture's directory.
pub fn topic_dir(topic: &str) -> PathBuf {
    root().join(topic)
}

/// Path of an invalid case's directory.
pub fn invalid_dir(case: &str) -> PathBuf {
    root().join("invalid").join(case)
}

/// The trace bytes of a valid topic.
pub fn trace_bytes(topic: &str) -> Vec<u8> {
    let path = topic_dir(topic).join("trace.json");
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// A receipt's canonical bytes as the pretty JSON stored in `ledger.json` (members
/// sorted, two-space indent, trailing newline), so goldens can be read and reviewed.
pub fn pretty_ledger(canonical_receipt: &[u8]) -> String {
    let value: serde_json::Value =
        serde_json::from_slice(canonical_receipt).expect("a receipt is valid JSON");
    let mut text = serde_json::to_string_pretty(&value).expect("a Value always serialises");
    text.push('\n');
    text
}

/// The `receipt_digest` member of canonical receipt bytes.
pub fn receipt_digest(canonical_receipt: &[u8]) -> String {
    let value: serde_json::Value =
        serde_json::from_slice(canonical_receipt).expect("a receipt is valid JSON");
    value["receipt_digest"]
        .as_str()
        .expect("a receipt carries receipt_digest")
        .to_owned()
}
