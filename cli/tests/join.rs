//! `kvroute join` end to end (SPEC.md §14): the lab receipt written by `replay`, the
//! hand-checked AIPerf records of `fixtures/join/`, read from a file and from stdin, as
//! a table, JSON and CSV, and to `--out`. The figures themselves are checked against
//! the fixture's README in `core/tests/join.rs`; here, that the command reads and
//! writes them.

use std::io::Write;
use std::process::{Command, Stdio};

const COMPLETIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/join/lab.completions.jsonl"
);

fn kvroute(args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn the_lab_receipt_joins_its_records_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json").display().to_string();
    assert!(
        kvroute(&["replay", "--format", "json", "--out", &receipt], None)
            .status
            .success()
    );
    let slo = ["--slo", "ttft_ms=200,tpot_ms=20"];
    let table = kvroute(&[&["join", &receipt, COMPLETIONS][..], &slo].concat(), None);
    assert!(
        table.status.success(),
        "{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let table = String::from_utf8(table.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[2],
        "matched 7  dropped 21  rejected_served 1  unrouted 1  retried 1"
    );
    assert_eq!(
        lines[5],
        "goodput (ttft <= 200 ms, tpot <= 20 ms): good 2  good_pm 71  span_ns 1500000000  \
         good_per_second_milli 1333"
    );
    // The records on stdin, the document to --out: the same figures.
    let completions = std::fs::read(COMPLETIONS).unwrap();
    let out = dir.path().join("join.json").display().to_string();
    let args = [
        &["join", &receipt, "-", "--format", "json", "--out", &out][..],
        &slo,
    ]
    .concat();
    let written = kvroute(&args, Some(&completions));
    assert!(written.status.success() && written.stdout.is_empty());
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(document["counts"]["completed"], 5);
    assert_eq!(document["prediction"]["ttft_rank_gamma_pm"], -143);
    assert_eq!(document["goodput"]["good"], 2);
    let csv = kvroute(&["join", &receipt, COMPLETIONS, "--format", "csv"], None);
    assert_eq!(
        String::from_utf8(csv.stdout).unwrap().lines().nth(1),
        Some("w0,2,210250,11125,892000,235")
    );
}

