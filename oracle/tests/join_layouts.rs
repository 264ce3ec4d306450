//! SPEC §14's newer parts through `join_inputs`: Dynamo request-trace lines (§14.1.1),
//! `vllm bench serve` documents joined by position (§14.1.2), layout detection
//! (§14.1.4), cohorts with `--trace` (§14.2.1, §14.3) and their errors (§14.5).
//!
//! The receipt is the oracle's own `replay` of the trace of `tests/join.rs`, with the
//! requests spread over tenants and adapters (every worker loads `lora1`, so the
//! adapter changes no eligibility, and no request has a prefix, so the tenant changes
//! no reuse): the decisions are that file's table, checked again below.
//!
//! | seq | request | tenant | model | adapter | chosen | predicted_milli |
//! |---|---|---|---|---|---|---|
//! | 2 | r1 | ab | m | base | w0 | 100,000 |
//! | 3 | r2 | a | m | base | w0 | 150,000 |
//! | 4 | r3 | ab | m | lora1 | w1 | 150,000 |
//! | 5 | r4 | a | other | base | rejected | |
//! | 6 | r5 | a | m | base | w0 | 350,000 |
//! | 7 | r6 | ab | m | base | w1 | 160,000 |
//! | 8 | r7 | ab | m | lora1 | w2 | 160,000 |
//! | 9 | r8 | a | m | base | w1 | 190,000 |
//! | 10 | r9 | ab | m | base | w2 | 165,000 |

use kvroute_oracle::{
    join, join_inputs, keyed_request_id, parse_slo, replay, validate, JoinFailure, JoinInputs, Slo,
};
use serde_json::{json, Value};

const RUN: &str = "cache_plus_load";
const T: u64 = 1_700_000_000_000_000_000;
const KEY: &[u8] = b"join-test-key";

const REQUESTS: [(&str, &str, &str, &str, u64); 9] = [
    ("r1", "ab", "m", "base", 100),
    ("r2", "a", "m", "base", 50),
    ("r3", "ab", "m", "lora1", 50),
    ("r4", "a", "other", "base", 10),
    ("r5", "a", "m", "base", 200),
    ("r6", "ab", "m", "base", 10),
    ("r7", "ab", "m", "lora1", 10),
    ("r8", "a", "m", "base", 30),
    ("r9", "ab", "m", "base", 5),
];

fn worker(id: &str, queued_prefill: u64) -> String {
    format!(
        r#"{{"id":"{id}","model":"m","adapters":["lora1"],"prefill_rate":1000,"decode_rate":1000,
            "queued_prefill":{queued_prefill},"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
    )
}

/// The trace; `extra_seq` adds one more (unrouted-by-nobody) request `rx` at that seq,
/// to give a trace of another digest.
fn trace_with(extra: bool) -> String {
    let mut events = Vec::new();
    for (i, (id, tenant, model, adapter, prompt)) in REQUESTS.iter().enumerate() {
        events.push(format!(
            r#"{{"seq":{},"tick":0,"type":"request","id":"{id}","tenant":"{tenant}","model":"{model}",
                "adapter":"{adapter}","prefix":[],"prompt_tokens":{prompt},"decode_tokens":0}}"#,
            2 + i
        ));
    }
    if extra {
        events.push(
            r#"{"seq":30,"tick":0,"type":"request","id":"rx","tenant":"a","model":"other",
                "adapter":"base","prefix":[],"prompt_tokens":1,"decode_tokens":0}"#
                .to_owned(),
        );
    }
    format!(
        r#"{{"format":"kvroute-trace/1","workers":[{},{},{}],"events":[{}]}}"#,
        worker("w0", 0),
        worker("w1", 100),
        worker("w2", 150),
        events.join(",")
    )
}

fn trace() -> String {
    trace_with(false)
}

fn receipt() -> Vec<u8> {
    replay(trace().as_bytes()).expect("the test trace is valid")
}

/// Each decision's `request` keyed, as `replay --id-key` writes it (§6.5).
fn keyed_receipt() -> Vec<u8> {
    let mut text = String::from_utf8(receipt()).unwrap();
    for (id, ..) in REQUESTS {
        text = text.replace(
            &format!("\"request\":\"{id}\""),
            &format!("\"request\":\"{}\"", keyed_request_id(KEY, id)),
        );
    }
    text.into_bytes()
}

fn receipt_digest(receipt: &[u8]) -> String {
    let value: Value = serde_json::from_slice(receipt).unwrap();
    value["receipt_digest"].as_str().unwrap().to_owned()
}

fn inputs<'a>(receipt: &'a [u8], completions: &'a [u8], format: Option<&'a str>) -> JoinInputs<'a> {
    JoinInputs {
        receipt,
        completions,
        format,
        run: RUN,
        slo: None,
        id_key: None,
        trace: None,
    }
}

/// The objectives `--slo TEXT` declares, as the join is given them.
fn declared(text: &str) -> Option<Slo> {
    Some(parse_slo(text).expect("the test's --slo is valid"))
}

fn text(result: Result<Vec<u8>, JoinFailure>) -> String {
    String::from_utf8(result.expect("the join succeeds")).unwrap()
}

fn value(result: Result<Vec<u8>, JoinFailure>) -> Value {
    serde_json::from_str(&text(result)).unwrap()
}

