//! `policy.dynamo_block_tokens` and the `dynamo_default` run (SPEC.md §1, §1.4, §2.2,
//! §4.8, §5, §6, §6.1). Every expected figure was worked out by hand from SPEC.md §4.8
//! (the worked example there, on the trace of §8), not copied from an output.

use kvroute_core::output::{canonical_trace_bytes, canonical_trace_value, jcs_bytes, trace_digest};
use kvroute_core::{parse_trace, replay_bytes};
use serde_json::{json, Value};

const SPEC_EXAMPLE: &str = include_str!("../../fixtures/spec_example/trace.json");

fn spec_example_with(block_tokens: Value) -> Value {
    let mut trace: Value = serde_json::from_str(SPEC_EXAMPLE).unwrap();
    trace["policy"]["dynamo_block_tokens"] = block_tokens;
    trace
}

fn receipt(trace: &Value) -> Value {
    let bytes = replay_bytes(trace.to_string().as_bytes()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn errors(trace: &Value) -> Vec<String> {
    match parse_trace(trace.to_string().as_bytes()) {
        Ok(_) => vec![],
        Err(e) => e.errors,
    }
}

fn row<'a>(decision: &'a Value, worker: &str) -> &'a Value {
    decision["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["worker"] == worker)
        .unwrap()
}

fn policies(receipt: &Value) -> Vec<&str> {
    receipt["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect()
}

#[test]
fn worked_example_with_blocks_of_512() {
    let r = receipt(&spec_example_with(json!(512)));
    assert_eq!(
        policies(&r),
        [
            "round_robin",
            "least_load",
            "longest_prefix",
            "cache_plus_load",
            "dynamo_default"
        ]
    );
    let d = &r["runs"][4]["decisions"][0];
    // w0: 1024 reused = 2 whole blocks; prefill 1000 + 1200 - 1024 = 1176; no decode.
    assert_eq!(row(d, "w0")["cost_milli"], 1_176_000);
    // w1: no reuse (tenant_mismatch), prefill 0 + 1200; w2 (ineligible) the same.
    assert_eq!(row(d, "w1")["cost_milli"], 1_200_000);
    assert_eq!(row(d, "w2")["cost_milli"], 1_200_000);
    assert_eq!(d["chosen"], "w0");
    assert_eq!(d["route_kind"], "hit");
    assert_eq!(d["tie_count"], 1);
    assert_eq!(d["margin_milli"], 24_000);
    // Every other row member, dominance included, is the one of §8.
    let w0 = row(d, "w0");
    assert_eq!(
        (&w0["reuse"], &w0["work_milli"], &w0["after_milli"]),
        (&json!(1024), &json!(1_000_000), &json!(1_276_000))
    );
    assert_eq!(row(d, "w1")["dominated_by"], "w0");
    assert_eq!(row(d, "w1")["dominated_count"], 1);
    assert_eq!(row(d, "w1")["reasons"], json!(["tenant_mismatch"]));
    assert_eq!(row(d, "w2")["dominated_by"], Value::Null);
    assert_eq!(row(d, "w0")["dominated_by"], Value::Null);
    let metrics = &r["runs"][4]["metrics"];
    assert_eq!(metrics["routed"], 1);
    assert_eq!(metrics["cache_hits"], 1);
    assert_eq!(metrics["reused_tokens"], 1024);
    assert_eq!(metrics["dominated_choices"], 0);
    assert_eq!(metrics["boundary_rejections"], 1);
    // The latency proxy of §8 for w0: 1000·(1000 + 176) / 1000.
    assert_eq!(metrics["latency_proxy_max_milli"], 1176);
}

#[test]
fn worked_example_with_blocks_of_1000_ties_and_goes_to_the_smaller_id() {
    let r = receipt(&spec_example_with(json!(1000)));
    let d = &r["runs"][4]["decisions"][0];
    // 1024 reused tokens are one whole block of 1000: prefill 1000 + 1200 - 1000.
    assert_eq!(row(d, "w0")["cost_milli"], 1_200_000);
    assert_eq!(row(d, "w1")["cost_milli"], 1_200_000);
    assert_eq!(d["chosen"], "w0");
    assert_eq!(d["route_kind"], "hit");
    assert_eq!(d["tie_count"], 2);
    assert_eq!(d["margin_milli"], 0);
}

#[test]
fn the_four_runs_are_the_ones_the_trace_has_without_the_member() {
    let without = receipt(&serde_json::from_str(SPEC_EXAMPLE).unwrap());
    let with = receipt(&spec_example_with(json!(512)));
    assert_eq!(without["runs"].as_array().unwrap().len(), 4);
    for i in 0..4 {
        assert_eq!(with["runs"][i], without["runs"][i], "run {i}");
    }
    assert_ne!(with["trace_digest"], without["trace_digest"]);
}

#[test]
fn null_is_the_default_and_changes_no_byte() {
    let without = replay_bytes(SPEC_EXAMPLE.as_bytes()).unwrap();
    let null = replay_bytes(spec_example_with(Value::Null).to_string().as_bytes()).unwrap();
    assert_eq!(without, null);
}

#[test]
fn decode_blocks_round_up_and_partial_reuse_blocks_earn_nothing() {
    // w0's 100 outstanding decode tokens stay (the request arrives at tick 0, before any
    // drain), so with blocks of 64 its decode term is ceil(100 / 64) = 2 blocks = 128
    // tokens; its 1024 reused tokens are 16 whole blocks; prefill 2000 + 1200 - 1024.
    let mut trace = spec_example_with(json!(64));
    trace["events"][0]["tick"] = json!(0);
    let d = &receipt(&trace)["runs"][4]["decisions"][0];
    assert_eq!(row(d, "w0")["cost_milli"], 1000 * 2176 + 1000 * 128);
    assert_eq!(row(d, "w1")["cost_milli"], 1_200_000);
    assert_eq!(d["chosen"], "w1");
    assert_eq!(d["route_kind"], "cold");
    assert_eq!(d["margin_milli"], 1000 * 2304 - 1_200_000);
    // Blocks of 600: 1024 reused tokens hold one whole block (600), the partial 424
    // earn nothing; 100 decode tokens fill one block of 600.
    let mut trace = spec_example_with(json!(600));
    trace["events"][0]["tick"] = json!(0);
    let d = &receipt(&trace)["runs"][4]["decisions"][0];
    assert_eq!(
        row(d, "w0")["cost_milli"],
        1000 * (2000 + 1200 - 600) + 1000 * 600
    );
}

#[test]
fn no_cap_and_no_reserve_apply_to_the_dynamo_run() {
    // The cap of §8 ("With a cap") excludes both eligible rows in cache_plus_load; the
    // dynamo_default run ignores it and the cold reserve, recording neither reason.
    let mut trace = spec_example_with(json!(512));
    trace["policy"]["max_queued_work"] = json!(1270);
    trace["policy"]["cold_reserve_milli"] = json!(1000);
    let r = receipt(&trace);
    assert_eq!(
        r["runs"][3]["decisions"][0]["route_kind"],
        "overload_escape"
    );
    let d = &r["runs"][4]["decisions"][0];
    assert_eq!(d["chosen"], "w0");
    assert_eq!(d["route_kind"], "hit");
    assert_eq!(d["margin_milli"], 24_000);
    assert_eq!(row(d, "w0")["reasons"], json!([]));
    assert_eq!(row(d, "w1")["reasons"], json!(["tenant_mismatch"]));
    // The front set is every eligible row, so §8's dominance holds here too.
    assert_eq!(row(d, "w1")["dominated_by"], "w0");
    let metrics = &r["runs"][4]["metrics"];
    assert_eq!(metrics["overload_escapes"], 0);
    assert_eq!(metrics["cold_reserve_exclusions"], 0);
    assert_eq!(metrics["cold_reserve_fallbacks"], 0);
}

#[test]
fn wrong_values_name_the_path_and_the_reason() {
    for (value, quoted) in [
        (json!(0), "0"),
        (json!(-1), "-1"),
        (json!("5"), r#""5""#),
        (json!(1.5), "1.5"),
        (json!(true), "true"),
        (json!([]), "[]"),
    ] {
        assert_eq!(
            errors(&spec_example_with(value)),
            [format!(
                "policy.dynamo_block_tokens: expected a positive integer or null, found {quoted}"
            )]
        );
    }
    for value in [json!(1), json!(512), json!(1000)] {
        assert_eq!(errors(&spec_example_with(value)), Vec::<String>::new());
    }
}

#[test]
fn it_is_checked_after_the_other_policy_members_and_before_unknown_ones() {
    // Written as text so that the document order is this one: an unknown member first,
    // then the new member, then a known member of the older table (SPEC.md §2.3).
    let text = SPEC_EXAMPLE.replace(
        r#""imbalance_penalty_milli": 500"#,
        r#""imbalance_penalty_milli": 500, "aaa_unknown": 1, "dynamo_block_tokens": 0, "cold_reserve_milli": "x""#,
    );
    assert_ne!(text, SPEC_EXAMPLE);
    let paths: Vec<String> = match parse_trace(text.as_bytes()) {
        Ok(_) => vec![],
        Err(e) => e.errors,
    }
    .iter()
    .map(|e| e.split(':').next().unwrap().to_owned())
    .collect();
    assert_eq!(
        paths,
        [
            "policy.cold_reserve_milli",
            "policy.dynamo_block_tokens",
            "policy.aaa_unknown"
        ]
    );
}

#[test]
fn the_dynamo_bound_rejects_a_block_size_that_could_overflow() {
    // No load and no requests: Q = A = 0, so the only figure is 1000·b, and the largest
    // allowed block is floor((2^53 - 1) / 1000) = 9,007,199,254,740 tokens.
    let mut trace: Value = serde_json::from_str(SPEC_EXAMPLE).unwrap();
    trace["events"] = json!([]);
    for w in 0..3 {
        trace["workers"][w]["queued_prefill"] = json!(0);
        trace["workers"][w]["active_decode"] = json!(0);
    }
    trace["policy"]["dynamo_block_tokens"] = json!(9_007_199_254_740u64);
    assert_eq!(errors(&trace), Vec::<String>::new());
    trace["policy"]["dynamo_block_tokens"] = json!(9_007_199_254_741u64);
    assert_eq!(
        errors(&trace),
        ["$: figures could overflow: the cost bound exceeds 9007199254740991"]
    );
    // With the §8 figures, Q = 2000 + 1200 and A = 100 + 100: b may be at most
    // floor(B / 1000) - 3200 - 200.
    let limit = 9_007_199_254_740u64 - 3400;
    let ok = spec_example_with(json!(limit));
    assert_eq!(errors(&ok), Vec::<String>::new());
    let over = spec_example_with(json!(limit + 1));
    assert_eq!(
        errors(&over),
        ["$: figures could overflow: the cost bound exceeds 9007199254740991"]
    );
    // The largest block still replays, its figures within B.
    let d = &receipt(&ok)["runs"][4]["decisions"][0];
    // w0: no whole block of reuse, prefill 1000 + 1200; nothing to decode after the drain.
    assert_eq!(row(d, "w0")["cost_milli"], 2_200_000);
}

#[test]
fn the_canonical_trace_writes_the_member_in_jcs_order() {
    let trace = parse_trace(spec_example_with(json!(512)).to_string().as_bytes()).unwrap();
    let bytes = String::from_utf8(canonical_trace_bytes(&trace)).unwrap();
    assert!(bytes.contains(
        r#""policy":{"decode_weight_milli":1000,"dynamo_block_tokens":512,"freshness_ticks":null,"imbalance_penalty_milli":500,"max_queued_work":null}"#
    ));
    assert_eq!(
        bytes.as_bytes(),
        jcs_bytes(&canonical_trace_value(&trace)).as_slice()
    );
    let mut all = spec_example_with(json!(7));
    all["policy"]["epochs"] = json!("sequential");
    all["policy"]["cold_reserve_milli"] = json!(3);
    let all = parse_trace(all.to_string().as_bytes()).unwrap();
    assert_eq!(
        canonical_trace_bytes(&all),
        jcs_bytes(&canonical_trace_value(&all))
    );
    let default = parse_trace(SPEC_EXAMPLE.as_bytes()).unwrap();
    let null = parse_trace(spec_example_with(Value::Null).to_string().as_bytes()).unwrap();
    assert_eq!(trace_digest(&default), trace_digest(&null));
    assert_ne!(trace_digest(&default), trace_digest(&trace));
}