/// `--slo` with decimals, in either spelling (SPEC.md §14.2): acme-08 of the fixture
/// (TTFT 400.25 ms, TPOT 15.999 ms) is exactly at `ttft:400.25,tpot_ms=15.999` and so
/// good, and over `ttft_ms=400.249`; objectives cut to whole milliseconds (400, 15)
/// would call it bad under both. The table states the objectives as given, the
/// document in microseconds.
#[test]
fn objectives_with_decimals_hold_records_to_the_microsecond() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = lab_receipt(dir.path());
    let goodput_line = |slo: &str| {
        let table = kvroute(&["join", &receipt, COMPLETIONS, "--slo", slo], None);
        assert!(table.status.success(), "{}", stderr_of(&table));
        let table = String::from_utf8(table.stdout).unwrap();
        table.lines().nth(5).unwrap().to_owned()
    };
    assert_eq!(
        goodput_line("ttft:400.25,tpot_ms=15.999"),
        "goodput (ttft <= 400.25 ms, tpot <= 15.999 ms): good 4  good_pm 142  \
         span_ns 1500000000  good_per_second_milli 2666"
    );
    assert_eq!(
        goodput_line("tpot:15.999,ttft_ms=400.249"),
        "goodput (ttft <= 400.249 ms, tpot <= 15.999 ms): good 3  good_pm 107  \
         span_ns 1500000000  good_per_second_milli 2000"
    );
    let json = kvroute(
        &[
            "join",
            &receipt,
            COMPLETIONS,
            "--slo",
            "ttft_ms=400.25,tpot:15.999",
            "--format",
            "json",
        ],
        None,
    );
    let document = String::from_utf8(json.stdout).unwrap();
    assert!(
        document.contains(r#""format":"kvroute-join/2""#),
        "{document}"
    );
    assert!(
        document.contains(r#""slo":{"tpot_us":15999,"ttft_us":400250}"#),
        "{document}"
    );
    assert!(document.contains(r#""good":4,"#), "{document}");
}

/// A TTFT of exactly 300.5 ms is good under `--slo ttft_ms=300.5` and one of 300.501 ms
/// is not (the records on stdin, two requests of the lab run).
#[test]
fn a_ttft_at_an_objective_between_milliseconds_is_good_and_a_microsecond_over_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = lab_receipt(dir.path());
    let record = |id: &str, ttft_ms: &str| {
        format!(
            "{{\"metadata\": {{\"x_request_id\": \"{id}\", \"request_start_ns\": 0, \
             \"request_end_ns\": 1000000000, \"was_cancelled\": false}}, \"metrics\": \
             {{\"time_to_first_token\": {{\"value\": {ttft_ms}, \"unit\": \"ms\"}}, \
             \"inter_token_latency\": {{\"value\": 1, \"unit\": \"ms\"}}}}, \"error\": null}}\n"
        )
    };
    let records = record("acme-01", "300.5") + &record("acme-02", "300.501");
    for (slo, good) in [
        ("ttft_ms=300.5", "good 1 "),
        ("ttft:300.5", "good 1 "),
        ("ttft_ms=300.501", "good 2 "),
        ("ttft_ms=300.499", "good 0 "),
    ] {
        let joined = kvroute(
            &["join", &receipt, "-", "--slo", slo],
            Some(records.as_bytes()),
        );
        assert!(joined.status.success(), "{}", stderr_of(&joined));
        let table = String::from_utf8(joined.stdout).unwrap();
        let line = table.lines().find(|l| l.starts_with("goodput")).unwrap();
        assert!(line.contains(good), "{slo}: {line}");
    }
}

/// `--slo` text that is not objectives is bad usage naming `--slo`, before any input is
/// read: a fourth decimal, an exponent, a sign, a bare point, a name given twice in its
/// two spellings, a name with the other spelling's separator.
#[test]
fn slo_text_that_is_not_objectives_is_exit_2_naming_the_option() {
    for slo in [
        "ttft_ms=300.1234",
        "ttft_ms=1e3",
        "ttft:-1",
        "tpot:+1",
        "ttft_ms=.5",
        "ttft_ms=5.",
        "ttft_ms=300,ttft:300",
        "ttft=300",
        "ttft_ms:300",
        "ttft_ms=9007199254740.992",
    ] {
        let refused = kvroute(&["join", "no-such-receipt", "-", "--slo", slo], None);
        assert_eq!(refused.status.code(), Some(2), "{slo}");
        let stderr = stderr_of(&refused);
        assert!(
            stderr.starts_with(&format!(
                "error: invalid value '{slo}' for '--slo <OBJECTIVES>': "
            )),
            "{slo}: {stderr}"
        );
    }
}

/// Runs `kvroute simulate TRACE --format FORMAT` with its generated traces and
/// completions (at 7 ticks a ms) written into `out`.
fn simulate_into(trace: &str, out: &std::path::Path, format: &str) {
    let out = out.display().to_string();
    let args = [
        "simulate",
        trace,
        "--events-out",
        &out,
        "--completions-out",
        &out,
    ];
    let run = kvroute(
        &[&args[..], &["--ticks-per-ms", "7", "--format", format]].concat(),
        None,
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// `simulate --completions-out` (SPEC.md §14.4) writes the same four files from the
/// table and from the JSON document, and each joins the receipt of its generated trace
/// with every routed decision matched.
#[test]
fn simulate_writes_completions_that_join_its_receipts() {
    let dir = tempfile::tempdir().unwrap();
    let lab = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/lab/trace.json");
    let (table_dir, json_dir) = (dir.path().join("table"), dir.path().join("json"));
    for (out, format) in [(&table_dir, "table"), (&json_dir, "json")] {
        simulate_into(lab, out, format);
    }
    for policy in [
        "round_robin",
        "least_load",
        "longest_prefix",
        "cache_plus_load",
    ] {
        let file = format!("{policy}.completions.jsonl");
        let completions = table_dir.join(&file);
        assert_eq!(
            std::fs::read(&completions).unwrap(),
            std::fs::read(json_dir.join(&file)).unwrap()
        );
        let receipt = dir
            .path()
            .join(format!("{policy}.receipt.json"))
            .display()
            .to_string();
        let trace = table_dir
            .join(format!("{policy}.trace.json"))
            .display()
            .to_string();
        assert!(kvroute(
            &["replay", &trace, "--format", "json", "--out", &receipt],
            None
        )
        .status
        .success());
        let joined = kvroute(
            &[
                "join",
                &receipt,
                completions.to_str().unwrap(),
                "--run",
                policy,
                "--format",
                "json",
            ],
            None,
        );
        let document: serde_json::Value = serde_json::from_slice(&joined.stdout).unwrap();
        let counts = &document["counts"];
        assert_eq!(counts["matched"], counts["routed"], "{policy}");
        assert_eq!(
            (counts["dropped"].as_u64(), counts["rejected"].as_u64()),
            (Some(0), Some(1)),
            "{policy}"
        );
    }
}

fn fixture(name: &str) -> String {
    format!("{}/../fixtures/join/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn lab_receipt(dir: &std::path::Path) -> String {
    let receipt = dir.join("r.json").display().to_string();
    assert!(
        kvroute(&["replay", "--format", "json", "--out", &receipt], None)
            .status
            .success()
    );
    receipt
}

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn dynamo_and_vllm_bench_records_join_given_or_detected() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = lab_receipt(dir.path());
    for (file, format, matched_line) in [
        (
            "lab.dynamo.jsonl",
            "dynamo",
            "matched 6  dropped 22  rejected_served 1  unrouted 2  retried 1",
        ),
        (
            "lab.vllm-bench.json",
            "vllm-bench",
            "matched 8  dropped 20  rejected_served 0  unrouted 0  retried 0",
        ),
    ] {
        let path = fixture(file);
        let given = kvroute(
            &["join", &receipt, &path, "--completions-format", format],
            None,
        );
        assert!(given.status.success(), "{}", stderr_of(&given));
        let detected = kvroute(&["join", &receipt, &path], None);
        assert_eq!(detected.stdout, given.stdout, "{format}");
        let table = String::from_utf8(given.stdout).unwrap();
        assert_eq!(table.lines().nth(2), Some(matched_line), "{format}");
    }
}

#[test]
fn an_undetectable_layout_and_bad_lines_are_exit_2_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = lab_receipt(dir.path());
    let odd = kvroute(&["join", &receipt, "-"], Some(b"\n{\"colour\":1}\n"));
    assert_eq!(odd.status.code(), Some(2));
    assert_eq!(
        stderr_of(&odd),
        "-:2: cannot tell the completions format from this line (an object with \
         \"metadata\" is aiperf, with \"event\" or \"event_type\" dynamo, with \"ttfts\" \
         vllm-bench); give --completions-format\n"
    );
    assert!(odd.stdout.is_empty());
    let bad_dynamo = kvroute(
        &["join", &receipt, "-", "--completions-format", "dynamo"],
        Some(b"{\"event_type\":\"tool_end\"}\n{\"event_type\":\"request_end\",\"request\":{}}\n"),
    );
    assert_eq!(bad_dynamo.status.code(), Some(2));
    assert_eq!(
        stderr_of(&bad_dynamo),
        "-:2: request: missing required member \"request_id\"\n"
    );
    let bad_bench = kvroute(
        &["join", &receipt, "-"],
        Some(br#"{"duration":1,"ttfts":[0.1,"x"],"itls":[[],[]],"output_lens":[1,1],"errors":["",""]}"#),
    );
    assert_eq!(bad_bench.status.code(), Some(2));
    assert_eq!(
        stderr_of(&bad_bench),
        "-: ttfts[1]: expected a non-negative number of seconds, found \"x\"\n"
    );
}

#[test]
fn trace_gives_cohorts_and_must_be_the_receipts() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = lab_receipt(dir.path());
    let lab_trace = format!("{}/../fixtures/lab/trace.json", env!("CARGO_MANIFEST_DIR"));
    let with = kvroute(
        &[
            "join",
            &receipt,
            COMPLETIONS,
            "--trace",
            &lab_trace,
            "--format",
            "json",
        ],
        None,
    );
    assert!(with.status.success(), "{}", stderr_of(&with));
    let document: serde_json::Value = serde_json::from_slice(&with.stdout).unwrap();
    let cohorts = document["cohorts"].as_array().unwrap();
    assert_eq!(cohorts.len(), 5);
    assert_eq!(
        (
            &cohorts[0]["tenant"],
            &cohorts[0]["adapter"],
            &cohorts[0]["counts"]["matched"]
        ),
        (
            &serde_json::json!("acme"),
            &serde_json::json!("base"),
            &serde_json::json!(7)
        )
    );
    let without = kvroute(&["join", &receipt, COMPLETIONS, "--format", "json"], None);
    let document: serde_json::Value = serde_json::from_slice(&without.stdout).unwrap();
    assert!(document.get("cohorts").is_none());
    // Another trace: its digest is not the receipt's.
    let other = format!(
        "{}/../fixtures/tenant_boundary/trace.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let wrong = kvroute(&["join", &receipt, COMPLETIONS, "--trace", &other], None);
    assert_eq!(wrong.status.code(), Some(2));
    let message = stderr_of(&wrong);
    assert!(
        message.starts_with(&format!("{other}: this trace's digest sha256:"))
            && message.contains("is not the receipt's trace_digest sha256:"),
        "{message}"
    );
    assert!(wrong.stdout.is_empty());
}

/// The lab receipt to a file, and AIPerf records for every request its
/// cache_plus_load run routed, each saying no prompt token was read from cache.
fn lab_receipt_and_uncached_records(dir: &std::path::Path) -> (String, String) {
    let receipt = dir.join("r.json").display().to_string();
    assert!(
        kvroute(&["replay", "--format", "json", "--out", &receipt], None)
            .status
            .success()
    );
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipt).unwrap()).unwrap();
    let run = &document["runs"][3];
    assert_eq!(run["policy"], "cache_plus_load");
    let records: String = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["chosen"].is_string())
        .map(|d| {
            serde_json::json!({
                "metadata": {"x_request_id": d["request"], "request_start_ns": 1},
                "metrics": {
                    "time_to_first_token": {"value": 10, "unit": "ms"},
                    "inter_token_latency": {"value": 1, "unit": "ms"},
                    "usage_prompt_cache_read_tokens": {"value": 0, "unit": "tokens"},
                },
            })
            .to_string()
                + "\n"
        })
        .collect();
    let completions = dir.join("c.jsonl");
    std::fs::write(&completions, records).unwrap();
    (receipt, completions.display().to_string())
}

#[test]
fn a_drift_gate_that_does_not_pass_exits_3_after_the_output_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (receipt, completions) = lab_receipt_and_uncached_records(dir.path());
    let out = dir.path().join("join.json").display().to_string();
    let gated = kvroute(
        &[
            "join",
            &receipt,
            &completions,
            "--format",
            "json",
            "--out",
            &out,
            "--max-drift-pm",
            "0",
            "--max-elsewhere-pm",
            "0",
        ],
        None,
    );
    assert_eq!(gated.status.code(), Some(3));
    let document: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let attribution = &document["attribution"];
    let (attributed, drift_pm) = (&attribution["attributed"], &attribution["drift_pm"]);
    assert!(drift_pm.as_u64().unwrap() > 0, "{attribution}");
    // The run's line, then one per drifting worker; nothing ran elsewhere.
    let mut expected = vec![format!(
        "kvroute join: drift {drift_pm}‰ of {attributed} attributed records is above \
         --max-drift-pm 0 (run cache_plus_load)"
    )];
    for worker in attribution["workers"].as_array().unwrap() {
        if worker["drift_pm"].as_u64().unwrap() > 0 {
            expected.push(format!(
                "kvroute join: drift {}‰ of {} attributed records is above --max-drift-pm 0 \
                 (worker {})",
                worker["drift_pm"], worker["attributed"], worker["worker"]
            ));
        }
    }
    assert_eq!(
        String::from_utf8(gated.stderr).unwrap(),
        expected.join("\n") + "\n"
    );

    // Gates at or above the figures pass; the table goes to stdout as usual.
    let passing = kvroute(
        &[
            "join",
            &receipt,
            &completions,
            "--max-drift-pm",
            "1000",
            "--max-elsewhere-pm",
            "0",
        ],
        None,
    );
    assert_eq!(passing.status.code(), Some(0), "{passing:?}");
    assert!(passing.stderr.is_empty());
    assert!(String::from_utf8(passing.stdout)
        .unwrap()
        .contains(&format!(
            "attribution: attributed {attributed}  unknown 0  lost "
        )));
}