#[test]
fn a_receipt_as_the_tests_assume() {
    let receipt: Value = serde_json::from_slice(&receipt()).unwrap();
    let run = &receipt["runs"][3];
    assert_eq!(run["policy"], RUN);
    let expected = [
        ("r1", Some(("w0", 0, 100))),
        ("r2", Some(("w0", 100_000, 50))),
        ("r3", Some(("w1", 100_000, 50))),
        ("r4", None),
        ("r5", Some(("w0", 150_000, 200))),
        ("r6", Some(("w1", 150_000, 10))),
        ("r7", Some(("w2", 150_000, 10))),
        ("r8", Some(("w1", 160_000, 30))),
        ("r9", Some(("w2", 160_000, 5))),
    ];
    let decisions = run["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), expected.len());
    for (d, (request, chosen)) in decisions.iter().zip(expected) {
        assert_eq!(d["request"], request);
        match chosen {
            None => assert!(d["chosen"].is_null(), "{request}"),
            Some((worker, work, recomputed)) => {
                assert_eq!(d["chosen"], worker, "{request}");
                let row = d["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|row| row["worker"] == worker)
                    .unwrap();
                assert_eq!(row["work_milli"], work, "{request}");
                assert_eq!(row["recomputed"], recomputed, "{request}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Dynamo (§14.1.1)
// ---------------------------------------------------------------------------------------

/// `T` in ms plus `offset` ms.
fn ms(offset: i64) -> String {
    ((T / 1_000_000) as i64 + offset).to_string()
}

/// Dynamo lines, wrapped (`event`) and bare, with lines to skip:
///
/// | line | key | what | ttft_us, tpot_us | start, end (ns) |
/// |---|---|---|---|---|
/// | 1 | r1 (x_request_id; request_id `dyn-1`) | wrapped | 355,886 (`355.886567999`), 10,000 | T, T + 0.4 s |
/// | 2 | | `tool_start`, skipped though its `request` is bad | | |
/// | 3 | r2 (request_id; x_request_id null) | bare | 100,000, 12,345 (`12.3456`) | T + 0.1 s, T + 0.3 s |
/// | 4 | | blank | | |
/// | 5 | r3 | | 80,000 (`80.0`), 30,000 | T + 0.05 s, T + 0.9 s |
/// | 6 | r4 | rejected, served | 1,000, 1,000 | 0, 1,000 |
/// | 7 | r5 | no ttft_ms: matched, not completed | | T + 0.2 s, none (total null) |
/// | 8 | r6 | avg_itl_ms null: matched, not completed | | T − 0.9 s, none |
/// | 9 | r8 | | 250,000 (`0.25e3`), 5,000 (`5E0`) | T + 0.3 s, T + 1 s |
/// | 10 | r9 | | 300,000 (`3e2`), 4,898 (`4.8984369999999995`) | T + 0.4 s, T + 1.5 s |
/// | 11 | r8 | a retry, counted only | | |
/// | 12 | zz | unknown id (request_id) | | |
/// | 13 | | `request_payload`, skipped | | |
fn dynamo_lines() -> String {
    let lines = [
        format!(
            r#"{{"timestamp":12,"event":{{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{{"request_id":"dyn-1","x_request_id":"r1","request_received_ms":{},"ttft_ms":355.886567999,"avg_itl_ms":10,"total_time_ms":400,"kv_hit_rate":0.5}}}}}}"#,
            ms(0)
        ),
        r#"{"timestamp":13,"event":{"event_type":"tool_start","request":5}}"#.to_owned(),
        format!(
            r#"{{"event_type":"request_end","request":{{"request_id":"r2","x_request_id":null,"request_received_ms":{},"ttft_ms":100,"avg_itl_ms":12.3456,"total_time_ms":200}}}}"#,
            ms(100)
        ),
        "  ".to_owned(),
        format!(
            r#"{{"event_type":"request_end","request":{{"x_request_id":"r3","request_id":"abc","request_received_ms":{},"ttft_ms":80.0,"avg_itl_ms":30,"total_time_ms":850,"worker":{{"id":1}}}}}}"#,
            ms(50)
        ),
        r#"{"event_type":"request_end","request":{"request_id":"r4","request_received_ms":0,"ttft_ms":1,"avg_itl_ms":1,"total_time_ms":0.001}}"#.to_owned(),
        format!(
            r#"{{"event_type":"request_end","request":{{"request_id":"d5","x_request_id":"r5","request_received_ms":{},"avg_itl_ms":1,"total_time_ms":null}}}}"#,
            ms(200)
        ),
        format!(
            r#"{{"event_type":"request_end","request":{{"request_id":"r6","request_received_ms":{},"ttft_ms":1,"avg_itl_ms":null}}}}"#,
            ms(-900)
        ),
        format!(
            r#"{{"event":{{"event_type":"request_end","request":{{"request_id":"d8","x_request_id":"r8","request_received_ms":{},"ttft_ms":0.25e3,"avg_itl_ms":5E0,"total_time_ms":700}}}}}}"#,
            ms(300)
        ),
        format!(
            r#"{{"event_type":"request_end","request":{{"request_id":"d9","x_request_id":"r9","request_received_ms":{},"ttft_ms":3e2,"avg_itl_ms":4.8984369999999995,"total_time_ms":1100}}}}"#,
            ms(400)
        ),
        format!(
            r#"{{"event_type":"request_end","request":{{"request_id":"d8b","x_request_id":"r8","request_received_ms":{},"ttft_ms":1,"avg_itl_ms":1,"total_time_ms":9000}}}}"#,
            ms(2000)
        ),
        r#"{"event_type":"request_end","request":{"request_id":"zz"}}"#.to_owned(),
        r#"{"event_type":"request_payload","payload":{}}"#.to_owned(),
    ];
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// One AIPerf line with the figures given (`None`: the metric left out).
fn aiperf(id: &str, start: u64, end: Option<u64>, ttft: Option<&str>, itl: Option<&str>) -> String {
    let end = end.map_or("null".to_owned(), |e| e.to_string());
    let mut metrics = Vec::new();
    if let Some(ttft) = ttft {
        metrics.push(format!(
            r#""time_to_first_token":{{"value":{ttft},"unit":"ms"}}"#
        ));
    }
    if let Some(itl) = itl {
        metrics.push(format!(
            r#""inter_token_latency":{{"value":{itl},"unit":"ms"}}"#
        ));
    }
    format!(
        r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":{start},"request_end_ns":{end}}},"metrics":{{{}}}}}"#,
        metrics.join(",")
    )
}

/// The AIPerf lines that say what [`dynamo_lines`] says (zz, with no start in Dynamo,
/// is unrouted either way; its figures enter nothing).
fn aiperf_equivalent() -> String {
    let s = 1_000_000; // ns per ms
    let lines = [
        aiperf(
            "r1",
            T,
            Some(T + 400 * s),
            Some("355.886567999"),
            Some("10"),
        ),
        aiperf(
            "r2",
            T + 100 * s,
            Some(T + 300 * s),
            Some("100"),
            Some("12.3456"),
        ),
        aiperf(
            "r3",
            T + 50 * s,
            Some(T + 900 * s),
            Some("80.0"),
            Some("30"),
        ),
        aiperf("r4", 0, Some(1000), Some("1"), Some("1")),
        aiperf("r5", T + 200 * s, None, None, Some("1")),
        aiperf("r6", T - 900 * s, None, Some("1"), None),
        aiperf(
            "r8",
            T + 300 * s,
            Some(T + 1000 * s),
            Some("0.25e3"),
            Some("5E0"),
        ),
        aiperf(
            "r9",
            T + 400 * s,
            Some(T + 1500 * s),
            Some("3e2"),
            Some("4.8984369999999995"),
        ),
        aiperf(
            "r8",
            T + 2000 * s,
            Some(T + 11000 * s),
            Some("1"),
            Some("1"),
        ),
        aiperf("zz", 0, None, None, None),
    ];
    lines.join("\n")
}

/// Counts: completion_lines 10 (the `request_end` lines), matched 7 (r1 r2 r3 r5 r6 r8
/// r9), dropped 1 (r7), rejected_served 1 (r4), unrouted 1 (zz), retried 1 (r8),
/// cancelled 0 and errors 0 (no status), completed 5 (r1 r2 r3 r8 r9). The completed
/// records are `tests/join.rs`'s, so are its prediction figures and workers; goodput
/// with `ttft_ms=250,tpot_ms=20`: good r2 and r8, good_pm floor(2000 / 8) = 250, span
/// T + 1.5 s (r9) − (T − 0.9 s) (r6) = 2.4 s, floor(2·10^12 / 2.4·10^9) = 833.
#[test]
fn dynamo_records_as_computed_by_hand() {
    let receipt = receipt();
    let lines = dynamo_lines();
    let mut given = inputs(&receipt, lines.as_bytes(), Some("dynamo"));
    given.slo = declared("ttft_ms=250,tpot_ms=20");
    let got = value(join_inputs(&given));
    assert_eq!(
        got["counts"],
        json!({"cancelled":0,"completed":5,"completion_lines":10,"decisions":9,"dropped":1,
               "error_rate_pm":0,"errors":0,"matched":7,"rejected":1,"rejected_served":1,
               "retried":1,"routed":8,"unrouted":1})
    );
    assert_eq!(
        got["prediction"],
        json!({"ttft_rank_gamma_pm":-112,"us_per_predicted_token":1438})
    );
    assert_eq!(
        got["goodput"],
        json!({"good":2,"good_per_second_milli":833,"good_pm":250,"span_ns":2400000000u64})
    );
    assert_eq!(
        got["workers"],
        json!([
            {"completed":2,"predicted_mean_milli":125000,"tpot_mean_us":11172,"ttft_mean_us":227943,"us_per_predicted_token":1823,"worker":"w0"},
            {"completed":2,"predicted_mean_milli":170000,"tpot_mean_us":17500,"ttft_mean_us":165000,"us_per_predicted_token":970,"worker":"w1"},
            {"completed":1,"predicted_mean_milli":165000,"tpot_mean_us":4898,"ttft_mean_us":300000,"us_per_predicted_token":1818,"worker":"w2"}
        ])
    );
    assert!(got.get("cohorts").is_none());
    // Byte for byte the document of the same records in AIPerf's layout.
    let equivalent = aiperf_equivalent();
    let mut as_aiperf = inputs(&receipt, equivalent.as_bytes(), Some("aiperf"));
    as_aiperf.slo = given.slo;
    assert_eq!(text(join_inputs(&given)), text(join_inputs(&as_aiperf)));
    // Detected: the same bytes.
    given.format = None;
    assert_eq!(text(join_inputs(&given)), text(join_inputs(&as_aiperf)));
}

/// A record without `request_received_ms` is left out of the span's min (and has no
/// end): r1 spans T to T + 1 s, r2 has none; span 10^9, not T + 1 s.
#[test]
fn dynamo_a_record_without_a_start_is_not_in_the_span() {
    let receipt = receipt();
    let lines = format!(
        "{}\n{}\n",
        format_args!(
            r#"{{"event_type":"request_end","request":{{"request_id":"r1","request_received_ms":{},"ttft_ms":1,"avg_itl_ms":1,"total_time_ms":1000}}}}"#,
            ms(0)
        ),
        r#"{"event_type":"request_end","request":{"request_id":"r2","ttft_ms":1,"avg_itl_ms":1,"total_time_ms":99999}}"#
    );
    let mut given = inputs(&receipt, lines.as_bytes(), Some("dynamo"));
    given.slo = Some(Slo::default());
    let got = value(join_inputs(&given));
    assert_eq!(
        got["goodput"],
        json!({"good":2,"good_per_second_milli":2000,"good_pm":250,"span_ns":1000000000})
    );
    assert_eq!(got["counts"]["completed"], 2);
}

/// `--id-key`: the join key (x_request_id, else request_id) is keyed before matching.
#[test]
fn dynamo_join_keys_are_keyed_under_the_key() {
    let keyed = keyed_receipt();
    let lines = dynamo_lines();
    let mut given = inputs(&keyed, lines.as_bytes(), Some("dynamo"));
    given.id_key = Some(KEY);
    let got = value(join_inputs(&given));
    assert_eq!(got["counts"]["matched"], 7);
    assert_eq!(got["receipt_digest"], receipt_digest(&keyed));
    given.id_key = None;
    assert_eq!(
        join_inputs(&given),
        Err(JoinFailure::NothingMatched {
            completion_id: "r1".to_owned(),
            request_id: keyed_request_id(KEY, "r1"),
        })
    );
}

fn dynamo_errors(lines: &str) -> Vec<(usize, String)> {
    let receipt = receipt();
    match join_inputs(&inputs(&receipt, lines.as_bytes(), Some("dynamo"))) {
        Err(JoinFailure::Lines(lines)) => lines,
        other => panic!("expected line errors, got {other:?}"),
    }
}

/// The reasons of one line, which must be line 1's only.
fn dynamo_reasons(line: &str) -> Vec<String> {
    let got = dynamo_errors(line);
    assert!(got.iter().all(|(n, _)| *n == 1), "{got:?}");
    got.into_iter().map(|(_, r)| r).collect()
}

#[test]
fn dynamo_each_reason() {
    let end = |request: &str| format!(r#"{{"event_type":"request_end","request":{request}}}"#);
    let cases: Vec<(String, &str)> = vec![
        ("[1]".to_owned(), "$: expected an object, found [1]"),
        (r#"{"event":{}}"#.to_owned(), r#"event: missing required member "event_type""#),
        (r#"{"timestamp":1}"#.to_owned(), r#"$: missing required member "event_type""#),
        (r#"{"event_type":null}"#.to_owned(), "event_type: expected a string, found null"),
        (r#"{"event":{"event_type":"request_end"}}"#.to_owned(), r#"event: missing required member "request""#),
        (end("[]"), "request: expected an object, found []"),
        (end("{}"), r#"request: missing required member "request_id""#),
        (end(r#"{"request_id":""}"#), r#"request.request_id: expected a non-empty string, found """#),
        (end(r#"{"request_id":"a","x_request_id":5}"#), "request.x_request_id: expected a non-empty string or null, found 5"),
        (end(r#"{"request_id":"a","x_request_id":""}"#), r#"request.x_request_id: expected a non-empty string or null, found """#),
        (end(r#"{"request_id":"a","request_received_ms":1e3}"#), "request.request_received_ms: expected a non-negative integer below 10000000000000 or null, found 1e3"),
        (end(r#"{"request_id":"a","request_received_ms":10000000000000}"#), "request.request_received_ms: expected a non-negative integer below 10000000000000 or null, found 10000000000000"),
        (end(r#"{"request_id":"a","request_received_ms":-1}"#), "request.request_received_ms: expected a non-negative integer below 10000000000000 or null, found -1"),
        (end(r#"{"request_id":"a","ttft_ms":-1}"#), "request.ttft_ms: expected a non-negative number or null, found -1"),
        (end(r#"{"request_id":"a","avg_itl_ms":"5"}"#), r#"request.avg_itl_ms: expected a non-negative number or null, found "5""#),
        (end(r#"{"request_id":"a","total_time_ms":9007199254740.992}"#), "request.total_time_ms: expected a number of milliseconds below 9007199254740.992, found 9007199254740.992"),
        (
            r#"{"event":{"event_type":"request_end","request":{"request_id":true}}}"#.to_owned(),
            "event.request.request_id: expected a non-empty string, found true",
        ),
    ];
    for (line, reason) in cases {
        assert_eq!(dynamo_reasons(&line), [reason], "{line}");
    }
    // The largest good values are no error.
    let receipt = receipt();
    let good = end(
        r#"{"request_id":"r1","request_received_ms":9999999999999,"ttft_ms":9007199254740.991,"avg_itl_ms":-0,"total_time_ms":9007199254740.991}"#,
    );
    let got = value(join_inputs(&inputs(
        &receipt,
        good.as_bytes(),
        Some("dynamo"),
    )));
    assert_eq!(got["counts"]["completed"], 1);
}

/// §14.5 as amended (d229d9f): `event`, then `event_type`, each its own problem then its
/// repeats; a bad one ends the line; another `event_type` string ends it too, skipped
/// unless a repeat was reported.
#[test]
fn dynamo_event_and_event_type_first() {
    assert_eq!(
        dynamo_reasons(r#"{"event":5,"event":{"event_type":"request_end"},"event_type":7}"#),
        [
            "event: expected an object, found 5",
            r#"event: repeated member "event""#
        ]
    );
    assert_eq!(
        dynamo_reasons(r#"{"event_type":7,"event_type":"request_end","request":1}"#),
        [
            "event_type: expected a string, found 7",
            r#"event_type: repeated member "event_type""#
        ]
    );
    assert_eq!(
        dynamo_reasons(r#"{"event_type":"tool_start","event_type":"request_end","request":1}"#),
        [r#"event_type: repeated member "event_type""#]
    );
    assert_eq!(
        dynamo_reasons(r#"{"event":{"event_type":"tool_end"},"event":1}"#),
        [r#"event: repeated member "event""#]
    );
    // Skipped, never in error, however bad the rest: no record at all here.
    let receipt = receipt();
    let skipped = "{\"event_type\":\"tool_start\",\"request\":5}\n{\"event\":{\"event_type\":\"tool_error\",\"request\":[]}}\n\n";
    assert_eq!(
        join_inputs(&inputs(&receipt, skipped.as_bytes(), Some("dynamo"))),
        Err(JoinFailure::NoRecords)
    );
}

/// Every reason of one wrapped line, in the order of §14.1.1's table (§14.1.3).
#[test]
fn dynamo_every_reason_in_table_order() {
    let line = r#"{"event":{"event_type":"request_end","request":{"total_time_ms":1e400,"avg_itl_ms":-2,"ttft_ms":"a","request_received_ms":-0,"x_request_id":"","request_id":1,"ttft_ms":3},"event_type":"x","request":9},"event":0}"#;
    assert_eq!(
        dynamo_reasons(line),
        [
            r#"event: repeated member "event""#,
            r#"event.event_type: repeated member "event_type""#,
            r#"event.request: repeated member "request""#,
            "event.request.request_id: expected a non-empty string, found 1",
            r#"event.request.x_request_id: expected a non-empty string or null, found """#,
            "event.request.request_received_ms: expected a non-negative integer below 10000000000000 or null, found -0",
            r#"event.request.ttft_ms: expected a non-negative number or null, found "a""#,
            r#"event.request.ttft_ms: repeated member "ttft_ms""#,
            "event.request.avg_itl_ms: expected a non-negative number or null, found -2",
            "event.request.total_time_ms: expected a number of milliseconds below 9007199254740.992, found 1e400",
        ]
    );
}

/// The line loop is AIPerf's: line numbers, invalid JSON with its column, blank lines.
#[test]
fn dynamo_lines_are_numbered_and_checked_all() {
    let got = dynamo_errors("\n{\"event_type\":\n \t\n[]\n{\"event_type\":\"request_end\",\"request\":{\"request_id\":\"r1\"}}\n{\"event\":null}\n");
    assert_eq!(
        got,
        [
            (
                2,
                "invalid JSON: EOF while parsing a value at column 14".to_owned()
            ),
            (4, "$: expected an object, found []".to_owned()),
            (6, "event: expected an object, found null".to_owned()),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// vllm bench serve (§14.1.2)
// ---------------------------------------------------------------------------------------

/// A `vllm bench serve --save-detailed` document (one line, members it ignores too).
fn bench(duration: &str, entries: &[(&str, &str, &str, &str)]) -> String {
    let column = |k: usize| -> String {
        entries
            .iter()
            .map(|e| [e.0, e.1, e.2, e.3][k])
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        r#"{{"date":"20250101-000000","duration":{duration},"completed":3,"input_lens":[],"ttfts":[{}],"itls":[{}],"output_lens":[{}],"errors":[{}],"generated_texts":[],"mean_ttft_ms":1.5}}"#,
        column(0),
        column(1),
        column(2),
        column(3)
    )
}

/// Seven entries, fewer than the run's nine decisions: entry i is decision i's.
///
/// | i | decision | ttft (s) | itls (s) | output_len | error | ttft_us | tpot_us |
/// |---|---|---|---|---|---|---|---|
/// | 0 | r1 (w0, 100,000) | `0.255886567999` | 0.01, 0.02, 0.03 | 4 | | 255,886 | 60,000,000 / 3000 = 20,000 |
/// | 1 | r2 (w0, 150,000) | `0.1` | 0.03 (one chunk of 3 tokens) | 4 | | 100,000 | 30,000,000 / 3000 = 10,000 |
/// | 2 | r3 | 0 | | 0 | `"boom"` | error | |
/// | 3 | r4 (rejected) | `0.001` | | 1 | | rejected_served | |
/// | 4 | r5 (w0, 350,000) | `5e-2` | 0.004, 0.004 | 1 | | 50,000 | 0 (below two tokens) |
/// | 5 | r6 (w1, 160,000) | `0.3` | `0.0049999999` (4,999,999 ns) | 2 | | 300,000 | 4,999 |
/// | 6 | r7 (w2, 160,000) | `4.8984369999999995e-3` (4,898,436 ns) | | 0 | | 4,898 | 0 |
///
/// r8, r9: no entry, dropped. Counts: completion_lines 7, matched 6, dropped 2,
/// rejected_served 1, errors 1, completed 5, error_rate_pm floor(1000 / 6) = 166.
/// Pairs over (predicted, ttft) of r1 r2 r5 r6 r7: concordant r1–r6, r2–r6, r5–r7;
/// r6–r7 tied in prediction; the other six discordant: floor(1000 × (3 − 6) / 9) = −334.
/// Σ ttft 710,784 / Σ predicted 920,000: 772. Workers: w0 (r1 r2 r5) ttft 405,886 / 3 =
/// 135,295, tpot 30,000 / 3 = 10,000, predicted 200,000, floor(405,886,000 / 600,000) =
/// 676; w1 (r6) 300,000, 4,999, 160,000, 1875; w2 (r7) 4,898, 0, 160,000, 30.
/// Goodput `ttft_ms=200,tpot_ms=15`: good r2 r5 r7 = 3, good_pm floor(3000 / 8) = 375,
/// span = duration 12.5 s, floor(3·10^12 / 1.25·10^10) = 240.
fn seven_entries() -> String {
    bench(
        "12.5",
        &[
            ("0.255886567999", "[0.01,0.02,0.03]", "4", r#""""#),
            ("0.1", "[0.03]", "4", r#""""#),
            ("0", "[]", "0", r#""boom""#),
            ("0.001", "[]", "1", r#""""#),
            ("5e-2", "[0.004,0.004]", "1", r#""""#),
            ("0.3", "[0.0049999999]", "2", r#""""#),
            ("4.8984369999999995e-3", "[]", "0", r#""""#),
        ],
    )
}

#[test]
fn vllm_bench_by_position_with_fewer_entries_than_decisions() {
    let receipt = receipt();
    let doc = seven_entries();
    let mut given = inputs(&receipt, doc.as_bytes(), Some("vllm-bench"));
    given.slo = declared("ttft_ms=200,tpot_ms=15");
    let expected = json!({
        "counts": {"cancelled":0,"completed":5,"completion_lines":7,"decisions":9,"dropped":2,
                   "error_rate_pm":166,"errors":1,"matched":6,"rejected":1,"rejected_served":1,
                   "retried":0,"routed":8,"unrouted":0},
        "format": "kvroute-join/2",
        "goodput": {"good":3,"good_per_second_milli":240,"good_pm":375,"span_ns":12500000000u64},
        "prediction": {"ttft_rank_gamma_pm":-334,"us_per_predicted_token":772},
        "receipt_digest": receipt_digest(&receipt),
        "run": RUN,
        "slo": {"tpot_us":15000,"ttft_us":200000},
        "workers": [
            {"completed":3,"predicted_mean_milli":200000,"tpot_mean_us":10000,"ttft_mean_us":135295,"us_per_predicted_token":676,"worker":"w0"},
            {"completed":1,"predicted_mean_milli":160000,"tpot_mean_us":4999,"ttft_mean_us":300000,"us_per_predicted_token":1875,"worker":"w1"},
            {"completed":1,"predicted_mean_milli":160000,"tpot_mean_us":0,"ttft_mean_us":4898,"us_per_predicted_token":30,"worker":"w2"}
        ]
    });
    // Byte for byte: serde_json writes this tree's members sorted and compact, as JCS.
    assert_eq!(text(join_inputs(&given)), expected.to_string());
    // Detected from its one line: the same.
    given.format = None;
    assert_eq!(text(join_inputs(&given)), expected.to_string());
}

/// Eleven entries for nine decisions: entries 9 and 10 are unrouted, one each (never
/// retried); every decision has its entry (r4's rejected_served).
#[test]
fn vllm_bench_entries_past_the_last_decision_are_unrouted() {
    let receipt = receipt();
    let entries = vec![("0.001", "[0.001]", "2", r#""""#); 11];
    let doc = bench("2", &entries);
    let got = value(join_inputs(&inputs(
        &receipt,
        doc.as_bytes(),
        Some("vllm-bench"),
    )));
    assert_eq!(
        got["counts"],
        json!({"cancelled":0,"completed":8,"completion_lines":11,"decisions":9,"dropped":0,
               "error_rate_pm":0,"errors":0,"matched":8,"rejected":1,"rejected_served":1,
               "retried":0,"routed":8,"unrouted":2})
    );
    // ttft 1,000 µs; tpot 1,000,000 ns / (1000 × 1) = 1,000 µs.
    assert_eq!(got["workers"][0]["ttft_mean_us"], 1000);
    assert_eq!(got["workers"][0]["tpot_mean_us"], 1000);
}

/// A run whose only decision is rejected: its entry is rejected_served, nothing
/// matched, so the span is 0 (not the duration), and no "matches nothing" error.
#[test]
fn vllm_bench_span_is_zero_when_nothing_matched() {
    let receipt = br#"{"format":"kvroute-receipt/1","receipt_digest":"d","runs":[{"policy":"cache_plus_load","decisions":[{"request":"q","tick":0,"chosen":null,"route_kind":"rejected","candidates":[]}]}]}"#;
    let doc = bench("3", &[("0.001", "[]", "1", r#""""#)]);
    let mut given = inputs(receipt, doc.as_bytes(), Some("vllm-bench"));
    given.slo = declared("ttft_ms=1");
    let got = value(join_inputs(&given));
    assert_eq!(got["counts"]["rejected_served"], 1);
    assert_eq!(got["counts"]["matched"], 0);
    assert_eq!(
        got["goodput"],
        json!({"good":0,"good_per_second_milli":0,"good_pm":0,"span_ns":0})
    );
}

/// The TPOT saturates at B (d229d9f), before it enters a mean: entry 0 (r1, w0) has
/// 1100 inter-token latencies of 9,007,199 s over two tokens, 9,907,918,900 s in all, a
/// TPOT of 9.9·10^15 µs, above B: B; entry 1 (r2, w0) has 0. w0's mean is floor(B / 2)
/// = 4,503,599,627,370,495 (unsaturated it would be 4,953,959,450,000,000).
#[test]
fn vllm_bench_tpot_saturates_at_b() {
    let receipt = receipt();
    let itls = format!("[{}]", vec!["9007199"; 1100].join(","));
    let doc = bench(
        "1",
        &[("0", &itls, "2", r#""""#), ("0", "[]", "0", r#""""#)],
    );
    let got = value(join_inputs(&inputs(
        &receipt,
        doc.as_bytes(),
        Some("vllm-bench"),
    )));
    assert_eq!(got["workers"][0]["worker"], "w0");
    assert_eq!(got["workers"][0]["completed"], 2);
    assert_eq!(got["workers"][0]["tpot_mean_us"], 4_503_599_627_370_495u64);
}

/// `--id-key` changes nothing: entries take the decisions' (here keyed) ids.
#[test]
fn vllm_bench_the_key_changes_nothing() {
    let keyed = keyed_receipt();
    let doc = seven_entries();
    let mut given = inputs(&keyed, doc.as_bytes(), Some("vllm-bench"));
    let without = text(join_inputs(&given));
    given.id_key = Some(KEY);
    assert_eq!(text(join_inputs(&given)), without);
    let got: Value = serde_json::from_str(&without).unwrap();
    assert_eq!(got["counts"]["matched"], 6);
}

fn vllm_errors(doc: &str) -> Vec<String> {
    let receipt = receipt();
    match join_inputs(&inputs(&receipt, doc.as_bytes(), Some("vllm-bench"))) {
        Err(JoinFailure::Document(problems)) => problems,
        other => panic!("expected document errors, got {other:?}"),
    }
}

#[test]
fn vllm_bench_members_missing_repeated_of_the_wrong_type() {
    assert_eq!(vllm_errors("[]"), ["$: expected an object, found []"]);
    assert_eq!(
        vllm_errors(r#"{"completed":1}"#),
        [
            r#"$: missing required member "duration""#,
            r#"$: missing required member "ttfts""#,
            r#"$: missing required member "itls""#,
            r#"$: missing required member "output_lens""#,
            r#"$: missing required member "errors""#,
        ]
    );
    assert_eq!(
        vllm_errors(
            r#"{"errors":"e","output_lens":null,"itls":1,"ttfts":{},"duration":"x","duration":-1}"#
        ),
        [
            r#"duration: expected a non-negative number of seconds, found "x""#,
            r#"duration: repeated member "duration""#,
            "ttfts: expected an array, found {}",
            "itls: expected an array, found 1",
            "output_lens: expected an array, found null",
            r#"errors: expected an array, found "e""#,
        ]
    );
    assert_eq!(
        vllm_errors(
            r#"{"duration":9007199.254740992,"ttfts":[],"itls":[],"output_lens":[],"errors":[],"ttfts":5}"#
        ),
        [
            "duration: expected a number of seconds below 9007199.254740992, found 9007199.254740992",
            r#"ttfts: repeated member "ttfts""#,
        ]
    );
}

#[test]
fn vllm_bench_lengths_then_entries_array_by_array() {
    assert_eq!(
        vllm_errors(
            r#"{"duration":-0,"ttfts":[0.1,0.2],"itls":[[]],"output_lens":[1,1,1],"errors":["",""]}"#
        ),
        [
            "itls: expected 2 entries, as ttfts has, found 1",
            "output_lens: expected 2 entries, as ttfts has, found 3",
        ]
    );
    assert_eq!(
        vllm_errors(
            r#"{"errors":[null,"",3],"output_lens":[1.5,-1,9007199254740992],"itls":[5,[0.1,-0.1,"s"],[]],"ttfts":[-1,"a",9007199.254740992],"duration":0}"#
        ),
        [
            "ttfts[0]: expected a non-negative number of seconds, found -1",
            r#"ttfts[1]: expected a non-negative number of seconds, found "a""#,
            "ttfts[2]: expected a number of seconds below 9007199.254740992, found 9007199.254740992",
            "itls[0]: expected an array, found 5",
            "itls[1][1]: expected a non-negative number of seconds, found -0.1",
            r#"itls[1][2]: expected a non-negative number of seconds, found "s""#,
            "output_lens[0]: expected a non-negative integer, found 1.5",
            "output_lens[1]: expected a non-negative integer, found -1",
            "output_lens[2]: expected a non-negative integer, found 9007199254740992",
            "errors[0]: expected a string, found null",
            "errors[2]: expected a string, found 3",
        ]
    );
    // The largest good values: no error.
    let receipt = receipt();
    let doc = bench(
        "9007199.254740991",
        &[("9007199.254740991", "[0]", "9007199254740991", r#""""#)],
    );
    let got = value(join_inputs(&inputs(
        &receipt,
        doc.as_bytes(),
        Some("vllm-bench"),
    )));
    assert_eq!(got["workers"][0]["ttft_mean_us"], 9_007_199_254_740u64);
}

#[test]
fn vllm_bench_the_first_100_problems_then_a_count() {
    let n = 130;
    let doc = format!(
        r#"{{"duration":1,"ttfts":[{}],"itls":[{}],"output_lens":[{}],"errors":[{}]}}"#,
        vec!["true"; n].join(","),
        vec!["[]"; n].join(","),
        vec!["0"; n].join(","),
        vec![r#""""#; n].join(",")
    );
    let got = vllm_errors(&doc);
    assert_eq!(got.len(), 101);
    assert_eq!(
        got[0],
        "ttfts[0]: expected a non-negative number of seconds, found true"
    );
    assert_eq!(
        got[99],
        "ttfts[99]: expected a non-negative number of seconds, found true"
    );
    assert_eq!(got[100], "... and 30 more errors");
}

#[test]
fn vllm_bench_not_json_too_long_and_empty() {
    assert_eq!(
        vllm_errors("{\"duration\":1}\n{\"duration\":2}\n"),
        ["invalid JSON: trailing characters at line 2 column 1"]
    );
    assert_eq!(
        vllm_errors("{\n  \"duration\": 1,\n  \"ttfts\": [1,]\n}"),
        ["invalid JSON: trailing comma at line 3 column 15"]
    );
    let mut long = b"{\"duration\":1}".to_vec();
    long.resize(67_108_865, b' ');
    let receipt = receipt();
    assert_eq!(
        join_inputs(&inputs(&receipt, &long, Some("vllm-bench"))),
        Err(JoinFailure::Document(vec![
            "document longer than 67108864 bytes".to_owned()
        ]))
    );
    long.truncate(67_108_864);
    let got = vllm_errors(std::str::from_utf8(&long).unwrap());
    assert_eq!(got[0], r#"$: missing required member "ttfts""#);
    // No entry at all, or nothing but whitespace: no completion records.
    for doc in [
        r#"{"duration":1,"ttfts":[],"itls":[],"output_lens":[],"errors":[]}"#,
        "",
        " \n\t\r\n",
    ] {
        assert_eq!(
            join_inputs(&inputs(&receipt, doc.as_bytes(), Some("vllm-bench"))),
            Err(JoinFailure::NoRecords),
            "{doc:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Detection (§14.1.4)
// ---------------------------------------------------------------------------------------

fn detected(completions: &[u8]) -> Result<Vec<u8>, JoinFailure> {
    let receipt = receipt();
    join_inputs(&inputs(&receipt, completions, None))
}

#[test]
fn each_layout_is_told_from_its_first_line() {
    let receipt = receipt();
    // AIPerf after blank lines.
    let records = format!(
        " \n\r\n{}\n{}\n",
        aiperf("r1", T, Some(T + 1), Some("1"), Some("1")),
        aiperf("r2", T, None, Some("2"), Some("2"))
    );
    let named = join_inputs(&inputs(&receipt, records.as_bytes(), Some("aiperf")));
    assert_eq!(
        value(detected(records.as_bytes()))["counts"]["completed"],
        2
    );
    assert_eq!(detected(records.as_bytes()), named);
    // Dynamo: a bare record or a wrapped one; then every line is read as Dynamo.
    let bare =
        r#"{"event_type":"request_end","request":{"request_id":"r1","ttft_ms":1,"avg_itl_ms":1}}"#;
    let wrapped = r#"{"timestamp":1,"event":{"event_type":"request_end","request":{"request_id":"r2","ttft_ms":1,"avg_itl_ms":1}}}"#;
    for text in [
        format!("{bare}\n{wrapped}\n"),
        format!("{wrapped}\n{bare}\n"),
    ] {
        let named = join_inputs(&inputs(&receipt, text.as_bytes(), Some("dynamo")));
        assert_eq!(value(detected(text.as_bytes()))["counts"]["completed"], 2);
        assert_eq!(detected(text.as_bytes()), named);
    }
    let mixed = format!("{bare}\n{}\n", aiperf("r2", T, None, Some("1"), Some("1")));
    assert_eq!(
        detected(mixed.as_bytes()),
        Err(JoinFailure::Lines(vec![(
            2,
            r#"$: missing required member "event_type""#.to_owned()
        )]))
    );
    // `event_type` alone is Dynamo: a skipped line, so no record.
    assert_eq!(
        detected(br#"{"event_type":"tool_start"}"#),
        Err(JoinFailure::NoRecords)
    );
    // vllm-bench: the whole document on its first line, whitespace around it.
    let doc = format!("\n{}\n\n", seven_entries());
    let named = join_inputs(&inputs(&receipt, doc.as_bytes(), Some("vllm-bench")));
    assert_eq!(
        value(detected(doc.as_bytes()))["counts"]["completion_lines"],
        7
    );
    assert_eq!(detected(doc.as_bytes()), named);
}

#[test]
fn a_first_line_that_cannot_tell() {
    let cases: [(&[u8], usize); 9] = [
        (b"not json\n", 1),
        (b"\n \t\n[1]\n", 3),
        (b"\"metadata\"", 1),
        (br#"{"x_request_id":"r1"}"#, 1),
        (br#"{"metadata":{},"ttfts":[]}"#, 1),
        (br#"{"event":{},"metadata":{}}"#, 1),
        (br#"{"event_type":"request_end","ttfts":[]}"#, 1),
        // A pretty-printed vLLM document: its first line is `{`.
        (b"{\n  \"ttfts\": [],\n  \"duration\": 1\n}\n", 1),
        (b"\n{\"metadata\":{}", 2),
    ];
    for (text, line) in cases {
        assert_eq!(
            detected(text),
            Err(JoinFailure::Undetectable(line)),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
    // A first line over the cap, even of spaces (the cap comes before the blank rule).
    let mut long = vec![b' '; 67_108_865];
    long.extend_from_slice(b"\n{\"metadata\":{}}\n");
    assert_eq!(detected(&long), Err(JoinFailure::Undetectable(1)));
    // Nothing but blank lines: no completion records.
    for text in [&b""[..], b"\n", b" \r\n\t\n"] {
        assert_eq!(detected(text), Err(JoinFailure::NoRecords));
    }
}

/// The one line error of a first line that is not JSON text (§14.1.4).
fn not_json_text(line: usize, reason: &str) -> Result<Vec<u8>, JoinFailure> {
    Err(JoinFailure::Lines(vec![(line, reason.to_owned())]))
}

const BOM: &str = "invalid JSON: the line starts with a UTF-8 byte order mark (EF BB BF), \
                   which JSON text must not carry";

/// §14.1.4: a first line with a byte order mark is reported as §14.5, 1 reports it for
/// any layout, whatever follows the mark, not as a line that cannot tell.
#[test]
fn a_first_line_with_a_byte_order_mark_is_named() {
    let cases: [(&[u8], usize); 4] = [
        (b"\xef\xbb\xbf{\"metadata\":{}}", 1),
        (b"\xef\xbb\xbf{\"ttfts\":[]}\n", 1),
        (b"\n \r\n\xef\xbb\xbfnot json\n{\"metadata\":{}}\n", 3),
        // The mark comes first even when bytes that are not UTF-8 follow it.
        (b"\xef\xbb\xbf\xff\n", 1),
    ];
    for (text, line) in cases {
        assert_eq!(
            detected(text),
            not_json_text(line, BOM),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
}

/// §14.1.4: a first line that is not UTF-8, with `C` the 1-based byte offset of the
/// first byte that does not continue valid UTF-8.
#[test]
fn a_first_line_that_is_not_utf8_is_named_with_its_column() {
    let cases: [(&[u8], usize, usize); 5] = [
        // `{"metadata": "` is 14 bytes of valid UTF-8; byte 15 (C3) starts a sequence
        // that 28 does not continue, so the first byte past valid UTF-8 is column 15.
        (b"{\"metadata\": \"\xc3\x28\"}", 1, 15),
        (b"\xff", 1, 1),
        // A lone continuation byte after a two-byte character (bytes 1 and 2).
        (b"\xc3\xa9\x80{}", 1, 3),
        // A sequence cut short by the end of the line: its lead byte, column 3.
        (b"\n{}\xe2\x82\n", 2, 3),
        // An encoded surrogate (ED A0 80) is not UTF-8: its lead byte, column 2.
        (b" \xed\xa0\x80", 1, 2),
    ];
    for (text, line, column) in cases {
        let reason = format!("invalid JSON: the line is not UTF-8 at column {column}");
        assert_eq!(
            detected(text),
            not_json_text(line, &reason),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
}

/// §14.1.4: JSON text of no layout, or of two, is still the line that cannot tell.
#[test]
fn valid_json_of_no_layout_still_cannot_tell() {
    for text in [
        &br#"{"x_request_id":"r1"}"#[..],
        b"\n[\"metadata\"]\n",
        b"{\"metadata\":{},\"event\":{}}",
        b"{\"note\":\"\xc3\xa9\"}",
    ] {
        let line = if text.starts_with(b"\n") { 2 } else { 1 };
        assert_eq!(
            detected(text),
            Err(JoinFailure::Undetectable(line)),
            "{}",
            String::from_utf8_lossy(text)
        );
    }
}

/// "The only error reported, before either input is judged": a bad receipt, a bad run,
/// a bad trace do not come first; with the layout named, the layout's own errors.
#[test]
fn detection_comes_before_everything() {
    let given = JoinInputs {
        receipt: b"not a receipt",
        completions: b"[1]\n",
        format: None,
        run: "no_such_run",
        slo: None,
        id_key: None,
        trace: Some(b"{}"),
    };
    assert_eq!(join_inputs(&given), Err(JoinFailure::Undetectable(1)));
    // A first line that is not JSON text is the only error too (§14.1.4).
    for (completions, reason) in [
        (&b"\xef\xbb\xbf{}\n[1]\n"[..], BOM),
        (
            b"\xff\n[1]\n",
            "invalid JSON: the line is not UTF-8 at column 1",
        ),
    ] {
        let bad = JoinInputs {
            completions,
            ..given
        };
        assert_eq!(join_inputs(&bad), not_json_text(1, reason));
    }
    let named = JoinInputs {
        format: Some("aiperf"),
        ..given
    };
    assert_eq!(
        join_inputs(&named),
        Err(JoinFailure::Lines(vec![(
            1,
            "$: expected an object, found [1]".to_owned()
        )]))
    );
}

// ---------------------------------------------------------------------------------------
// Cohorts (§14.2.1, §14.3)
// ---------------------------------------------------------------------------------------

/// AIPerf records for the cohorts:
///
/// | id | what | ttft_us, tpot_us | start, end |
/// |---|---|---|---|
/// | r1 | completed | 100,000, 10,000 | T, T + 1 s |
/// | r2 | completed | 200,000, 20,000 | T + 0.1 s, T + 0.5 s |
/// | r3 | error | | T + 0.05 s, T + 0.08 s |
/// | r4 | rejected, served | | 0, 1,000 |
/// | r5 | completed | 50,000, 5,000 | T + 0.2 s, T + 2 s |
/// | r5 | retry | | T + 3 s, T + 9 s |
/// | r6 | cancelled | | T + 0.5 s, null |
/// | r8 | completed | 300,000, 30,000 | T + 0.3 s, T + 0.6 s |
/// | r9 | completed | 150,000, 15,000 | T + 0.4 s, T + 0.9 s |
/// | zz | unrouted | | 0, T + 99 s |
///
/// r7 has none (dropped).
fn cohort_records() -> String {
    let s = 1_000_000u64;
    let lines = [
        aiperf("r1", T, Some(T + 1000 * s), Some("100"), Some("10")),
        aiperf(
            "r2",
            T + 100 * s,
            Some(T + 500 * s),
            Some("200"),
            Some("20"),
        ),
        format!(
            r#"{{"metadata":{{"x_request_id":"r3","request_start_ns":{},"request_end_ns":{}}},"metrics":null,"error":{{"code":500}}}}"#,
            T + 50 * s,
            T + 80 * s
        ),
        aiperf("r4", 0, Some(1000), Some("1"), Some("1")),
        aiperf("r5", T + 200 * s, Some(T + 2000 * s), Some("50"), Some("5")),
        aiperf("r5", T + 3000 * s, Some(T + 9000 * s), Some("1"), Some("1")),
        format!(
            r#"{{"metadata":{{"x_request_id":"r6","request_start_ns":{},"was_cancelled":true}},"metrics":{{"time_to_first_token":{{"value":1,"unit":"ms"}},"inter_token_latency":{{"value":1,"unit":"ms"}}}}}}"#,
            T + 500 * s
        ),
        aiperf(
            "r8",
            T + 300 * s,
            Some(T + 600 * s),
            Some("300"),
            Some("30"),
        ),
        aiperf(
            "r9",
            T + 400 * s,
            Some(T + 900 * s),
            Some("150"),
            Some("15"),
        ),
        aiperf("zz", 0, Some(T + 99_000 * s), Some("1"), Some("1")),
    ];
    lines.join("\n")
}

/// `--slo ttft_ms=250,tpot_ms=25`. Cohorts in byte order of the triple, tenant first:
/// (a, m, base) before (ab, m, base) — compared as the concatenated names, "abmbase"
/// would come before "ambase". (a, other, base) holds only r4, rejected: no cohort.
///
/// - (a, m, base): r2, r5, r8, all routed; lines r2, r5, r5, r8 (4; r5 retried);
///   completed 3. Pairs of (predicted, ttft) (150,000, 200,000), (350,000, 50,000),
///   (190,000, 300,000): r2–r8 concordant, r2–r5 and r5–r8 discordant: floor(−1000 / 3)
///   = −334; 550,000 / 690,000: 797. w0 (r2, r5): 125,000, 12,500, 250,000, 500; w1
///   (r8): 300,000, 30,000, 190,000, 1578. Good r2 r5 (r8 misses TTFT): 2, good_pm
///   floor(2000 / 3) = 666, span T + 2 s (r5's record, not its retry) − (T + 0.1 s) =
///   1.9 s, floor(2·10^12 / 1.9·10^9) = 1052.
/// - (ab, m, base): r1, r6, r9; 3 lines; r6 cancelled; completed r1, r9: concordant,
///   1000; 250,000 / 265,000: 943. w0 (r1): 100,000, 10,000, 100,000, 1000; w2 (r9):
///   150,000, 15,000, 165,000, 909. Good 2, good_pm 666, span T + 1 s − T (r6's null end
///   left out), 2000.
/// - (ab, m, lora1): r3 (error), r7 (dropped): 1 line, matched 1, errors 1,
///   error_rate_pm 1000; no completed: prediction null, no workers; span 30 ms, 0 good.
fn expected_cohorts() -> Value {
    let counts = |c: [u64; 13]| {
        json!({"cancelled":c[0],"completed":c[1],"completion_lines":c[2],"decisions":c[3],
               "dropped":c[4],"error_rate_pm":c[5],"errors":c[6],"matched":c[7],
               "rejected":c[8],"rejected_served":c[9],"retried":c[10],"routed":c[11],
               "unrouted":c[12]})
    };
    let worker = |w: &str, c: u64, p: u64, tpot: u64, ttft: u64, upt: u64| {
        json!({"completed":c,"predicted_mean_milli":p,"tpot_mean_us":tpot,"ttft_mean_us":ttft,
               "us_per_predicted_token":upt,"worker":w})
    };
    json!([
        {
            "adapter": "base", "model": "m", "tenant": "a",
            "counts": counts([0, 3, 4, 3, 0, 0, 0, 3, 0, 0, 1, 3, 0]),
            "prediction": {"ttft_rank_gamma_pm": -334, "us_per_predicted_token": 797},
            "goodput": {"good":2,"good_per_second_milli":1052,"good_pm":666,"span_ns":1900000000u64},
            "workers": [worker("w0", 2, 250000, 12500, 125000, 500), worker("w1", 1, 190000, 30000, 300000, 1578)]
        },
        {
            "adapter": "base", "model": "m", "tenant": "ab",
            "counts": counts([1, 2, 3, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0]),
            "prediction": {"ttft_rank_gamma_pm": 1000, "us_per_predicted_token": 943},
            "goodput": {"good":2,"good_per_second_milli":2000,"good_pm":666,"span_ns":1000000000u64},
            "workers": [worker("w0", 1, 100000, 10000, 100000, 1000), worker("w2", 1, 165000, 15000, 150000, 909)]
        },
        {
            "adapter": "lora1", "model": "m", "tenant": "ab",
            "counts": counts([0, 0, 1, 2, 1, 1000, 1, 1, 0, 0, 0, 2, 0]),
            "prediction": {"ttft_rank_gamma_pm": null, "us_per_predicted_token": null},
            "goodput": {"good":0,"good_per_second_milli":0,"good_pm":0,"span_ns":30000000},
            "workers": []
        }
    ])
}

#[test]
fn cohorts_as_computed_by_hand() {
    let receipt = receipt();
    let trace = trace();
    let records = cohort_records();
    let mut given = inputs(&receipt, records.as_bytes(), Some("aiperf"));
    given.slo = declared("ttft_ms=250,tpot_ms=25");
    let without = text(join_inputs(&given));
    // Without `--trace`: no `cohorts` member, and exactly `join`'s bytes.
    assert!(!without.contains("cohorts"));
    assert_eq!(
        without,
        text(join(&receipt, records.as_bytes(), RUN, given.slo, None))
    );
    given.trace = Some(trace.as_bytes());
    let with = text(join_inputs(&given));
    let mut got: Value = serde_json::from_str(&with).unwrap();
    // Canonical bytes: serde_json writes the sorted tree the same way.
    assert_eq!(with, got.to_string());
    assert_eq!(got["cohorts"], expected_cohorts());
    // Everything else is the document without the trace.
    got.as_object_mut().unwrap().remove("cohorts");
    assert_eq!(got.to_string(), without);
}

/// A keyed receipt with the same key: the trace's ids are keyed after its digest is
/// checked, so the cohorts are the same.
#[test]
fn cohorts_of_a_keyed_receipt_under_the_key() {
    let keyed = keyed_receipt();
    let trace = trace();
    let records = cohort_records();
    let mut given = inputs(&keyed, records.as_bytes(), Some("aiperf"));
    given.slo = declared("ttft_ms=250,tpot_ms=25");
    given.id_key = Some(KEY);
    given.trace = Some(trace.as_bytes());
    assert_eq!(value(join_inputs(&given))["cohorts"], expected_cohorts());
}

/// vllm-bench cohorts: two entries (r1, r2), so (ab, m, lora1) matched nothing: its
/// span is 0, the others' the duration (7 s).
#[test]
fn cohorts_of_a_vllm_bench_document() {
    let receipt = receipt();
    let trace = trace();
    let doc = bench(
        "7",
        &[("0.1", "[]", "1", r#""""#), ("0.2", "[]", "1", r#""""#)],
    );
    let mut given = inputs(&receipt, doc.as_bytes(), Some("vllm-bench"));
    given.slo = Some(Slo::default());
    given.trace = Some(trace.as_bytes());
    let got = value(join_inputs(&given));
    let cohorts = got["cohorts"].as_array().unwrap();
    let spans: Vec<(&str, &str, u64, u64, u64)> = cohorts
        .iter()
        .map(|c| {
            (
                c["tenant"].as_str().unwrap(),
                c["adapter"].as_str().unwrap(),
                c["counts"]["completion_lines"].as_u64().unwrap(),
                c["counts"]["matched"].as_u64().unwrap(),
                c["goodput"]["span_ns"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        spans,
        [
            ("a", "base", 1, 1, 7_000_000_000),
            ("ab", "base", 1, 1, 7_000_000_000),
            ("ab", "lora1", 0, 0, 0)
        ]
    );
    // good_pm over the cohort's own routed: (a, m, base) 1 good of 3 routed.
    assert_eq!(cohorts[0]["goodput"]["good_pm"], 333);
    assert_eq!(got["goodput"]["span_ns"], 7_000_000_000u64);
}

/// The JSON Lines receipt of §6.4, hand-assembled from the canonical one: the trace's
/// digest is read from its first line.
fn jsonl_receipt() -> Vec<u8> {
    let full: Value = serde_json::from_slice(&receipt()).unwrap();
    let mut out = format!(
        "{{\"format\":\"kvroute-receipt-stream/1\",\"receipt_format\":\"kvroute-receipt/1\",\"trace_digest\":\"{}\"}}\n",
        full["trace_digest"].as_str().unwrap()
    );
    for run in full["runs"].as_array().unwrap() {
        for member in ["cache_log", "decisions", "observation_log"] {
            for item in run[member].as_array().unwrap() {
                out.push_str(&json!({ member: item, "policy": run["policy"] }).to_string());
                out.push('\n');
            }
        }
        out.push_str(&json!({"metrics": run["metrics"], "policy": run["policy"]}).to_string());
        out.push('\n');
    }
    out.push_str(&json!({"receipt_digest": full["receipt_digest"]}).to_string());
    out.push('\n');
    out.into_bytes()
}

#[test]
fn cohorts_with_a_json_lines_receipt() {
    let receipt = jsonl_receipt();
    let trace = trace();
    let records = cohort_records();
    let mut given = inputs(&receipt, records.as_bytes(), Some("aiperf"));
    given.slo = declared("ttft_ms=250,tpot_ms=25");
    given.trace = Some(trace.as_bytes());
    assert_eq!(value(join_inputs(&given))["cohorts"], expected_cohorts());
}

#[test]
fn trace_errors() {
    let receipt = receipt();
    let records = cohort_records();
    let receipt_value: Value = serde_json::from_slice(&receipt).unwrap();
    let receipt_trace_digest = receipt_value["trace_digest"].as_str().unwrap().to_owned();
    let with_trace = |trace: &'static [u8]| {
        let mut given = inputs(&receipt, records.as_bytes(), Some("aiperf"));
        given.trace = Some(trace);
        join_inputs(&given)
    };
    // Its own errors, as `validate` gives them.
    let bad: &'static [u8] = br#"{"format":"kvroute-trace/2","workers":[],"events":[]}"#;
    assert_eq!(
        with_trace(bad),
        Err(JoinFailure::TraceInvalid(validate(bad).unwrap_err()))
    );
    assert_eq!(
        with_trace(b"{"),
        Err(JoinFailure::TraceInvalid(vec![
            "$: invalid JSON: EOF while parsing an object at line 1 column 1".to_owned()
        ]))
    );
    // Another trace: its digest is the sha256 of its canonical bytes.
    let other: &'static [u8] = Box::leak(trace_with(true).into_boxed_str()).as_bytes();
    let other_digest = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(validate(other).unwrap());
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    };
    assert_ne!(other_digest, receipt_trace_digest);
    assert_eq!(
        with_trace(other),
        Err(JoinFailure::TraceDigest {
            trace: other_digest,
            receipt: receipt_trace_digest,
        })
    );
}

/// Error 6: the receipt's ids and the trace's do not meet — a plain receipt with a key
/// (the trace's ids keyed), or a keyed receipt without one; the run's first decision's
/// request. It comes before error 7 (nothing matched), which also applies to both.
#[test]
fn a_decision_not_in_the_trace() {
    let trace = trace();
    let records = cohort_records();
    let plain = receipt();
    let mut given = inputs(&plain, records.as_bytes(), Some("aiperf"));
    given.trace = Some(trace.as_bytes());
    given.id_key = Some(KEY);
    assert_eq!(
        join_inputs(&given),
        Err(JoinFailure::NotInTrace("r1".to_owned()))
    );
    given.trace = None;
    assert!(matches!(
        join_inputs(&given),
        Err(JoinFailure::NothingMatched { .. })
    ));
    let keyed = keyed_receipt();
    let mut given = inputs(&keyed, records.as_bytes(), Some("aiperf"));
    given.trace = Some(trace.as_bytes());
    assert_eq!(
        join_inputs(&given),
        Err(JoinFailure::NotInTrace(keyed_request_id(KEY, "r1")))
    );
}

/// Errors 1–4 come before the trace's; a receipt without a `trace_digest` cannot be
/// checked against a trace: not a receipt (this oracle's reading).
#[test]
fn trace_errors_come_after_the_completions_receipt_and_run() {
    let receipt = receipt();
    let records = cohort_records();
    let bad_trace: &[u8] = b"{}";
    let mut given = inputs(&receipt, b"[1]\n", Some("aiperf"));
    given.trace = Some(bad_trace);
    assert!(matches!(join_inputs(&given), Err(JoinFailure::Lines(_))));
    given.completions = b"\n";
    assert_eq!(join_inputs(&given), Err(JoinFailure::NoRecords));
    given.completions = records.as_bytes();
    given.receipt = b"{}";
    assert_eq!(join_inputs(&given), Err(JoinFailure::NotAReceipt));
    given.receipt = &receipt;
    given.run = "nope";
    assert!(matches!(
        join_inputs(&given),
        Err(JoinFailure::NoSuchRun(_))
    ));
    given.run = RUN;
    assert!(matches!(
        join_inputs(&given),
        Err(JoinFailure::TraceInvalid(_))
    ));
    let no_digest = br#"{"format":"kvroute-receipt/1","receipt_digest":"d","runs":[{"policy":"cache_plus_load","decisions":[{"request":"r1","tick":0,"chosen":null,"route_kind":"rejected","candidates":[]}]}]}"#;
    let trace = trace();
    given.receipt = no_digest;
    given.trace = Some(trace.as_bytes());
    assert_eq!(join_inputs(&given), Err(JoinFailure::NotAReceipt));
    given.trace = None;
    assert!(join_inputs(&given).is_ok());
}
