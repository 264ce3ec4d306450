//! `kvroute-peers dynamo`: the agreement table, the reproduction it writes, and its
//! exit codes (0 ok, 2 invalid input or usage, 1 anything else).

use std::process::{Command, Output};

const FIXTURE: &str = "fixtures/positional_removed_abort/trace.json";

fn peers(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute-peers"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

#[test]
fn the_table_counts_rows_and_the_reproduction_is_a_valid_trace_showing_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("first.json");
    let run = peers(&[
        "dynamo",
        FIXTURE,
        "--block-tokens",
        "16",
        "--diff-out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let table = String::from_utf8(run.stdout).unwrap();
    let positional = table
        .lines()
        .find(|l| l.starts_with("positional "))
        .expect("a positional row");
    let figures: Vec<&str> = positional.split_whitespace().collect();
    // One row compared, one differing, classified as the known defect (its column
    // found by name: the causes after it are SPEC §12's protocol-only ones).
    assert_eq!(&figures[1..3], ["1", "1"], "{table}");
    let header = table
        .lines()
        .find(|l| l.starts_with("comparison "))
        .unwrap();
    let header: Vec<&str> = header.split_whitespace().collect();
    let removed_abort = header.iter().position(|&c| c == "removed_abort").unwrap();
    assert_eq!(figures[removed_abort], "1", "{table}");
    let written = std::fs::read(&out).unwrap();
    let trace = kvroute_core::parse_trace(&written).expect("the reproduction is a valid trace");
    let options = kvroute_peers::compare::Options {
        block_tokens: 16,
        ..Default::default()
    };
    let again = kvroute_peers::compare::compare(&trace, options);
    assert_eq!(again.tally("positional").rows_differing, 1);
    // Nothing else is left in the directory (the temporary file was renamed), and the
    // result is readable like any output file, not owner-only.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_ne!(mode & 0o044, 0, "mode {mode:o}");
    }
}

#[test]
fn bad_input_and_usage_exit_2_with_the_path_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let run = peers(&["dynamo", missing.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("cannot read trace"));

    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"format": "kvroute-trace/1", "workers": [], "events": 5}"#,
    )
    .unwrap();
    let run = peers(&["dynamo", bad.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("bad.json: events"), "{stderr}");

    assert_eq!(peers(&["dynamo"]).status.code(), Some(2));
    assert_eq!(
        peers(&["dynamo", FIXTURE, "--block-tokens", "0"])
            .status
            .code(),
        Some(2)
    );
}

#[cfg(unix)]
#[test]
fn a_symlink_at_the_reproduction_path_is_left_alone_and_the_run_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("precious");
    std::fs::write(&target, "keep").unwrap();
    let link = dir.path().join("first.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let run = peers(&[
        "dynamo",
        FIXTURE,
        "--block-tokens",
        "16",
        "--diff-out",
        link.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}
