//! `kvroute import weka` holds the live sessions' added ids and one file, not the
//! input: every session here overlaps every other on the merged clock, and each
//! request repeats its predecessor's ids before adding a few, as a coding session's
//! prompt grows, so the files spell out many times the ids the import keeps.
//!
//! The peak is the child's `ru_maxrss` (`getrusage(RUSAGE_CHILDREN)`), the largest of
//! every waited child of this process, so this file holds one test and runs one child.

use std::fmt::Write as _;
use std::process::Command;

#[path = "support/idle_rss.rs"]
mod idle_rss;
#[path = "support/peak_rss.rs"]
mod peak_rss;

/// One session file of `requests` requests, 10 s apart, each adding 5 blocks.
fn session_file(requests: u64) -> String {
    let mut entries = Vec::new();
    let mut ids: Vec<String> = Vec::new();
    for k in 0..requests {
        for _ in 0..5 {
            ids.push((ids.len() + 1).to_string());
        }
        let mut entry = String::new();
        write!(
            entry,
            r#"{{"t":{}.0,"type":"n","model":"m","in":{},"out":50,"hash_ids":[{}],"api_time":2.0,"think_time":8.0}}"#,
            k * 10,
            ids.len() * 64 + 7,
            ids.join(",")
        )
        .unwrap();
        entries.push(entry);
    }
    format!(
        r#"{{"id":"x","models":["m"],"block_size":64,"hash_id_scope":"local","tool_tokens":1,"system_tokens":1,"requests":[{}]}}"#,
        entries.join(",")
    )
}

#[test]
fn importing_many_overlapping_sessions_holds_a_fraction_of_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    std::fs::create_dir(&sessions).unwrap();
    let text = session_file(150);
    let files = 160u64;
    for i in 0..files {
        std::fs::write(sessions.join(format!("trace_{i:04}.json")), &text).unwrap();
    }
    let input_bytes = text.len() as u64 * files;
    let out = dir.path().join("trace.json");
    let idle_bytes = idle_rss::idle_import_bytes(dir.path());
    let output = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["import", "weka"])
        .arg(&sessions)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the import succeeds: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let peak_bytes = peak_rss::waited_children_peak_bytes();
    // The binary's own pages (measured, as import_memory.rs does) and a quarter of the
    // input: holding the input, or every request's ids, exceeds it.
    let bound_bytes = idle_bytes + input_bytes / 4;
    eprintln!("import of {input_bytes} bytes of sessions peaked at {peak_bytes} bytes (bound {bound_bytes}, the binary idle {idle_bytes})");
    assert!(
        peak_bytes <= bound_bytes,
        "import of {input_bytes} bytes of sessions peaked at {peak_bytes} bytes, over {bound_bytes}"
    );
}
