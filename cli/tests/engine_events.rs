//! `kvroute import vllm-events` end to end on captures made by msgspec with the
//! engines' own struct declarations (`engine_events/engines.py`, SPEC.md §13): the
//! report, the trace, what a replay of it decides, and every way an input is refused.
//!
//! The fixtures are committed; `python engines.py capture .` in `engine_events/`
//! (pinned pyzmq and msgspec, `requirements.txt`) writes the same bytes again.

use std::path::Path;
use std::process::{Command, Output};

/// Relative to the package root, the test's working directory, so the report's lines
/// (which name the capture as given) are the same on every machine.
const DIR: &str = "tests/engine_events";

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn fixture(name: &str) -> String {
    format!("{DIR}/{name}")
}

/// Imports `capture` with `requests` into a scratch file: the output, and the trace.
fn import(capture: &str, requests: &str) -> (Output, Option<serde_json::Value>) {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("trace.json");
    let output = kvroute(&[
        "import",
        "vllm-events",
        capture,
        "--requests",
        requests,
        "-o",
        out.to_str().unwrap(),
    ]);
    let trace = std::fs::read(&out)
        .ok()
        .map(|bytes| serde_json::from_slice(&bytes).unwrap());
    (output, trace)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Each cache event as `op@tick#epoch`, in the trace's canonical order.
fn cache_ops(trace: &serde_json::Value) -> Vec<String> {
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "cache")
        .map(|e| format!("{}@{}#{}", e["op"].as_str().unwrap(), e["tick"], e["epoch"]))
        .collect()
}

