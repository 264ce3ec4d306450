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

/// The lab trace's receipt in `format`, written to `dir/name` by `replay`, and the
/// output of `verify` on it, which must exit 0.
fn verified_lab_receipt(dir: &Path, format: &str, name: &str) -> (PathBuf, PathBuf, Output) {
    let trace = fixtures().join("lab/trace.json");
    let receipt = dir.join(name);
    let out = kvroute(&[
        "replay",
        path_str(&trace),
        "--format",
        format,
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
    (trace, receipt, out)
}

#[test]
fn verify_exits_0_for_a_genuine_receipt_and_1_for_a_doctored_one() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, receipt, _) = verified_lab_receipt(dir.path(), "json", "receipt.json");
    let text = std::fs::read_to_string(&receipt)
        .unwrap()
        .replacen("\"hit\"", "\"cold\"", 1);
    std::fs::write(&receipt, text).unwrap();
    let out = kvroute(&["verify", "--trace", path_str(&trace), path_str(&receipt)]);
    assert_eq!(out.status.code(), Some(1));
    // The first difference in the receipt's byte order, not its (now stale) digest.
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "rejected: runs[0].decisions[0].route_kind: the receipt has \"cold\", the recomputation has \"hit\""
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn verify_without_a_receipt_compares_core_with_the_oracle_on_the_trace() {
    let trace = fixtures().join("lab/trace.json");
    let out = kvroute(&["verify", "--trace", path_str(&trace)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = std::fs::read_to_string(fixtures().join("lab/receipt.sha256")).unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "ok: core and the oracle agree on 116 decisions ({})\n",
            digest.trim_end()
        )
    );
    let out = kvroute(&["verify", "--trace", path_str(&fixtures().join("invalid"))]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn verify_reads_a_json_lines_receipt_line_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, receipt, out) = verified_lab_receipt(dir.path(), "jsonl", "receipt.jsonl");
    let digest = std::fs::read_to_string(fixtures().join("lab/receipt.sha256")).unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "ok: the receipt matches the recomputation ({})\n",
            digest.trim_end()
        )
    );
    let text = std::fs::read_to_string(&receipt).unwrap();
    let doctored = [
        (
            text.replacen("\"chosen\":\"w0\"", "\"chosen\":\"w3\",\"chosen\":\"w0\"", 1),
            "runs[0].decisions[0].chosen: repeated member \"chosen\"",
        ),
        (
            text.replacen("\"hit\"", "\"cold\"", 1),
            "runs[0].decisions[0].route_kind: the receipt has \"cold\", the recomputation has \"hit\"",
        ),
        (
            text.replacen("{\"decisions\":", "{\"decisions\": ", 1),
            "runs[0].decisions[0]: non-canonical bytes at byte offset",
        ),
        (text.replacen("sha256:", "sha256:0", 1), "line 1 (byte offset 0): expected"),
    ];
    for (bad, message) in doctored {
        std::fs::write(&receipt, bad).unwrap();
        let out = kvroute(&["verify", "--trace", path_str(&trace), path_str(&receipt)]);
        assert_eq!(out.status.code(), Some(1), "{message}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(&format!("{}: rejected: {message}", path_str(&receipt))),
            "{stderr}"
        );
    }
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

/// Writes the three-line Mooncake sample to `dir/m.jsonl` and imports it to `dir/m.json`
/// with `extra` options: the trace path and the import's output.
fn import_sample(dir: &Path, extra: &[&str]) -> (PathBuf, Output) {
    let input = dir.join("m.jsonl");
    std::fs::write(&input, MOONCAKE_THREE_LINES).unwrap();
    let trace = dir.join("m.json");
    let out = import(&input, &trace, extra);
    (trace, out)
}

/// `kvroute import mooncake INPUT [extra…] -o OUT`.
fn import(input: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["import", "mooncake", path_str(input)];
    args.extend_from_slice(extra);
    args.extend(["-o", path_str(out)]);
    kvroute(&args)
}

/// Three Mooncake lines, shared with the import unit tests.
const MOONCAKE_THREE_LINES: &str = include_str!("../../fixtures/mooncake/three-lines.jsonl");

