//! Each validation rule of SPEC.md §2 produces its stated path and reason.

use kvroute_core::parse_trace;
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "format": "kvroute-trace/1",
        "workers": [
            { "id": "w0", "model": "m1", "adapters": ["lora-a"], "prefill_rate": 100,
              "decode_rate": 10, "queued_prefill": 0, "active_decode": 0,
              "observed_tick": 0, "epoch": 0,
              "cache": [ { "tenant": "acme", "model": "m1", "adapter": "base", "key": "k0", "tokens": 5 } ] }
        ],
        "events": [
            { "seq": 1, "tick": 2, "type": "load", "worker": "w0", "observed_tick": 1,
              "queued_prefill": 3, "active_decode": 4 },
            { "seq": 2, "tick": 3, "type": "request", "id": "r1", "tenant": "acme", "model": "m1",
              "adapter": "base", "prefix": [ { "key": "k0", "tokens": 5 } ],
              "prompt_tokens": 10, "decode_tokens": 2 },
            { "seq": 3, "tick": 4, "type": "cache", "op": "clear", "worker": "w0", "epoch": 1 }
        ]
    })
}

fn errors_of(trace: &Value) -> Vec<String> {
    match parse_trace(trace.to_string().as_bytes()) {
        Ok(_) => vec![],
        Err(e) => e.errors,
    }
}

fn assert_single(edit: impl FnOnce(&mut Value), expected: &str) {
    let mut trace = base();
    edit(&mut trace);
    assert_eq!(errors_of(&trace), vec![expected.to_owned()]);
}

#[test]
fn the_base_trace_is_valid() {
    assert_eq!(errors_of(&base()), Vec::<String>::new());
}

#[test]
fn value_rules() {
    assert_single(
        |t| t["events"][0]["queued_prefill"] = json!(-3),
        "events[0].queued_prefill: expected a non-negative integer, found -3",
    );
    assert_single(
        |t| t["events"][0]["queued_prefill"] = json!(1e3),
        "events[0].queued_prefill: expected a non-negative integer, found 1000.0",
    );
    assert_single(
        |t| t["events"][2]["epoch"] = json!("5"),
        "events[2].epoch: expected a non-negative integer, found \"5\"",
    );
    assert_single(
        |t| t["events"][2]["epoch"] = json!(true),
        "events[2].epoch: expected a non-negative integer, found true",
    );
    assert_single(
        |t| t["events"][2]["epoch"] = json!(9007199254740992u64),
        "events[2].epoch: expected a non-negative integer, found 9007199254740992",
    );
    assert_single(
        |t| t["workers"][0]["prefill_rate"] = json!(0),
        "workers[0].prefill_rate: expected a positive integer, found 0",
    );
    assert_single(
        |t| t["workers"][0]["id"] = json!(""),
        "workers[0].id: expected a non-empty string, found \"\"",
    );
    assert_single(
        |t| t["policy"] = json!({ "freshness_ticks": 1.5 }),
        "policy.freshness_ticks: expected a non-negative integer or null, found 1.5",
    );
    assert_single(
        |t| t["policy"] = json!({ "decode_weight_milli": null }),
        "policy.decode_weight_milli: expected a non-negative integer, found null",
    );
    assert_single(
        |t| t["format"] = json!("kvroute-trace/2"),
        "format: expected \"kvroute-trace/1\", found \"kvroute-trace/2\"",
    );
    assert_single(
        |t| t["limits"] = json!("huge"),
        "limits: expected \"lab\" or \"scale\", found \"huge\"",
    );
    assert_single(
        |t| t["events"][0]["type"] = json!("loud"),
        "events[0].type: expected \"cache\", \"load\" or \"request\", found \"loud\"",
    );
    assert_single(
        |t| t["events"][2]["op"] = json!("flush"),
        "events[2].op: expected \"store\", \"evict\" or \"clear\", found \"flush\"",
    );
    assert_single(|t| t["events"][1]["tenant"] = json!((0..30).collect::<Vec<u32>>()),
        "events[1].tenant: expected a non-empty string, found [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1...");
}

#[test]
fn shape_rules() {
    assert_single(
        |t| {
            t["events"][1].as_object_mut().unwrap().remove("tenant");
        },
        "events[1].tenant: missing required member \"tenant\"",
    );
    assert_single(
        |t| t["events"][1]["colour"] = json!("red"),
        "events[1].colour: unknown member \"colour\"",
    );
    assert_single(
        |t| t["events"][1]["a.b"] = json!(1),
        "events[1][\"a.b\"]: unknown member \"a.b\"",
    );
    assert_single(
        |t| t["events"][2]["tenant"] = json!("acme"),
        "events[2].tenant: unknown member \"tenant\"",
    );
    assert_single(
        |t| t["workers"] = json!({}),
        "workers: expected an array, found {}",
    );
    assert_single(
        |t| t["events"][0] = json!(5),
        "events[0]: expected an object, found 5",
    );
    let repeated = base()
        .to_string()
        .replacen("\"seq\":1,", "\"seq\":1,\"seq\":1,", 1);
    let errors = parse_trace(repeated.as_bytes()).unwrap_err().errors;
    assert_eq!(
        errors,
        vec!["events[0].seq: repeated member \"seq\"".to_owned()]
    );
}