/// Replays `trace` and returns, per decision of the first run, the request id and
/// its only row's reuse and reasons.
fn decisions(trace: &serde_json::Value) -> Vec<(String, u64, Vec<String>)> {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("trace.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    let out = kvroute(&["replay", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let receipt: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    receipt["runs"][0]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let row = &d["candidates"][0];
            let reasons = row["reasons"].as_array().unwrap();
            (
                d["request"].as_str().unwrap().to_owned(),
                row["reuse"].as_u64().unwrap(),
                reasons
                    .iter()
                    .map(|r| r.as_str().unwrap().to_owned())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn the_vllm_capture_imports_with_its_gap_restart_and_left_out_events() {
    let capture = fixture("vllm.capture.jsonl");
    let (output, trace) = import(&capture, &fixture("requests.jsonl"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let trace = trace.unwrap();
    let report: Vec<String> = stderr(&output).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(
        report,
        [
            "engine events: 4 BlockStored, 1 BlockRemoved, 1 AllBlocksCleared, 1 of unknown type in 5 messages",
            "publishers: 1 restarts, 1 sequence gaps, 0 joined mid-stream",
            "order: 0 earlier than its publisher's previous, 0 earlier than another publisher's before it",
            "left out: 1 not on GPU, 0 other cache group, 0 extra keys, 0 other block size, 0 no token ids, 0 token count, 0 unknown parent, 0 unknown removed hashes",
            "unknown event types: \"BlockUpdated\" x1",
            "tests/engine_events/vllm.capture.jsonl:4: worker \"tcp://127.0.0.1:5557|kv-events|dp0\": sequence gap: seq 4 after 2",
            "tests/engine_events/vllm.capture.jsonl:5: worker \"tcp://127.0.0.1:5557|kv-events|dp0\": restart: seq 0 after 4",
        ]
    );
    // By hand from engines.py's script: seq 0 stores two blocks (epoch 1), seq 1 one
    // block on GPU (2; its CPU copy left out), seq 2 removes it (3), seq 3 is lost
    // (4 skipped), seq 4 stores (5), and seq 0 again is the restart's clear (6)
    // followed by the batch's own AllBlocksCleared (7). Ticks: ms after the first batch.
    assert_eq!(
        cache_ops(&trace),
        [
            "store@0#1",
            "store@10#2",
            "evict@20#3",
            "store@40#5",
            "clear@50#6",
            "clear@50#7"
        ]
    );
    assert_eq!(trace["policy"]["epochs"], "sequential");
    assert_eq!(
        trace["sharing"],
        serde_json::json!([{"model": "Qwen/Qwen3-8B", "adapter": "base", "tenants": ["acme", "default"]}])
    );
    // `hit` (tick 15) reuses the three stored blocks, 48 tokens; `gap` (tick 45) comes
    // after the lost message, so the worker's evidence is not trusted.
    assert_eq!(
        decisions(&trace),
        [
            ("hit".to_owned(), 48, vec![]),
            ("gap".to_owned(), 0, vec!["evidence_gap".to_owned()]),
        ]
    );
    let committed = std::fs::read(fixture("vllm.trace.json")).unwrap();
    assert_eq!(
        trace,
        serde_json::from_slice::<serde_json::Value>(&committed).unwrap()
    );
}

#[test]
fn the_sglang_capture_removes_a_block_by_the_signed_spelling_of_its_hash() {
    let (output, trace) = import(&fixture("sglang.capture.jsonl"), &fixture("requests.jsonl"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let trace = trace.unwrap();
    assert_eq!(cache_ops(&trace), ["store@0#1", "evict@5#2", "clear@6#3"]);
    let evict = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["op"] == "evict")
        .unwrap();
    let store = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["op"] == "store")
        .unwrap();
    // Published as 2^64 - 5, removed as -5: the same block, the store's first.
    assert_eq!(
        evict["keys"],
        serde_json::json!([store["segments"][0]["key"]])
    );
    // vLLM and SGLang stores of the same tokens have the same keys.
    let vllm = std::fs::read(fixture("vllm.trace.json")).unwrap();
    let vllm: serde_json::Value = serde_json::from_slice(&vllm).unwrap();
    let vllm_store = vllm["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["op"] == "store")
        .unwrap();
    assert_eq!(store["segments"], vllm_store["segments"]);
}

#[test]
fn the_vllm_0_26_0_record_of_kthena_1535_imports_as_one_block() {
    let (output, trace) = import(
        &fixture("kthena-1535.capture.jsonl"),
        &fixture("kthena-1535.requests.jsonl"),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let trace = trace.unwrap();
    // ts 1789095808.8378847 s is 1789095808837 ms; the request arrives at ...900.
    assert_eq!(cache_ops(&trace), ["store@0#1"]);
    // The request's 20 tokens start with the block's 16: one whole block reused.
    assert_eq!(decisions(&trace), [("capital".to_owned(), 16, vec![])]);
    let committed = std::fs::read(fixture("kthena-1535.trace.json")).unwrap();
    assert_eq!(
        trace,
        serde_json::from_slice::<serde_json::Value>(&committed).unwrap()
    );
}

/// Writes `lines` as a capture in a scratch directory and imports it.
fn import_lines(lines: &[&str]) -> (Output, tempfile::TempDir) {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("c.jsonl");
    std::fs::write(&capture, lines.join("\n")).unwrap();
    let out = scratch.path().join("t.json");
    let output = kvroute(&[
        "import",
        "vllm-events",
        capture.to_str().unwrap(),
        "--requests",
        &fixture("requests.jsonl"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!out.exists(), "a rejected import writes nothing");
    (output, scratch)
}

#[test]
fn an_unknown_shape_exits_2_with_its_path_and_writes_nothing() {
    // [1.0, [["BlockStored", ["x"]]]]: a hash that is a string.
    let (output, scratch) = import_lines(&[
        r#"{"endpoint":"e","topic":"t","seq":0,"payload_b64":"kss/8AAAAAAAAJGSq0Jsb2NrU3RvcmVkkaF4"}"#,
        // "hello": no batch at all.
        r#"{"endpoint":"e","topic":"t","seq":1,"payload_b64":"pWhlbGxv"}"#,
    ]);
    assert_eq!(output.status.code(), Some(2));
    let capture = scratch.path().join("c.jsonl");
    let capture = capture.display();
    assert_eq!(
        stderr(&output),
        format!(
            "{capture}:1: payload.events[0].block_hashes[0]: expected an integer or bytes, found a string\n\
             {capture}:2: payload: expected an array or a map, found a string\n"
        )
    );
}

#[test]
fn bad_capture_lines_exit_2_each_with_its_reason() {
    let (output, scratch) = import_lines(&[
        r#"{"endpoint":"e","seq":0,"payload_b64":"kA=="}"#,
        "",
        r#"{"endpoint":"e","topic":"t","seq":0,"payload_b64":"kA==","extra":1}"#,
    ]);
    assert_eq!(output.status.code(), Some(2));
    let capture = scratch.path().join("c.jsonl");
    let text = stderr(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[0],
        format!(
            "{}:1: expected exactly one of \"topic\" and \"topic_b64\"",
            capture.display()
        )
    );
    assert_eq!(lines[1], format!("{}:2: empty line", capture.display()));
    assert!(
        lines[2].contains(":3: invalid capture line: unknown field `extra`"),
        "{text}"
    );
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let output = kvroute(&[
        "import",
        "vllm-events",
        &fixture("vllm.capture.jsonl"),
        "--requests",
        &fixture("requests.jsonl"),
        "-o",
        &fixture("requests.jsonl"),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("is also an input of this command"),
        "{}",
        stderr(&output)
    );
    assert!(Path::new(&fixture("requests.jsonl")).exists());
}

#[test]
fn dynamos_router_events_import_keyed_by_tokens_hash() {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("trace.json");
    let output = kvroute(&[
        "import",
        "dynamo-events",
        &fixture("dynamo.events.jsonl"),
        "--requests",
        &fixture("requests.jsonl"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Vec<String> = stderr(&output).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(
        report,
        [
            "engine events: 3 BlockStored, 1 BlockRemoved, 1 AllBlocksCleared, 0 of unknown type in 5 messages",
            "publishers: 1 restarts, 1 sequence gaps, 0 joined mid-stream",
            "order: 0 earlier than its publisher's previous, 0 earlier than another publisher's before it",
            "left out: 1 not on GPU, 0 other cache group, 0 extra keys, 0 other block size, 0 no token ids, 0 token count, 0 unknown parent, 0 unknown removed hashes",
            "tests/engine_events/dynamo.events.jsonl:3: worker \"dynamo|7|dp0\": sequence gap: seq 3 after 1",
            "tests/engine_events/dynamo.events.jsonl:5: worker \"dynamo|7|dp0\": restart: seq 0 after 4",
        ]
    );
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    // By hand from engines.py: event 0 stores two blocks (epoch 1), 1 removes the
    // second (2), 2 is lost (3 skipped), 3 stores under the first (4), 4 is a host
    // copy (left out), and 0 again is the restart's clear (5) then Dynamo's own (6).
    assert_eq!(
        cache_ops(&trace),
        [
            "store@0#1",
            "evict@20#2",
            "store@30#4",
            "clear@50#5",
            "clear@50#6"
        ]
    );
    // Dynamo's token hash of the request's first two blocks meets the stores' keys:
    // `hit` (tick 15) reuses both blocks; `gap` (tick 45) sees the lost event.
    assert_eq!(
        decisions(&trace),
        [
            ("hit".to_owned(), 32, vec![]),
            ("gap".to_owned(), 0, vec!["evidence_gap".to_owned()]),
        ]
    );
    let committed = std::fs::read(fixture("dynamo.trace.json")).unwrap();
    assert_eq!(
        trace,
        serde_json::from_slice::<serde_json::Value>(&committed).unwrap()
    );
}

#[test]
fn a_capture_whose_gap_a_replay_filled_imports_without_a_gap() {
    // chain-replayed: six chained stores, 2 and 3 marked replayed as `record --replay`
    // writes them (engine_record.rs records the same messages live).
    let (output, trace) = import(
        &fixture("chain-replayed.capture.jsonl"),
        &fixture("chain.requests.jsonl"),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Vec<String> = stderr(&output).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(
        report,
        [
            "engine events: 6 BlockStored, 0 BlockRemoved, 0 AllBlocksCleared, 0 of unknown type in 6 messages",
            "publishers: 0 restarts, 0 sequence gaps, 0 joined mid-stream",
            "order: 0 earlier than its publisher's previous, 0 earlier than another publisher's before it",
            "left out: 0 not on GPU, 0 other cache group, 0 extra keys, 0 other block size, 0 no token ids, 0 token count, 0 unknown parent, 0 unknown removed hashes",
        ]
    );
    // Batches 10 ms apart; floor(ts * 1000) of T0 + 0.01 * seq as doubles.
    assert_eq!(
        cache_ops(&trace.unwrap()),
        [
            "store@0#1",
            "store@10#2",
            "store@20#3",
            "store@30#4",
            "store@40#5",
            "store@50#6"
        ]
    );
}

#[test]
fn batches_of_two_publishers_received_out_of_time_order_are_counted() {
    let (output, trace) = import(
        &fixture("two-publishers.capture.jsonl"),
        &fixture("chain.requests.jsonl"),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = stderr(&output);
    assert!(
        report.contains("\norder: 0 earlier than its publisher's previous, 2 earlier than another publisher's before it\n"),
        "{report}"
    );
    assert!(
        report.contains("\npublishers: 0 restarts, 0 sequence gaps, 0 joined mid-stream\n"),
        "{report}"
    );
    // B's two batches (received last, made first) lead in the trace's (tick, seq) order.
    let trace = trace.unwrap();
    let workers: Vec<&str> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "cache")
        .map(|e| e["worker"].as_str().unwrap())
        .collect();
    assert_eq!(
        workers,
        [
            "tcp://127.0.0.1:5567|kv-events|dp0",
            "tcp://127.0.0.1:5567|kv-events|dp0",
            "tcp://127.0.0.1:5557|kv-events|dp0",
            "tcp://127.0.0.1:5557|kv-events|dp0"
        ]
    );
    assert_eq!(
        cache_ops(&trace),
        ["store@0#1", "store@250#2", "store@500#1", "store@625#2"]
    );
}

#[test]
fn import_help_lists_sglang_events_and_its_usage_names_it() {
    let help = kvroute(&["import", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("sglang-events ")),
        "{text}"
    );
    let help = kvroute(&["import", "sglang-events", "--help"]);
    let text = String::from_utf8_lossy(&help.stdout).into_owned();
    assert!(
        text.contains("Usage: kvroute import sglang-events [OPTIONS]"),
        "{text}"
    );
}

#[test]
fn an_empty_tenant_or_model_is_an_error_of_the_option() {
    for option in ["--tenant", "--model"] {
        let scratch = tempfile::tempdir().unwrap();
        let out = scratch.path().join("t.json");
        let output = kvroute(&[
            "import",
            "vllm-events",
            &fixture("vllm.capture.jsonl"),
            "--requests",
            &fixture("requests.jsonl"),
            option,
            "",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(output.status.code(), Some(2));
        let text = stderr(&output);
        assert!(text.contains(&format!("'{option} <")), "{text}");
        assert!(!text.contains("does not validate"), "{text}");
        assert!(!out.exists());
    }
}

/// Imports the vLLM fixture with `requests` (lines written to a scratch file) and
/// `extra` options: the output, and whether OUT was written.
fn import_requests(capture: &str, requests: &[String], extra: &[&str]) -> (Output, bool) {
    let scratch = tempfile::tempdir().unwrap();
    let log = scratch.path().join("r.jsonl");
    std::fs::write(&log, requests.join("\n")).unwrap();
    let out = scratch.path().join("t.json");
    let mut args = vec![
        "import",
        "vllm-events",
        capture,
        "--requests",
        log.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = kvroute(&args);
    (output, out.exists())
}

/// The fixture's request log with `edit` applied to each line.
fn fixture_requests(edit: impl Fn(usize, &str) -> String) -> Vec<String> {
    std::fs::read_to_string(fixture("requests.jsonl"))
        .unwrap()
        .lines()
        .enumerate()
        .map(|(i, l)| edit(i, l))
        .collect()
}

#[test]
fn requests_of_another_model_are_named_and_none_left_is_nothing_to_route() {
    let capture = fixture("vllm.capture.jsonl");
    let one_other = fixture_requests(|i, l| match i {
        0 => l.replace("Qwen/Qwen3-8B", "other"),
        _ => l.to_owned(),
    });
    let (output, written) = import_requests(&capture, &one_other, &["--model", "Qwen/Qwen3-8B"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(written);
    assert!(stderr(&output).contains(
        "\nwarning: 1 of 2 requests name a model other than the workers' \"Qwen/Qwen3-8B\"; no worker serves them\n"
    ), "{}", stderr(&output));
    let (output, written) = import_requests(
        &capture,
        &fixture_requests(|_, l| l.to_owned()),
        &["--model", "X"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!written, "nothing to route writes nothing");
    assert!(
        stderr(&output).ends_with(
            "r.jsonl: nothing to route: none of the 2 requests names the workers' model \"X\"\n"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn requests_on_another_clock_are_named() {
    // Milliseconds from the benchmark's start, not since the Unix epoch.
    let from_start = fixture_requests(|i, l| {
        let at = ["1789095808015", "1789095808045"][i];
        l.replace(at, ["15", "45"][i])
    });
    let (output, _) = import_requests(&fixture("vllm.capture.jsonl"), &from_start, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(stderr(&output).contains(
        "\nwarning: 2 of 2 requests arrive before the capture's first message, the earliest 1789095807985 ms before it, so they reuse nothing it records; arrival_ms must be the engines' clock (ms since the Unix epoch)\n"
    ), "{}", stderr(&output));
}

#[test]
fn an_empty_capture_or_request_log_is_not_success() {
    let scratch = tempfile::tempdir().unwrap();
    let empty = scratch.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let requests = fixture_requests(|_, l| l.to_owned());
    let (output, written) = import_requests(empty.to_str().unwrap(), &requests, &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!written);
    assert_eq!(
        stderr(&output),
        format!(
            "kvroute import vllm-events: {}: nothing recorded: no message from any publisher, so the trace would have no worker\n",
            empty.display()
        )
    );
    let (output, written) = import_requests(
        &fixture("vllm.capture.jsonl"),
        &[],
        &["--model", "Qwen/Qwen3-8B"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(!written);
    assert!(
        stderr(&output).ends_with("r.jsonl: nothing to route: no request\n"),
        "{}",
        stderr(&output)
    );
    let (output, _) = import_requests(&fixture("vllm.capture.jsonl"), &[], &[]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "without --model too: {}",
        stderr(&output)
    );
}
