//! The `kvroute` binary end to end: exit codes, error lines, formats and `--out`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("fixture paths are UTF-8")
}

#[test]
fn every_invalid_fixture_exits_2_with_its_exact_error() {
    let dir = fixtures().join("invalid");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 7,
        "expected the seven invalid fixtures, found {cases:?}"
    );
    for case in cases {
        let trace = case.join("trace.json");
        let expected = std::fs::read_to_string(case.join("expected_stderr.txt")).unwrap();
        for command in ["validate", "replay"] {
            let out = kvroute(&[command, path_str(&trace)]);
            assert_eq!(out.status.code(), Some(2), "{command} {}", case.display());
            assert_eq!(
                String::from_utf8_lossy(&out.stderr),
                expected,
                "{}",
                case.display()
            );
            assert!(
                out.stdout.is_empty(),
                "nothing is routed for {}",
                case.display()
            );
        }
    }
}

#[test]
fn json_output_digest_matches_the_committed_receipt_sha256() {
    for topic in ["lab", "tenant_boundary", "stale_epoch", "overload_escape"] {
        let dir = fixtures().join(topic);
        let out = kvroute(&[
            "replay",
            path_str(&dir.join("trace.json")),
            "--format",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(stdout.ends_with("}\n") && stdout.matches('\n').count() == 1);
        let receipt: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let expected = std::fs::read_to_string(dir.join("receipt.sha256")).unwrap();
        assert_eq!(
            format!("{}\n", receipt["receipt_digest"].as_str().unwrap()),
            expected
        );
    }
}

#[test]
fn no_arguments_replays_the_lab_trace_as_a_table() {
    let out = kvroute(&[]);
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8(out.stdout).unwrap();
    for policy in [
        "round_robin",
        "least_load",
        "longest_prefix",
        "cache_plus_load",
    ] {
        assert!(table.contains(policy), "{table}");
    }
    let digest = std::fs::read_to_string(fixtures().join("lab/receipt.sha256")).unwrap();
    assert!(table.contains(digest.trim()), "{table}");
}

#[test]
fn csv_has_a_header_and_one_line_per_candidate_row() {
    let trace = fixtures().join("round_robin_ineligible/trace.json");
    let out = kvroute(&["replay", path_str(&trace), "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("policy,seq,tick,request,chosen,route_kind,worker"));
    // 4 policies x 5 requests x 3 workers.
    assert_eq!(lines.count(), 60);
}

#[test]
fn out_writes_the_file_and_a_failed_run_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("receipt.json");
    let trace = fixtures().join("stale_epoch/trace.json");
    let out = kvroute(&[
        "replay",
        path_str(&trace),
        "--format",
        "json",
        "--out",
        path_str(&good),
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(std::fs::read_to_string(&good).unwrap().ends_with("}\n"));

    let bad = dir.path().join("bad.json");
    let invalid = fixtures().join("invalid/unknown_worker/trace.json");
    let out = kvroute(&[
        "replay",
        path_str(&invalid),
        "--format",
        "json",
        "--out",
        path_str(&bad),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("receipt.json")],
        "no partial or temporary file"
    );
}

#[test]
fn unwritable_out_exits_1_and_usage_errors_exit_2() {
    let out = kvroute(&["replay", "--out", "/nonexistent-dir/receipt.json"]);
    assert_eq!(out.status.code(), Some(1));
    let out = kvroute(&["replay", "--format", "yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let out = kvroute(&["validate", "/nonexistent-trace.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read trace"));
}

#[test]
fn not_json_and_not_a_trace_are_invalid_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.json");
    std::fs::write(&path, "{\"format\": ").unwrap();
    let out = kvroute(&["validate", path_str(&path)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("$: invalid JSON: "));
    std::fs::write(&path, "[1, 2]").unwrap();
    let out = kvroute(&["validate", path_str(&path)]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "$: expected an object, found [1,2]\n"
    );
}

#[test]
fn verify_exits_0_for_a_genuine_receipt_and_1_for_a_doctored_one() {
    let dir = tempfile::tempdir().unwrap();
    let trace = fixtures().join("lab/trace.json");
    let receipt = dir.path().join("receipt.json");
    let out = kvroute(&[
        "replay",
        path_str(&trace),
        "--format",
        "json",
        "--out",
        path_str(&receipt),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let out = kvroute(&["verify", "--trace", path_str(&trace), path_str(&receipt)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&receipt)
        .unwrap()
        .replacen("\"hit\"", "\"cold\"", 1);
    std::fs::write(&receipt, text).unwrap();
    let out = kvroute(&["verify", "--trace", path_str(&trace), path_str(&receipt)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected: receipt_digest is"));
}

#[test]
fn swarm_runs_seeds_and_prints_a_summary() {
    let out = kvroute(&[
        "swarm", "--seeds", "20", "--start", "5", "--jobs", "2", "--shard", "1/2",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("swarm: first seed 5, 10 seeds from 5, shard 1/2, 2 jobs\n"),
        "{text}"
    );
    assert!(
        text.contains("swarm: 10 seeds run, 0 divergences"),
        "{text}"
    );
    let out = kvroute(&["swarm", "--seeds", "1", "--shard", "3/2"]);
    assert_eq!(out.status.code(), Some(2));
}