#[test]
fn cross_reference_rules() {
    assert_single(
        |t| {
            let w = t["workers"][0].clone();
            t["workers"].as_array_mut().unwrap().push(w);
        },
        "workers[1].id: duplicate worker id \"w0\"",
    );
    assert_single(
        |t| {
            let e = t["workers"][0]["cache"][0].clone();
            t["workers"][0]["cache"].as_array_mut().unwrap().push(e);
        },
        "workers[0].cache[1]: duplicate cache entry for key \"k0\"",
    );
    assert_single(
        |t| t["events"][2]["seq"] = json!(1),
        "events[2].seq: duplicate seq 1",
    );
    assert_single(
        |t| {
            let mut e = t["events"][1].clone();
            e["seq"] = json!(9);
            t["events"].as_array_mut().unwrap().push(e);
        },
        "events[3].id: duplicate request id \"r1\"",
    );
    assert_single(
        |t| t["events"][0]["worker"] = json!("w7"),
        "events[0].worker: unknown worker \"w7\"",
    );
    assert_single(
        |t| t["events"][0]["observed_tick"] = json!(3),
        "events[0].observed_tick: observed_tick 3 is after the event tick 2",
    );
    assert_single(
        |t| t["events"][1]["prompt_tokens"] = json!(4),
        "events[1].prefix: prefix tokens 5 exceed prompt_tokens 4",
    );
    assert_single(
        |t| t["events"][1]["decode_tokens"] = json!(8183),
        "events[1]: 8193 tokens (prompt_tokens + decode_tokens) exceed the lab limit of 8192",
    );
}

#[test]
fn limits_are_inclusive_and_scale_is_larger() {
    let mut trace = base();
    trace["events"][1]["decode_tokens"] = json!(8182);
    assert!(
        errors_of(&trace).is_empty(),
        "8192 tokens is within the lab limit"
    );
    let worker = trace["workers"][0].clone();
    for i in 1..9 {
        let mut w = worker.clone();
        w["id"] = json!(format!("w{i}"));
        trace["workers"].as_array_mut().unwrap().push(w);
    }
    assert_eq!(
        errors_of(&trace),
        vec!["workers: 9 workers exceed the lab limit of 8".to_owned()]
    );
    trace["limits"] = json!("scale");
    assert!(errors_of(&trace).is_empty());
}

#[test]
fn overflow_is_rejected_at_the_root() {
    assert_single(
        |t| t["events"][0]["active_decode"] = json!(9007199254740991u64),
        "$: figures could overflow: the cost bound exceeds 9007199254740991",
    );
}

#[test]
fn all_shape_errors_are_reported_together() {
    let mut trace = base();
    trace["events"][0]["queued_prefill"] = json!(-1);
    trace["events"][1]["model"] = json!("");
    trace["workers"][0]["decode_rate"] = json!(0);
    assert_eq!(
        errors_of(&trace),
        vec![
            "workers[0].decode_rate: expected a positive integer, found 0".to_owned(),
            "events[0].queued_prefill: expected a non-negative integer, found -1".to_owned(),
            "events[1].model: expected a non-empty string, found \"\"".to_owned(),
        ]
    );
}

#[test]
fn more_than_a_hundred_errors_are_summarised() {
    let mut trace = base();
    let event = trace["events"][0].clone();
    for _ in 0..120 {
        let mut e = event.clone();
        e["tick"] = json!(-1);
        trace["events"].as_array_mut().unwrap().push(e);
    }
    let lines = parse_trace(trace.to_string().as_bytes())
        .unwrap_err()
        .lines();
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[100], "... and 20 more errors");
}

#[test]
fn only_the_printed_error_lines_are_kept() {
    // 1,000 shape errors: the first 100 are kept as lines, the other 900 counted.
    let mut trace = base();
    trace["workers"] = json!(vec![1; 1000]);
    let errors = parse_trace(trace.to_string().as_bytes()).unwrap_err();
    assert_eq!(errors.errors.len(), 100);
    assert_eq!(errors.more, 900);
    assert_eq!(errors.count(), 1000);
    assert_eq!(
        errors.errors[99],
        "workers[99]: expected an object, found 1"
    );
    let lines = errors.lines();
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[100], "... and 900 more errors");
}