/// The names left in `dir`, sorted.
fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn import_mooncake_writes_a_trace_that_validates() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, out) = import_sample(dir.path(), &["--workers", "12"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.starts_with("imported 3 requests, 12 workers, 4 segments -> "),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.ends_with("}\n") && text.matches('\n').count() == 1);
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["limits"], "scale");
    assert_eq!(value["workers"][0]["id"], "w00");
    assert_eq!(
        value["events"][0]["prefix"],
        serde_json::json!([
            { "key": "b0", "tokens": 512 },
            { "key": "b1", "tokens": 512 },
            { "key": "b7", "tokens": 76 },
        ])
    );
    let validated = kvroute(&["validate", path_str(&trace)]);
    assert_eq!(validated.status.code(), Some(0));
    let summary = String::from_utf8(validated.stdout).unwrap();
    assert!(
        summary.starts_with("ok: 12 workers, 3 events (3 requests), limits scale, trace sha256:"),
        "{summary}"
    );
    // The digest the import printed is the one validation computes.
    let digest = summary.trim_end().rsplit(' ').next().unwrap();
    assert!(
        stderr.trim_end().ends_with(&format!("({digest})")),
        "{stderr}"
    );
    assert_eq!(dir_names(dir.path()), ["m.json", "m.jsonl"]);
}