#[test]
fn a_gate_without_cached_tokens_cannot_be_judged_and_a_bad_gate_is_usage() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json").display().to_string();
    assert!(
        kvroute(&["replay", "--format", "json", "--out", &receipt], None)
            .status
            .success()
    );
    let unjudged = kvroute(
        &[
            "join",
            &receipt,
            COMPLETIONS,
            "--max-elsewhere-pm",
            "5",
            "--max-drift-pm",
            "5",
        ],
        None,
    );
    assert_eq!(unjudged.status.code(), Some(3));
    assert!(!unjudged.stdout.is_empty(), "the table is written first");
    assert_eq!(
        String::from_utf8(unjudged.stderr).unwrap(),
        "kvroute join: --max-drift-pm: no completed record carries cached tokens, so drift \
         cannot be judged\n\
         kvroute join: --max-elsewhere-pm: no completed record carries cached tokens, so \
         served elsewhere cannot be judged\n"
    );
    for (option, value) in [
        ("--max-drift-pm", "1001"),
        ("--max-elsewhere-pm", "-1"),
        ("--max-drift-pm", "+5"),
    ] {
        let given = format!("{option}={value}");
        let bad = kvroute(&["join", &receipt, COMPLETIONS, &given], None);
        assert_eq!(bad.status.code(), Some(2), "{option} {value}");
        let stderr = String::from_utf8(bad.stderr).unwrap();
        assert!(stderr.contains(option), "{stderr}");
        assert!(bad.stdout.is_empty());
    }
}
