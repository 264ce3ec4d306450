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

// ---- work limits (SPEC.md §1.3, §2.3 stages 3 and 4) ----

fn grant(tenants: usize) -> Value {
    let tenants: Vec<String> = (0..tenants).map(|t| format!("t{t}")).collect();
    json!({ "model": "m1", "adapter": "base", "tenants": tenants })
}

#[test]
fn tenants_per_grant_are_limited() {
    let mut trace = base();
    trace["sharing"] = json!([grant(8), grant(9)]);
    assert_eq!(
        errors_of(&trace),
        vec!["sharing[1].tenants: 9 tenants exceed the lab limit of 8 per grant".to_owned()]
    );
    trace["limits"] = json!("scale");
    assert!(errors_of(&trace).is_empty());
}

#[test]
fn sharing_grants_are_limited() {
    let mut trace = base();
    trace["sharing"] = json!(vec![grant(1); 8]);
    assert!(
        errors_of(&trace).is_empty(),
        "8 grants is within the lab limit"
    );
    trace["sharing"] = json!(vec![grant(1); 9]);
    assert_eq!(
        errors_of(&trace),
        vec!["sharing: 9 sharing grants exceed the lab limit of 8".to_owned()]
    );
}

#[test]
fn adapters_per_worker_are_limited() {
    let adapters: Vec<String> = (0..9).map(|a| format!("a{a}")).collect();
    assert_single(
        |t| t["workers"][0]["adapters"] = json!(adapters),
        "workers[0].adapters: 9 adapters exceed the lab limit of 8 per worker",
    );
}

fn entries(n: usize) -> Vec<Value> {
    (0..n)
        .map(|e| json!({ "tenant": "acme", "model": "m1", "adapter": "base", "key": format!("c{e}"), "tokens": 0 }))
        .collect()
}

#[test]
fn the_cache_array_is_limited_counting_empty_entries() {
    let mut trace = base();
    trace["workers"][0]["cache"] = json!(entries(256));
    assert!(
        errors_of(&trace).is_empty(),
        "256 entries is within the lab limit"
    );
    assert_single(
        |t| t["workers"][0]["cache"] = json!(entries(257)),
        "workers[0].cache: 257 cache entries exceed the lab limit of 256 per worker",
    );
}

fn segments(n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| json!({ "key": "k0", "tokens": 0 }))
        .collect()
}

#[test]
fn keys_per_event_are_limited_for_prefixes_stores_and_evicts() {
    let mut trace = base();
    trace["events"][1]["prefix"] = json!(segments(32));
    assert!(
        errors_of(&trace).is_empty(),
        "32 keys is within the lab limit"
    );
    assert_single(
        |t| t["events"][1]["prefix"] = json!(segments(33)),
        "events[1].prefix: 33 keys exceed the lab limit of 32 per event",
    );
    assert_single(
        |t| {
            t["events"][2] = json!({ "seq": 3, "tick": 4, "type": "cache", "op": "store",
                "worker": "w0", "epoch": 1, "tenant": "acme", "model": "m1", "adapter": "base",
                "segments": segments(33) })
        },
        "events[2].segments: 33 keys exceed the lab limit of 32 per event",
    );
    assert_single(
        |t| {
            t["events"][2] = json!({ "seq": 3, "tick": 4, "type": "cache", "op": "evict",
                "worker": "w0", "epoch": 1, "tenant": "acme", "model": "m1", "adapter": "base",
                "keys": vec!["k"; 33] })
        },
        "events[2].keys: 33 keys exceed the lab limit of 32 per event",
    );
}

/// SPEC.md §1.3's example: nine stores of 32 distinct keys on one worker.
fn nine_stores() -> Value {
    let mut trace = base();
    trace["workers"][0]["cache"] = json!([]);
    let stores: Vec<Value> = (0..9u64)
        .map(|s| {
            let segments: Vec<Value> = (0..32)
                .map(|k| json!({ "key": format!("s{s}k{k}"), "tokens": 1 }))
                .collect();
            json!({ "seq": 10 + s, "tick": 1 + s, "type": "cache", "op": "store",
                    "worker": "w0", "epoch": 1 + s, "tenant": "acme", "model": "m1",
                    "adapter": "base", "segments": segments })
        })
        .collect();
    trace["events"] = json!(stores);
    trace
}

#[test]
fn resident_entries_are_limited_during_the_replay() {
    assert_eq!(
        errors_of(&nine_stores()),
        vec![
            "events[8]: worker \"w0\" would hold 288 cache entries, over the lab limit of 256"
                .to_owned()
        ]
    );
    // An evict of 32 of those keys before the ninth store keeps w0 at 256.
    let mut trace = nine_stores();
    let keys: Vec<String> = (0..32).map(|k| format!("s0k{k}")).collect();
    trace["events"].as_array_mut().unwrap().push(json!({
        "seq": 99, "tick": 8, "type": "cache", "op": "evict", "worker": "w0", "epoch": 100,
        "tenant": "acme", "model": "m1", "adapter": "base", "keys": keys }));
    // Epochs must still rise in (tick, seq) order: the evict at tick 8 comes after the
    // eighth store (epoch 8) and before the ninth (tick 9), which needs a later epoch.
    trace["events"][8]["epoch"] = json!(101);
    assert!(errors_of(&trace).is_empty(), "{:?}", errors_of(&trace));
    // A stale store (epoch not above the last) changes nothing and is not counted.
    let mut trace = nine_stores();
    trace["events"][8]["epoch"] = json!(8);
    assert!(errors_of(&trace).is_empty());
}