#[test]
fn import_mooncake_with_a_bad_line_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.jsonl");
    let text = MOONCAKE_THREE_LINES.replacen("\"input_length\": 512", "\"input_length\": -3", 1);
    std::fs::write(&input, text).unwrap();
    let trace = dir.path().join("bad.json");
    let out = import(&input, &trace, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "{}:2: input_length: expected a non-negative integer, found -3\n",
            input.display()
        )
    );
    assert_eq!(
        dir_names(dir.path()),
        ["bad.jsonl"],
        "no partial or temporary file"
    );

    let out = import(&dir.path().join("missing.jsonl"), &trace, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read Mooncake trace"));
    let out = import(&input, &trace, &["--workers", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(dir_names(dir.path()), ["bad.jsonl"]);
}

#[test]
fn import_of_the_real_mooncake_conversation_trace_validates() {
    let input = kvroute_harness::closed_loop::mooncake_path();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("conversation.json");
    let out = import(&input, &trace, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // On a loaded machine the import can pass the progress quiet period: progress lines
    // come first, the summary is the last line.
    assert!(
        stderr.lines().last().is_some_and(
            |l| l.starts_with("imported 12031 requests, 8 workers, 288500 segments -> ")
        ),
        "{stderr}"
    );
    let validated = kvroute(&["validate", path_str(&trace)]);
    let summary = String::from_utf8_lossy(&validated.stdout);
    assert_eq!(validated.status.code(), Some(0), "{summary}");
    assert!(
        summary.starts_with("ok: 8 workers, 12031 events (12031 requests), limits scale"),
        "{summary}"
    );
}

#[test]
fn jsonl_ends_with_the_same_receipt_digest_as_json() {
    for topic in ["lab", "stale_epoch", "hot_worker_decode"] {
        let trace = fixtures().join(topic).join("trace.json");
        let jsonl = kvroute(&["replay", path_str(&trace), "--format", "jsonl"]);
        assert_eq!(jsonl.status.code(), Some(0), "{topic}");
        let text = String::from_utf8(jsonl.stdout).unwrap();
        let last: serde_json::Value =
            serde_json::from_str(text.lines().last().expect("a closing line")).unwrap();
        let committed =
            std::fs::read_to_string(fixtures().join(topic).join("receipt.sha256")).unwrap();
        assert_eq!(last["receipt_digest"], committed.trim(), "{topic}");
    }
}

#[test]
fn simulate_prints_the_comparison_and_its_generated_traces_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, import) = import_sample(dir.path(), &[]);
    assert_eq!(import.status.code(), Some(0));
    let events = dir.path().join("events");
    let out = kvroute(&[
        "simulate",
        path_str(&trace),
        "--workers",
        "3",
        "--cache-blocks",
        "2",
        "--events-out",
        path_str(&events),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The header echoes every setting the figures depend on (jitter, loss, stale rule
    // and epochs included), so a table can be read without its command line.
    assert!(
        stdout.starts_with(
            "simulate: 3 requests on 3 workers; cache 2 blocks, lag 10 ticks, jitter 0 \
             ticks (seed 0), loss 0 per mille, stale rule worker_epoch, epochs any\npolicy "
        ),
        "{stdout}"
    );
    for policy in [
        "round_robin",
        "least_load",
        "longest_prefix",
        "cache_plus_load",
    ] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(policy))
            .unwrap_or_else(|| panic!("no row for {policy}: {stdout}"));
        assert_eq!(row.split_whitespace().nth(1), Some("3"), "{row}");
        let generated = events.join(format!("{policy}.trace.json"));
        let replayed = kvroute(&["validate", path_str(&generated)]);
        assert_eq!(replayed.status.code(), Some(0), "{policy}");
    }
    // Both capacity units at once is a usage error.
    let both = kvroute(&[
        "simulate",
        path_str(&trace),
        "--cache-blocks",
        "2",
        "--cache-tokens",
        "9",
    ]);
    assert_eq!(both.status.code(), Some(2));
}

/// `simulate --format json` prints the §11.1 document: canonical bytes and a newline,
/// the same figures as the table, one digest per policy's generated trace, and the note
/// on the dropped input events on stderr as the table does.
#[test]
fn simulate_json_is_the_canonical_document_with_the_tables_figures() {
    let trace = fixtures().join("lab/trace.json");
    let json = kvroute(&[
        "simulate",
        path_str(&trace),
        "--format",
        "json",
        "--jitter",
        "5",
        "--seed",
        "2",
    ]);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let text = String::from_utf8(json.stdout).unwrap();
    let body = text.strip_suffix('\n').expect("one trailing newline");
    let document: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        serde_json::to_string(&document).unwrap(),
        body,
        "members in canonical order, no whitespace"
    );
    assert_eq!(document["format"], "kvroute-simulate/1");
    assert_eq!(document["options"]["jitter_ticks"], 5);
    assert!(String::from_utf8_lossy(&json.stderr).contains("dropped the trace's"));
    let table = kvroute(&["simulate", path_str(&trace), "--jitter", "5", "--seed", "2"]);
    let table = String::from_utf8(table.stdout).unwrap();
    let runs = document["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for run in runs {
        let policy = run["policy"].as_str().unwrap();
        let row: Vec<&str> = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(policy))
            .unwrap_or_else(|| panic!("no table row for {policy}"))
            .split_whitespace()
            .collect();
        let columns = [
            "routed",
            "hit_pm",
            "reused",
            "recomputed",
            "skew_m",
            "lat_mean_m",
            "lat_p95_m",
            "stale",
            "stores",
            "evicts",
            "lost",
            "resyncs",
            "phantom",
            "missed",
        ];
        for (i, column) in columns.iter().enumerate() {
            assert_eq!(row[i + 1], run[column].to_string(), "{policy} {column}");
        }
        assert!(run["events_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
    }
}

/// The replay table names its figures as `simulate`'s table and the report page do
/// (one name for one figure, and `stale` split into events and observations as the
/// page splits it), and each column holds the
/// receipt's metric of that name.
#[test]
fn the_replay_table_names_its_columns_as_the_other_tables_do() {
    let table = String::from_utf8(kvroute(&["replay"]).stdout).unwrap();
    let receipt: serde_json::Value =
        serde_json::from_slice(&kvroute(&["replay", "--format", "json"]).stdout).unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let metric_of_column = [
        ("lat_mean_m", "latency_proxy_mean_milli"),
        ("lat_p95_m", "latency_proxy_p95_milli"),
        ("stale_ev", "stale_event_rejections"),
        ("stale_obs", "stale_observation_rejections"),
    ];
    for run in receipt["runs"].as_array().unwrap() {
        let policy = run["policy"].as_str().unwrap();
        let row: Vec<&str> = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(policy))
            .unwrap()
            .split_whitespace()
            .collect();
        for (column, metric) in metric_of_column {
            let at = header.iter().position(|h| *h == column);
            let at = at.unwrap_or_else(|| panic!("no column {column} in {header:?}"));
            assert_eq!(
                row[at],
                run["metrics"][metric].to_string(),
                "{policy} {column}"
            );
        }
    }
}

/// A completion record of the lab receipt, for `report --completions` and `join`.
const LAB_COMPLETION: &str =
    "{\"metadata\": {\"x_request_id\": \"acme-01\", \"request_start_ns\": 1}}\n";

#[test]
fn an_output_that_is_a_link_to_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("receipt.json");
    let replayed = kvroute(&[
        "replay",
        path_str(&fixtures().join("lab/trace.json")),
        "--format",
        "json",
        "--out",
        path_str(&receipt),
    ]);
    assert_eq!(replayed.status.code(), Some(0));
    let completions = dir.path().join("completions.jsonl");
    std::fs::write(&completions, LAB_COMPLETION).unwrap();
    let trace = dir.path().join("trace.json");
    std::fs::copy(fixtures().join("lab/trace.json"), &trace).unwrap();
    let (to_completions, to_trace) = (dir.path().join("page.html"), dir.path().join("t.out"));
    std::os::unix::fs::symlink(&completions, &to_completions).unwrap();
    std::os::unix::fs::symlink(&trace, &to_trace).unwrap();
    let report = [
        "report",
        path_str(&receipt),
        "--completions",
        path_str(&completions),
        "-o",
        path_str(&to_completions),
    ];
    let join = [
        "join",
        path_str(&receipt),
        path_str(&completions),
        "--trace",
        path_str(&trace),
        "--out",
        path_str(&to_trace),
    ];
    for (args, input) in [(&report[..], &completions), (&join[..], &trace)] {
        let before = std::fs::read(input).unwrap();
        let out = kvroute(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is also an input of this command"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read(input).unwrap(),
            before,
            "{args:?} kept its input"
        );
    }
}