#[test]
fn residency_is_checked_in_tick_seq_order_not_array_order() {
    // The same stores listed backwards: the store processed last is events[0].
    let mut trace = nine_stores();
    trace["events"].as_array_mut().unwrap().reverse();
    assert_eq!(
        errors_of(&trace),
        vec![
            "events[0]: worker \"w0\" would hold 288 cache entries, over the lab limit of 256"
                .to_owned()
        ]
    );
}

#[test]
fn residency_waits_for_a_clean_stage_three() {
    let mut trace = nine_stores();
    trace["events"][0]["seq"] = json!(11);
    assert_eq!(
        errors_of(&trace),
        vec!["events[1].seq: duplicate seq 11".to_owned()]
    );
}

// ---- long paths are cut (SPEC.md §2.1) ----

#[test]
fn long_paths_are_cut_with_a_marker() {
    // SPEC.md §2.1's example: a plain identifier, then a bracketed name.
    let name = "a".repeat(200);
    let mut trace = base();
    trace["events"][0][&name] = json!(1);
    let expected = format!(
        "events[0].{}[...]{}: unknown member \"{}...",
        "a".repeat(70),
        "a".repeat(35),
        "a".repeat(39)
    );
    assert_eq!(errors_of(&trace), vec![expected]);
    let name = "-".repeat(200);
    let mut trace = base();
    trace["events"][0][&name] = json!(1);
    let expected = format!(
        "events[0][\"{}[...]{}\"]: unknown member \"{}...",
        "-".repeat(69),
        "-".repeat(33),
        "-".repeat(39)
    );
    assert_eq!(errors_of(&trace), vec![expected]);
}

#[test]
fn paths_are_cut_on_characters_not_bytes() {
    let name = "é".repeat(5_000);
    let mut trace = base();
    trace[&name] = json!(1);
    let lines = errors_of(&trace);
    assert_eq!(lines.len(), 1);
    let (path, _) = lines[0].split_once(": unknown member").unwrap();
    assert_eq!(path.chars().count(), 120);
    assert_eq!(
        path,
        format!("$[\"{}[...]{}\"]", "é".repeat(77), "é".repeat(33))
    );
    assert!(lines[0].len() < 400, "{} bytes", lines[0].len());
}

#[test]
fn a_path_of_120_characters_is_kept_whole() {
    // `events[0]["` + 107 + `"]` = 120 characters; one more is cut.
    let name = "-".repeat(108);
    let mut trace = base();
    trace["events"][0][&name] = json!(1);
    assert!(errors_of(&trace)[0].contains("[...]"));
    let name = "-".repeat(107);
    let mut trace = base();
    trace["events"][0][&name] = json!(1);
    let lines = errors_of(&trace);
    assert!(
        lines[0].starts_with(&format!("events[0][\"{name}\"]: ")),
        "{lines:?}"
    );
}

// ---- numbers quoted as written, BOM (SPEC.md §1.1, §2.2) ----

/// The base trace as text with `"queued_prefill": 3` (events[0]) replaced by `literal`.
fn with_literal(literal: &str) -> Vec<String> {
    let text = base().to_string();
    let text = text.replacen(
        "\"queued_prefill\":3",
        &format!("\"queued_prefill\":{literal}"),
        1,
    );
    assert!(text.contains(literal));
    match parse_trace(text.as_bytes()) {
        Ok(_) => vec![],
        Err(e) => e.errors,
    }
}

#[test]
fn number_literals_are_quoted_as_written() {
    for literal in [
        "1e3",
        "-0",
        "18446744073709551616",
        "1e400",
        "1E+2",
        "5.0",
        "-1",
        "9007199254740992",
    ] {
        assert_eq!(
            with_literal(literal),
            vec![format!(
                "events[0].queued_prefill: expected a non-negative integer, found {literal}"
            )],
            "{literal}"
        );
    }
    assert_eq!(with_literal("17"), Vec::<String>::new());
}

#[test]
fn a_five_thousand_digit_integer_is_reported_at_its_path() {
    let literal = "7".repeat(5_000);
    assert_eq!(
        with_literal(&literal),
        vec![format!(
            "events[0].queued_prefill: expected a non-negative integer, found {}...",
            "7".repeat(40)
        )]
    );
}

#[test]
fn numbers_inside_quoted_values_are_as_written() {
    assert_single(
        |t| t["events"][1]["model"] = json!([1.5, {"b": 2, "a": "x\ny"}]),
        "events[1].model: expected a non-empty string, found [1.5,{\"a\":\"x\\ny\",\"b\":2}]",
    );
}

#[test]
fn a_byte_order_mark_is_named() {
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend_from_slice(base().to_string().as_bytes());
    assert_eq!(
        parse_trace(&bytes).unwrap_err().errors,
        vec!["$: invalid JSON: the document starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry".to_owned()]
    );
}

#[test]
fn malformed_numbers_are_still_syntax_errors() {
    for (text, message) in [
        ("[01]", "$: invalid JSON: invalid number at line 1 column 3"),
        (
            "[1e400 x]",
            "$: invalid JSON: expected `,` or `]` at line 1 column 8",
        ),
        ("[-]", "$: invalid JSON: invalid number at line 1 column 3"),
    ] {
        assert_eq!(
            parse_trace(text.as_bytes()).unwrap_err().errors,
            vec![message.to_owned()],
            "{text}"
        );
    }
}
