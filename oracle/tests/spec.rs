//! Tests of the oracle, through its public API, against SPEC.md alone: the §8 worked example (and §4.8's
//! `dynamo_default` on it), the validation rules of §2.2, and the order-independence of
//! both digests.

use serde_json::{json, Value};

use kvroute_oracle::{replay, validate};

mod common;
use common::digest;

/// RFC 8785 bytes of a value, through the canonicalizer crate: an independent check of
/// the oracle's own writer.
fn jcs(value: &Value) -> Result<Vec<u8>, String> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------
// Helpers

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("test values serialize")
}

fn replay_value(trace: &Value) -> Value {
    let out = replay(&bytes(trace)).unwrap_or_else(|e| panic!("trace rejected: {e:?}"));
    assert_ne!(out.last(), Some(&b'\n'), "no trailing newline");
    serde_json::from_slice(&out).expect("receipt is JSON")
}

fn errors_of(trace: &Value) -> Vec<String> {
    errors_of_text(&String::from_utf8(bytes(trace)).expect("utf8"))
}

fn errors_of_text(text: &str) -> Vec<String> {
    match replay(text.as_bytes()) {
        Ok(_) => panic!("trace unexpectedly valid: {text}"),
        Err(lines) => {
            // validate() must agree with replay() on every invalid trace.
            assert_eq!(validate(text.as_bytes()).err(), Some(lines.clone()));
            lines
        }
    }
}

fn assert_single(trace: &Value, expected: &str) {
    assert_eq!(errors_of(trace), vec![expected.to_owned()]);
}

fn run<'a>(receipt: &'a Value, policy: &str) -> &'a Value {
    receipt["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["policy"] == policy)
        .expect("run present")
}

fn row<'a>(decision: &'a Value, worker: &str) -> &'a Value {
    decision["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .find(|r| r["worker"] == worker)
        .expect("row present")
}

/// Asserts how a decision routed: its chosen worker, route kind, tie count and margin.
fn assert_route(
    decision: &Value,
    chosen: &str,
    route_kind: &str,
    tie_count: u64,
    margin_milli: u64,
) {
    assert_eq!(
        (
            &decision["chosen"],
            &decision["route_kind"],
            &decision["tie_count"],
            &decision["margin_milli"]
        ),
        (
            &json!(chosen),
            &json!(route_kind),
            &json!(tie_count),
            &json!(margin_milli)
        )
    );
}

/// Asserts that no row of a decision on the three workers of §8 is dominated.
fn assert_none_dominated(decision: &Value) {
    for w in ["w0", "w1", "w2"] {
        assert_eq!(row(decision, w)["dominated_by"], Value::Null, "{w}");
        assert_eq!(row(decision, w)["dominated_count"], 0, "{w}");
    }
}

fn worker(id: &str, model: &str, queued: u64, active: u64, cache: Value) -> Value {
    json!({
        "id": id, "model": model, "adapters": [],
        "prefill_rate": 1000, "decode_rate": 100,
        "queued_prefill": queued, "active_decode": active,
        "observed_tick": 0, "epoch": 0, "cache": cache,
    })
}

fn entry(tenant: &str, model: &str, key: &str, tokens: u64) -> Value {
    json!({ "tenant": tenant, "model": model, "adapter": "base", "key": key, "tokens": tokens })
}

/// The trace of SPEC §8.
fn worked_example(max_queued_work: Option<u64>) -> Value {
    json!({
        "format": "kvroute-trace/1",
        "policy": {
            "decode_weight_milli": 1000,
            "imbalance_penalty_milli": 500,
            "freshness_ticks": null,
            "max_queued_work": max_queued_work,
        },
        "workers": [
            worker("w0", "m1", 2000, 100, json!([
                entry("acme", "m1", "k0", 512),
                entry("acme", "m1", "k1", 512),
            ])),
            worker("w1", "m1", 0, 0, json!([entry("beta", "m1", "k0", 512)])),
            worker("w2", "m2", 0, 0, json!([])),
        ],
        "events": [{
            "seq": 1, "tick": 1, "type": "request", "id": "r1",
            "tenant": "acme", "model": "m1", "adapter": "base",
            "prefix": [{ "key": "k0", "tokens": 512 }, { "key": "k1", "tokens": 512 }],
            "prompt_tokens": 1200, "decode_tokens": 100,
        }],
    })
}

/// A small valid trace with every event kind, for validation tests to break.
fn base_trace() -> Value {
    json!({
        "format": "kvroute-trace/1",
        "limits": "lab",
        "policy": { "decode_weight_milli": 1000, "imbalance_penalty_milli": 0,
                    "freshness_ticks": null, "max_queued_work": null },
        "sharing": [{ "model": "m1", "adapter": "base", "tenants": ["acme", "acme-eval"] }],
        "workers": [
            { "id": "w0", "model": "m1", "adapters": ["lora-a"],
              "prefill_rate": 512, "decode_rate": 64,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0,
              "cache": [entry("acme", "m1", "k0", 512)] },
            { "id": "w1", "model": "m1", "adapters": [],
              "prefill_rate": 512, "decode_rate": 64,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0,
              "cache": [] },
        ],
        "events": [
            { "seq": 1, "tick": 0, "type": "cache", "op": "store", "worker": "w0", "epoch": 1,
              "tenant": "acme", "model": "m1", "adapter": "base",
              "segments": [{ "key": "k0", "tokens": 512 }, { "key": "k1", "tokens": 512 }] },
            { "seq": 2, "tick": 3, "type": "cache", "op": "evict", "worker": "w0", "epoch": 2,
              "tenant": "acme", "model": "m1", "adapter": "base", "keys": ["k1"] },
            { "seq": 3, "tick": 4, "type": "cache", "op": "clear", "worker": "w0", "epoch": 3 },
            { "seq": 4, "tick": 5, "type": "load", "worker": "w0", "observed_tick": 5,
              "queued_prefill": 100, "active_decode": 20 },
            { "seq": 5, "tick": 6, "type": "request", "id": "r1",
              "tenant": "acme", "model": "m1", "adapter": "base",
              "prefix": [{ "key": "k0", "tokens": 512 }, { "key": "k1", "tokens": 512 }],
              "prompt_tokens": 1500, "decode_tokens": 200 },
        ],
    })
}

/// Sets the value at a JSON pointer, adding the member when the parent is an object.
fn with(mut trace: Value, pointer: &str, value: Value) -> Value {
    let (parent, last) = pointer.rsplit_once('/').expect("pointer");
    match trace.pointer_mut(parent).expect("parent exists") {
        Value::Object(members) => {
            members.insert(last.to_owned(), value);
        }
        Value::Array(items) => items[last.parse::<usize>().expect("index")] = value,
        _ => panic!("parent is neither object nor array"),
    }
    trace
}

fn without(mut trace: Value, pointer: &str, member: &str) -> Value {
    trace
        .pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .expect("object")
        .remove(member);
    trace
}

// ---------------------------------------------------------------------------------
// §8 worked example

#[test]
fn worked_example_rows_decisions_and_metrics() {
    let receipt = replay_value(&worked_example(None));
    assert_eq!(receipt["format"], "kvroute-receipt/1");
    let policies: Vec<&str> = receipt["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        policies,
        [
            "round_robin",
            "least_load",
            "longest_prefix",
            "cache_plus_load"
        ]
    );

    // Rows are the same in every run (no cap set).
    for policy in &policies {
        let decision = &run(&receipt, policy)["decisions"][0];
        assert_eq!(decision["seq"], 1);
        assert_eq!(decision["tick"], 1);
        assert_eq!(decision["request"], "r1");
        let workers: Vec<&str> = decision["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["worker"].as_str().unwrap())
            .collect();
        assert_eq!(workers, ["w0", "w1", "w2"]);

        let w0 = row(decision, "w0");
        assert_eq!(w0["eligible"], true);
        assert_eq!(w0["reasons"], json!([]));
        assert_eq!(w0["reuse"], 1024);
        assert_eq!(w0["recomputed"], 176);
        assert_eq!(w0["queued_prefill"], 1000);
        assert_eq!(w0["active_decode"], 0);
        assert_eq!(w0["work_milli"], 1_000_000);
        assert_eq!(w0["after_milli"], 1_276_000);
        assert_eq!(w0["cost_milli"], 1_176_000);
        assert_eq!(w0["dominated_by"], Value::Null);
        assert_eq!(w0["dominated_count"], 0);

        let w1 = row(decision, "w1");
        assert_eq!(w1["eligible"], true);
        assert_eq!(w1["reasons"], json!(["tenant_mismatch"]));
        assert_eq!(w1["reuse"], 0);
        assert_eq!(w1["recomputed"], 1200);
        assert_eq!(w1["work_milli"], 0);
        assert_eq!(w1["after_milli"], 1_300_000);
        assert_eq!(w1["cost_milli"], 1_206_000);
        assert_eq!(w1["dominated_by"], "w0");
        assert_eq!(w1["dominated_count"], 1);

        let w2 = row(decision, "w2");
        assert_eq!(w2["eligible"], false);
        assert_eq!(w2["reasons"], json!(["model_not_served"]));
        assert_eq!(w2["reuse"], 0);
        assert_eq!(w2["recomputed"], 1200);
        assert_eq!(w2["work_milli"], 0);
        assert_eq!(w2["after_milli"], 1_300_000);
        assert_eq!(w2["cost_milli"], 1_206_000);
        assert_eq!(w2["dominated_by"], Value::Null);
        assert_eq!(w2["dominated_count"], 0);

        let metrics = &run(&receipt, policy)["metrics"];
        assert_eq!(metrics["boundary_rejections"], 1);
        assert_eq!(metrics["routed"], 1);
        assert_eq!(metrics["rejected"], 0);
    }

    // (policy, chosen, route_kind, tie_count, margin, latency, dominated_choices)
    let expected = [
        ("round_robin", "w0", "hit", 1, 0, 1176, 0),
        ("least_load", "w1", "cold", 1, 1_000_000, 1200, 1),
        ("longest_prefix", "w0", "hit", 1, 1_024_000, 1176, 0),
        ("cache_plus_load", "w0", "hit", 1, 30_000, 1176, 0),
    ];
    for (policy, chosen, kind, ties, margin, latency, dominated) in expected {
        let r = run(&receipt, policy);
        let decision = &r["decisions"][0];
        assert_eq!(decision["chosen"], chosen, "{policy}");
        assert_eq!(decision["route_kind"], kind, "{policy}");
        assert_eq!(decision["tie_count"], ties, "{policy}");
        assert_eq!(decision["margin_milli"], margin, "{policy}");
        let m = &r["metrics"];
        assert_eq!(m["latency_proxy_mean_milli"], latency, "{policy}");
        assert_eq!(m["latency_proxy_p95_milli"], latency, "{policy}");
        assert_eq!(m["latency_proxy_max_milli"], latency, "{policy}");
        assert_eq!(m["dominated_choices"], dominated, "{policy}");
        assert_eq!(m["overload_escapes"], 0, "{policy}");
        // One placement: the chosen worker holds all assigned work, so skew = 1000·3.
        assert_eq!(m["load_skew_milli"], 3000, "{policy}");
        assert_eq!(r["cache_log"], json!([]));
        assert_eq!(r["observation_log"], json!([]));
    }
    let cpl = &run(&receipt, "cache_plus_load")["metrics"];
    assert_eq!(cpl["cache_hits"], 1);
    assert_eq!(cpl["reused_tokens"], 1024);
    assert_eq!(cpl["recomputed_tokens"], 176);
    assert_eq!(cpl["route_churn"], 0);
    let ll = &run(&receipt, "least_load")["metrics"];
    assert_eq!(ll["cache_hits"], 0);
    assert_eq!(ll["recomputed_tokens"], 1200);
}

#[test]
fn worked_example_with_cap() {
    let receipt = replay_value(&worked_example(Some(1270)));
    let cpl = run(&receipt, "cache_plus_load");
    let decision = &cpl["decisions"][0];
    assert_route(decision, "w0", "overload_escape", 1, 24_000);
    assert_eq!(row(decision, "w0")["reasons"], json!(["overloaded"]));
    assert_eq!(
        row(decision, "w1")["reasons"],
        json!(["tenant_mismatch", "overloaded"])
    );
    assert_eq!(row(decision, "w1")["eligible"], true);
    assert_eq!(row(decision, "w2")["reasons"], json!(["model_not_served"]));
    assert_none_dominated(decision);
    // Cost figures do not change with the cap (n and S count every eligible row).
    assert_eq!(row(decision, "w0")["cost_milli"], 1_176_000);
    assert_eq!(row(decision, "w1")["cost_milli"], 1_206_000);
    assert_eq!(cpl["metrics"]["overload_escapes"], 1);
    assert_eq!(cpl["metrics"]["dominated_choices"], 0);

    // The cap is for cache_plus_load only.
    for policy in ["round_robin", "least_load", "longest_prefix"] {
        let decision = &run(&receipt, policy)["decisions"][0];
        assert_eq!(row(decision, "w0")["reasons"], json!([]), "{policy}");
        assert_eq!(row(decision, "w1")["dominated_by"], "w0", "{policy}");
        assert_eq!(row(decision, "w1")["dominated_count"], 1, "{policy}");
        assert_ne!(decision["route_kind"], "overload_escape");
    }
}

#[test]
fn receipt_digests_are_consistent() {
    let trace = worked_example(None);
    let out = replay(&bytes(&trace)).unwrap();
    let mut receipt: Value = serde_json::from_slice(&out).unwrap();
    // Output is already canonical.
    assert_eq!(jcs(&receipt).unwrap(), out);
    let canonical_trace = validate(&bytes(&trace)).unwrap();
    assert_eq!(receipt["trace_digest"], digest(&canonical_trace));
    let stated = receipt["receipt_digest"].as_str().unwrap().to_owned();
    receipt.as_object_mut().unwrap().remove("receipt_digest");
    assert_eq!(stated, digest(&jcs(&receipt).unwrap()));
    assert!(stated.starts_with("sha256:") && stated.len() == 7 + 64);
    assert!(!String::from_utf8(out).unwrap().contains("acme"));
}

#[test]
fn canonical_trace_fills_defaults() {
    let trace = json!({ "format": "kvroute-trace/1", "workers": [], "events": [] });
    let canonical = validate(&bytes(&trace)).unwrap();
    assert_eq!(
        String::from_utf8(canonical).unwrap(),
        r#"{"events":[],"format":"kvroute-trace/1","limits":"lab","policy":{"decode_weight_milli":1000,"freshness_ticks":null,"imbalance_penalty_milli":0,"max_queued_work":null},"sharing":[],"workers":[]}"#
    );
    let receipt = replay_value(&trace);
    for r in receipt["runs"].as_array().unwrap() {
        assert_eq!(r["decisions"], json!([]));
        assert_eq!(r["metrics"]["load_skew_milli"], 0);
        assert_eq!(r["metrics"]["latency_proxy_p95_milli"], 0);
    }
}

// ---------------------------------------------------------------------------------
// A scenario across every event kind (values worked out by hand from SPEC §3–§6).

#[test]
fn base_trace_scenario() {
    let receipt = replay_value(&base_trace());
    for r in receipt["runs"].as_array().unwrap() {
        assert_eq!(
            r["cache_log"],
            json!([
                { "seq": 1, "tick": 0, "worker": "w0", "epoch": 1, "op": "store", "outcome": "applied" },
                { "seq": 2, "tick": 3, "worker": "w0", "epoch": 2, "op": "evict", "outcome": "applied" },
                { "seq": 3, "tick": 4, "worker": "w0", "epoch": 3, "op": "clear", "outcome": "applied" },
            ])
        );
        assert_eq!(
            r["observation_log"],
            json!([{ "seq": 4, "tick": 5, "worker": "w0", "observed_tick": 5, "outcome": "applied" }])
        );
        let decision = &r["decisions"][0];
        // Tick 6: w0 drained for 1 tick: 100 − 512 → 0 queued, 20 − 64 → 0 active.
        let w0 = row(decision, "w0");
        assert_eq!(w0["queued_prefill"], 0);
        assert_eq!(w0["active_decode"], 0);
        assert_eq!(w0["reuse"], 0);
        assert_eq!(w0["reasons"], json!([]));
        assert_eq!(w0["after_milli"], 1_700_000);
    }
    // Every row ties: round robin takes w0 and least-load / cache_plus_load the
    // smallest id, both with two tied rows.
    let ll = &run(&receipt, "least_load")["decisions"][0];
    assert_route(ll, "w0", "cold", 2, 0);
}

#[test]
fn stale_events_freshness_sharing_and_churn() {
    let trace = json!({
        "format": "kvroute-trace/1",
        "policy": { "freshness_ticks": 5 },
        "sharing": [{ "model": "m1", "adapter": "base", "tenants": ["b", "a"] }],
        "workers": [
            { "id": "x", "model": "m1", "adapters": ["lora"], "prefill_rate": 10, "decode_rate": 10,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 5,
              "cache": [entry("b", "m1", "k", 100),
                        { "tenant": "a", "model": "m1", "adapter": "lora", "key": "q", "tokens": 7 },
                        entry("a", "m9", "q", 3)] },
            { "id": "y", "model": "m1", "adapters": [], "prefill_rate": 10, "decode_rate": 10,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0,
              "cache": [] },
        ],
        "events": [
            // Stale epoch (5 ≤ 5): nothing changes.
            { "seq": 1, "tick": 1, "type": "cache", "op": "clear", "worker": "x", "epoch": 5 },
            // Stale observation on y? No: 0 ≥ 0 applies.
            { "seq": 2, "tick": 1, "type": "load", "worker": "y", "observed_tick": 0,
              "queued_prefill": 0, "active_decode": 0 },
            // r1 at tick 2: x is fresh (age 2); "a" reuses "b"'s k by the grant.
            { "seq": 3, "tick": 2, "type": "request", "id": "r1", "tenant": "a", "model": "m1",
              "adapter": "base", "prefix": [{ "key": "k", "tokens": 50 }, { "key": "q", "tokens": 5 }],
              "prompt_tokens": 60, "decode_tokens": 0 },
            // r2 at tick 9: x has age 9 > 5: stale_view.
            { "seq": 4, "tick": 9, "type": "request", "id": "r2", "tenant": "a", "model": "m1",
              "adapter": "base", "prefix": [{ "key": "k", "tokens": 50 }],
              "prompt_tokens": 60, "decode_tokens": 0 },
            { "seq": 5, "tick": 9, "type": "load", "worker": "x", "observed_tick": 8,
              "queued_prefill": 0, "active_decode": 0 },
            // r3 at tick 9 after the observation: fresh again.
            { "seq": 6, "tick": 9, "type": "request", "id": "r3", "tenant": "a", "model": "m1",
              "adapter": "base", "prefix": [{ "key": "k", "tokens": 50 }],
              "prompt_tokens": 60, "decode_tokens": 0 },
            { "seq": 7, "tick": 9, "type": "load", "worker": "x", "observed_tick": 7,
              "queued_prefill": 0, "active_decode": 0 },
        ],
    });
    let receipt = replay_value(&trace);
    let lp = run(&receipt, "longest_prefix");
    assert_eq!(lp["cache_log"][0]["outcome"], "stale_epoch");
    assert_eq!(lp["observation_log"][0]["outcome"], "applied");
    assert_eq!(lp["observation_log"][1]["outcome"], "applied");
    assert_eq!(lp["observation_log"][2]["outcome"], "stale_observation");
    assert_eq!(lp["metrics"]["stale_event_rejections"], 1);
    assert_eq!(lp["metrics"]["stale_observation_rejections"], 1);

    let d1 = &lp["decisions"][0];
    let x1 = row(d1, "x");
    // k: 50 reused; q: only (a,m1,lora) and (a,m9) resident: adapter and model mismatch.
    assert_eq!(x1["reuse"], 50);
    assert_eq!(x1["reasons"], json!(["model_mismatch", "adapter_mismatch"]));
    assert_eq!(d1["chosen"], "x");
    assert_eq!(d1["route_kind"], "hit");
    assert_eq!(d1["margin_milli"], 50_000);

    let d2 = &lp["decisions"][1];
    assert_eq!(row(d2, "x")["reasons"], json!(["stale_view"]));
    assert_eq!(row(d2, "x")["reuse"], 0);
    // Both rows have reuse 0: tie, smallest id wins.
    assert_eq!(d2["chosen"], "x");
    assert_eq!(d2["tie_count"], 2);

    let d3 = &lp["decisions"][2];
    assert_eq!(row(d3, "x")["reasons"], json!([]));
    assert_eq!(row(d3, "x")["reuse"], 50);

    // Least load: every decision ties at work 0 (drain, then x's observation resets
    // it), so x (smallest id) wins each time and nothing churns.
    let ll = run(&receipt, "least_load");
    let chosen: Vec<&str> = ll["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["chosen"].as_str().unwrap())
        .collect();
    assert_eq!(chosen, ["x", "x", "x"]);
    assert_eq!(ll["metrics"]["route_churn"], 0);

    // Round robin: x, y, x; r1 and r3 share the first key k → churn when they differ.
    let rr = run(&receipt, "round_robin");
    let chosen: Vec<&str> = rr["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["chosen"].as_str().unwrap())
        .collect();
    assert_eq!(chosen, ["x", "y", "x"]);
    assert_eq!(rr["metrics"]["route_churn"], 2);
}

#[test]
fn rejected_requests_and_adapter_eligibility() {
    let trace = json!({
        "format": "kvroute-trace/1",
        "workers": [
            { "id": "a", "model": "m1", "adapters": ["l1"], "prefill_rate": 1, "decode_rate": 1,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": [] },
            { "id": "b", "model": "m1", "adapters": [], "prefill_rate": 1, "decode_rate": 1,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": [] },
        ],
        "events": [
            { "seq": 1, "tick": 0, "type": "request", "id": "r1", "tenant": "t", "model": "m1",
              "adapter": "l2", "prefix": [], "prompt_tokens": 1, "decode_tokens": 1 },
            { "seq": 2, "tick": 0, "type": "request", "id": "r2", "tenant": "t", "model": "m1",
              "adapter": "l1", "prefix": [], "prompt_tokens": 1, "decode_tokens": 1 },
            { "seq": 3, "tick": 0, "type": "request", "id": "r3", "tenant": "t", "model": "m1",
              "adapter": "base", "prefix": [], "prompt_tokens": 1, "decode_tokens": 1 },
        ],
    });
    let receipt = replay_value(&trace);
    let rr = run(&receipt, "round_robin");
    let d1 = &rr["decisions"][0];
    assert_eq!(d1["chosen"], Value::Null);
    assert_eq!(d1["route_kind"], "rejected");
    assert_eq!(d1["tie_count"], 0);
    assert_eq!(row(d1, "a")["reasons"], json!(["adapter_not_loaded"]));
    // The rejected request left the cursor at 0: r2 goes to a, then r3 to b.
    assert_eq!(rr["decisions"][1]["chosen"], "a");
    assert_eq!(rr["decisions"][2]["chosen"], "b");
    assert_eq!(rr["metrics"]["rejected"], 1);
    assert_eq!(rr["metrics"]["routed"], 2);
    // Latency proxies 1000·(0+1)/1 = 1000 each.
    assert_eq!(rr["metrics"]["latency_proxy_mean_milli"], 1000);
    // Two placements of 2000 each on two workers: skew 1000·2000·2/4000 = 1000.
    assert_eq!(rr["metrics"]["load_skew_milli"], 1000);
}

// ---------------------------------------------------------------------------------
// §2 validation

#[test]
fn base_trace_is_valid() {
    assert!(validate(&bytes(&base_trace())).is_ok());
}

#[test]
fn invalid_json() {
    let lines = errors_of_text("{\"format\": ");
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("$: invalid JSON: "), "{lines:?}");
    let lines = errors_of_text("{} {}");
    assert!(lines[0].starts_with("$: invalid JSON: "), "{lines:?}");
    assert!(errors_of_text("\u{feff}{}")[0].starts_with("$: invalid JSON: "));
    assert!(errors_of_text("")[0].starts_with("$: invalid JSON: "));
}

#[test]
fn not_an_object_at_the_top() {
    assert_single(&json!([1, 2]), "$: expected an object, found [1,2]");
}

#[test]
fn integer_type_errors() {
    let cases = [
        (json!(5.0), "5.0"),
        (json!(1.5), "1.5"),
        (json!(-1), "-1"),
        (json!(true), "true"),
        (json!("5"), "\"5\""),
        (Value::Null, "null"),
        (json!(9_007_199_254_740_992u64), "9007199254740992"),
    ];
    for (value, shown) in cases {
        assert_single(
            &with(base_trace(), "/events/0/epoch", value),
            &format!("events[0].epoch: expected a non-negative integer, found {shown}"),
        );
    }
    // SPEC §2.2: a number is quoted as its literal text, never re-formatted.
    for (literal, shown) in [
        ("1e3", "1e3"),
        ("1E+3", "1E+3"),
        ("-0", "-0"),
        ("5.0", "5.0"),
        ("100000000000000000000", "100000000000000000000"),
    ] {
        let text = String::from_utf8(bytes(&base_trace()))
            .unwrap()
            .replace("\"epoch\":3", &format!("\"epoch\":{literal}"));
        assert_eq!(
            errors_of_text(&text),
            [format!(
                "events[2].epoch: expected a non-negative integer, found {shown}"
            )]
        );
    }
    // B itself is fine.
    let ok = with(
        base_trace(),
        "/events/0/epoch",
        json!(9_007_199_254_740_991u64),
    );
    assert!(validate(&bytes(&ok)).is_ok());
}

#[test]
fn nullable_integers() {
    assert_single(
        &with(base_trace(), "/policy/freshness_ticks", json!("x")),
        "policy.freshness_ticks: expected a non-negative integer or null, found \"x\"",
    );
    assert_single(
        &with(base_trace(), "/policy/decode_weight_milli", Value::Null),
        "policy.decode_weight_milli: expected a non-negative integer, found null",
    );
}

#[test]
fn zero_rate() {
    assert_single(
        &with(base_trace(), "/workers/1/decode_rate", json!(0)),
        "workers[1].decode_rate: expected a positive integer, found 0",
    );
}

#[test]
fn string_errors() {
    assert_single(
        &with(base_trace(), "/workers/0/id", json!("")),
        "workers[0].id: expected a non-empty string, found \"\"",
    );
    assert_single(
        &with(base_trace(), "/sharing/0/tenants/1", json!(7)),
        "sharing[0].tenants[1]: expected a non-empty string, found 7",
    );
    assert_single(
        &with(base_trace(), "/events/1/keys/0", json!(["k"])),
        "events[1].keys[0]: expected a non-empty string, found [\"k\"]",
    );
}

#[test]
fn long_values_are_cut_at_forty_chars() {
    let long = "é".repeat(50);
    let expected = format!("\"{}...", "é".repeat(39));
    assert_single(
        &with(base_trace(), "/workers/0/epoch", json!(long)),
        &format!("workers[0].epoch: expected a non-negative integer, found {expected}"),
    );
    let exactly = "a".repeat(38); // 40 chars with its quotes: not cut
    assert_single(
        &with(base_trace(), "/workers/0/epoch", json!(exactly)),
        &format!("workers[0].epoch: expected a non-negative integer, found \"{exactly}\""),
    );
}

#[test]
fn array_and_object_errors() {
    assert_single(
        &with(base_trace(), "/workers/0/cache", json!({})),
        "workers[0].cache: expected an array, found {}",
    );
    assert_single(
        &with(base_trace(), "/events/3", json!("load")),
        "events[3]: expected an object, found \"load\"",
    );
    assert_single(
        &with(base_trace(), "/policy", Value::Null),
        "policy: expected an object, found null",
    );
    assert_single(
        &with(base_trace(), "/events/4/prefix/1", json!(3)),
        "events[4].prefix[1]: expected an object, found 3",
    );
}

#[test]
fn fixed_value_errors() {
    assert_single(
        &with(base_trace(), "/format", json!("kvroute-trace/2")),
        "format: expected \"kvroute-trace/1\", found \"kvroute-trace/2\"",
    );
    assert_single(
        &with(base_trace(), "/limits", json!("huge")),
        "limits: expected \"lab\" or \"scale\", found \"huge\"",
    );
    assert_single(
        &with(base_trace(), "/events/3/type", json!("loads")),
        "events[3].type: expected \"cache\", \"load\" or \"request\", found \"loads\"",
    );
    assert_single(
        &with(base_trace(), "/events/0/op", json!(1)),
        "events[0].op: expected \"store\", \"evict\" or \"clear\", found 1",
    );
}

#[test]
fn missing_unknown_and_repeated_members() {
    assert_single(
        &without(base_trace(), "/events/4", "tenant"),
        "events[4].tenant: missing required member \"tenant\"",
    );
    assert_single(
        &without(base_trace(), "", "format"),
        "format: missing required member \"format\"",
    );
    assert_single(
        &with(base_trace(), "/events/0/colour", json!("red")),
        "events[0].colour: unknown member \"colour\"",
    );
    assert_single(
        &with(base_trace(), "/events/2/tenant", json!("acme")),
        "events[2].tenant: unknown member \"tenant\"",
    );
    assert_single(
        &with(base_trace(), "/workers/0/cache/0/extra", json!(1)),
        "workers[0].cache[0].extra: unknown member \"extra\"",
    );
    let text = String::from_utf8(bytes(&base_trace()))
        .unwrap()
        .replace("\"seq\":3,", "\"seq\":3,\"tick\":4,");
    assert_eq!(
        errors_of_text(&text),
        ["events[2].tick: repeated member \"tick\""]
    );
}

#[test]
fn invalid_type_stops_the_event_check() {
    let trace = with(base_trace(), "/events/4/type", json!("req"));
    let trace = without(trace, "/events/4", "tenant");
    let trace = with(trace, "/events/4/seq", json!(-5));
    assert_eq!(
        errors_of(&trace),
        [
            "events[4].seq: expected a non-negative integer, found -5",
            "events[4].type: expected \"cache\", \"load\" or \"request\", found \"req\"",
        ]
    );
    let trace = without(base_trace(), "/events/0", "op");
    let trace = with(trace, "/events/0/bogus", json!(1));
    assert_eq!(
        errors_of(&trace),
        ["events[0].op: missing required member \"op\""]
    );
}

#[test]
fn shape_errors_in_document_order() {
    let trace = with(base_trace(), "/workers/0/bogus", json!(1));
    let trace = with(trace, "/workers/0/epoch", json!(-1));
    let trace = with(trace, "/workers/0/id", json!(""));
    let trace = with(trace, "/format", json!(1));
    let trace = with(trace, "/zzz", json!(1));
    let trace = without(trace, "/events/1", "keys");
    assert_eq!(
        errors_of(&trace),
        [
            "format: expected \"kvroute-trace/1\", found 1",
            "workers[0].id: expected a non-empty string, found \"\"",
            "workers[0].epoch: expected a non-negative integer, found -1",
            "workers[0].bogus: unknown member \"bogus\"",
            "events[1].keys: missing required member \"keys\"",
            "zzz: unknown member \"zzz\"",
        ]
    );
}

#[test]
fn cross_reference_errors() {
    assert_single(
        &with(base_trace(), "/workers/1/id", json!("w0")),
        // w0's events still name a known worker; only the id repeats.
        "workers[1].id: duplicate worker id \"w0\"",
    );
    let mut trace = base_trace();
    let request = trace["events"][4].clone();
    let mut second = request.clone();
    second["seq"] = json!(6);
    trace["events"].as_array_mut().unwrap().push(second);
    assert_single(&trace, "events[5].id: duplicate request id \"r1\"");

    assert_single(
        &with(base_trace(), "/events/3/seq", json!(1)),
        "events[3].seq: duplicate seq 1",
    );
    assert_single(
        &with(base_trace(), "/events/1/worker", json!("w9")),
        "events[1].worker: unknown worker \"w9\"",
    );
    assert_single(
        &with(base_trace(), "/events/3/observed_tick", json!(6)),
        "events[3].observed_tick: observed_tick 6 is after the event tick 5",
    );
    assert_single(
        &with(base_trace(), "/events/4/prompt_tokens", json!(1000)),
        "events[4].prefix: prefix tokens 1024 exceed prompt_tokens 1000",
    );
    let mut trace = base_trace();
    let cache = trace["workers"][0]["cache"].as_array_mut().unwrap();
    cache.push(entry("other", "m1", "k0", 1));
    cache.push(entry("acme", "m1", "k0", 9));
    assert_single(
        &trace,
        "workers[0].cache[2]: duplicate cache entry for key \"k0\"",
    );
    assert_single(
        &with(base_trace(), "/events/4/decode_tokens", json!(6693)),
        "events[4]: 8193 tokens (prompt_tokens + decode_tokens) exceed the lab limit of 8192",
    );
    let ok = with(base_trace(), "/events/4/decode_tokens", json!(6692));
    assert!(validate(&bytes(&ok)).is_ok());
}

#[test]
fn cross_reference_order() {
    let trace = with(base_trace(), "/events/1/seq", json!(1));
    let trace = with(trace, "/events/1/worker", json!("nope"));
    let trace = with(trace, "/workers/1/id", json!("w0"));
    assert_eq!(
        errors_of(&trace),
        [
            "workers[1].id: duplicate worker id \"w0\"",
            "events[1].seq: duplicate seq 1",
            "events[1].worker: unknown worker \"nope\"",
        ]
    );
}

fn many_workers(count: usize) -> Value {
    let mut trace = base_trace();
    let template = trace["workers"][1].clone();
    let workers = trace["workers"].as_array_mut().unwrap();
    for i in 0..count.saturating_sub(2) {
        let mut w = template.clone();
        w["id"] = json!(format!("extra{i}"));
        workers.push(w);
    }
    trace
}

/// The base trace with `count` copies of its event `template` appended, copy `i` with
/// seq `100 + i` and, when the event has an id (a request), id `q<i>`, so that only the
/// count is wrong.
fn with_event_copies(template: usize, count: usize) -> Value {
    let mut trace = base_trace();
    let original = trace["events"][template].clone();
    let events = trace["events"].as_array_mut().unwrap();
    for i in 0..count {
        let mut e = original.clone();
        e["seq"] = json!(100 + i);
        if e.get("id").is_some() {
            e["id"] = json!(format!("q{i}"));
        }
        events.push(e);
    }
    trace
}

#[test]
fn count_limits() {
    assert!(validate(&bytes(&many_workers(8))).is_ok());
    assert_single(
        &many_workers(9),
        "workers: 9 workers exceed the lab limit of 8",
    );
    let scale = with(many_workers(9), "/limits", json!("scale"));
    assert!(validate(&bytes(&scale)).is_ok());

    assert_single(
        &with_event_copies(4, 64),
        "events: 65 requests exceed the lab limit of 64",
    );
    assert_single(
        &with_event_copies(2, 1020),
        "events: 1025 events exceed the lab limit of 1024",
    );
}

#[test]
fn overflow_rule() {
    // Q = 2^40 (the load event's queue is larger than w0's) + 1500; A = 20 + 200.
    let trace = with(base_trace(), "/workers/1/queued_prefill", json!(1u64 << 40));
    assert!(validate(&bytes(&trace)).is_ok());
    let trace = with(trace, "/policy/imbalance_penalty_milli", json!(10_000_000));
    // W = 1000·(2^40 + 1500) + 1000·220 = 1099511629496000
    // bound = 1000·1500 + W + floor(10^7·W/1000) = 10996215806590996000
    assert_single(
        &trace,
        "$: figures could overflow: the cost bound exceeds 9007199254740991",
    );
    // Past u128 (b·W ≈ 2^159): the bound is still printed exactly.
    // Q = 100 (load event) + 1500, A = b + 200, W = 1000·Q + b·A,
    // bound = 1000·1500 + W + floor(b·W/1000), computed with Python big integers.
    let b = 9_007_199_254_740_991u64;
    let trace = with(base_trace(), "/workers/1/active_decode", json!(b));
    let trace = with(trace, "/policy/decode_weight_milli", json!(b));
    let trace = with(trace, "/policy/imbalance_penalty_milli", json!(b));
    assert_single(
        &trace,
        "$: figures could overflow: the cost bound exceeds 9007199254740991",
    );
}

#[test]
fn hundred_line_cap() {
    let mut trace = base_trace();
    let events = trace["events"].as_array_mut().unwrap();
    for _ in 0..120 {
        events.push(json!(1));
    }
    let lines = errors_of(&trace);
    assert_eq!(lines.len(), 101);
    assert_eq!(lines[0], "events[5]: expected an object, found 1");
    assert_eq!(lines[99], "events[104]: expected an object, found 1");
    assert_eq!(lines[100], "... and 20 more errors");
}

#[test]
fn never_panics_on_odd_input() {
    for text in [
        "null",
        "[]",
        "\"x\"",
        "{\"format\":\"kvroute-trace/1\",\"workers\":[],\"events\":[{}]}",
        "{\"format\":\"kvroute-trace/1\",\"workers\":[{}],\"events\":[[]]}",
        "{\"a\":1,\"a\":2,\"a\":3}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        "1e999",
        "-0",
    ] {
        assert!(replay(text.as_bytes()).is_err(), "{text}");
    }
    assert!(replay(&[0xff, 0xfe]).is_err());
    assert!(replay(b"{\"format\":\"\xff\"}").is_err());
    assert_eq!(
        errors_of_text(
            "{\"a\":1,\"a\":2,\"format\":\"kvroute-trace/1\",\"workers\":[],\"events\":[]}"
        ),
        // SPEC §2.2: an unlisted name is unknown at every occurrence.
        ["a: unknown member \"a\"", "a: unknown member \"a\""]
    );
}

// ---------------------------------------------------------------------------------
// Determinism

/// A fixed, non-trivial permutation (no randomness in tests either).
fn permute(items: &mut [Value]) {
    items.reverse();
    if items.len() > 2 {
        items.rotate_left(1);
        items.swap(0, items.len() - 1);
    }
}

fn digests(trace: &Value) -> (String, String) {
    let receipt = replay_value(trace);
    (
        receipt["trace_digest"].as_str().unwrap().to_owned(),
        receipt["receipt_digest"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn shuffling_unordered_arrays_keeps_digests() {
    let mut rich = base_trace();
    rich["workers"][0]["adapters"] = json!(["z", "lora-a", "b"]);
    rich["workers"][0]["cache"] = json!([
        entry("acme", "m1", "k0", 512),
        entry("acme", "m1", "k2", 5),
        entry("beta", "m1", "k0", 3),
    ]);
    rich["sharing"] = json!([
        { "model": "m1", "adapter": "base", "tenants": ["acme", "acme-eval", "zed"] },
        { "model": "m1", "adapter": "lora-a", "tenants": ["q", "p"] },
        { "model": "m0", "adapter": "base", "tenants": [] },
    ]);
    rich["events"][1]["keys"] = json!(["k1", "k0", "k9"]);
    rich["workers"]
        .as_array_mut()
        .unwrap()
        .push(worker("w2", "m1", 5, 5, json!([])));
    let extra = json!({ "seq": 0, "tick": 6, "type": "request", "id": "r0",
        "tenant": "zed", "model": "m1", "adapter": "base",
        "prefix": [{ "key": "k0", "tokens": 10 }], "prompt_tokens": 20, "decode_tokens": 1 });
    rich["events"].as_array_mut().unwrap().push(extra);

    let original = digests(&rich);
    let mut shuffled = rich.clone();
    permute(shuffled["workers"].as_array_mut().unwrap());
    permute(shuffled["events"].as_array_mut().unwrap());
    assert_eq!(digests(&shuffled), original);

    permute(shuffled["sharing"].as_array_mut().unwrap());
    permute(shuffled["sharing"][0]["tenants"].as_array_mut().unwrap());
    for w in shuffled["workers"].as_array_mut().unwrap() {
        permute(w["adapters"].as_array_mut().unwrap());
        permute(w["cache"].as_array_mut().unwrap());
    }
    for e in shuffled["events"].as_array_mut().unwrap() {
        if let Some(keys) = e.get_mut("keys") {
            permute(keys.as_array_mut().unwrap());
        }
    }
    assert_eq!(digests(&shuffled), original);

    // Prefix order is meaningful: changing it changes the trace digest.
    let mut reordered = rich.clone();
    reordered["events"][4]["prefix"]
        .as_array_mut()
        .unwrap()
        .reverse();
    assert_ne!(digests(&reordered).0, original.0);
}

// ---------------------------------------------------------------------------------
// Robustness: deterministic pseudo-random mutations must never panic (debug builds
// also trap arithmetic overflow, so this exercises the u128/saturating paths).

/// A small linear congruential generator: deterministic, no dependency.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % (n.max(1) as u64)) as usize
    }
}

/// Replaces the integers of a value (except `seq`, to keep them unique) with picks
/// from interesting figures; rates never get 0.
fn scramble_integers(value: &mut Value, rng: &mut Lcg) {
    const PICKS: [u64; 8] = [0, 1, 2, 7, 512, 4096, 1 << 20, 1 << 30];
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| scramble_integers(v, rng)),
        Value::Object(members) => {
            for (name, v) in members.iter_mut() {
                if v.is_number() && name != "seq" {
                    let pick = PICKS[rng.below(PICKS.len())];
                    let is_rate = name.ends_with("_rate");
                    *v = json!(if is_rate { pick.max(1) } else { pick });
                } else {
                    scramble_integers(v, rng);
                }
            }
        }
        _ => {}
    }
}

#[test]
fn mutations_never_panic() {
    let mut rng = Lcg(42);
    let seeds = [
        base_trace(),
        worked_example(None),
        worked_example(Some(1270)),
    ];
    let snippets: [&[u8]; 10] = [
        b"0",
        b"-1",
        b"1.5",
        b"\"",
        b"{",
        b"}",
        b"[",
        b"null",
        b"\"x\":1,",
        b"9007199254740992",
    ];
    let mut replayed = 0;
    for seed in &seeds {
        let text = bytes(seed);
        for _ in 0..1500 {
            let mut mutated = text.clone();
            for _ in 0..(1 + rng.below(3)) {
                let at = rng.below(mutated.len());
                match rng.below(3) {
                    0 => {
                        mutated.remove(at);
                    }
                    1 => {
                        let snippet = snippets[rng.below(snippets.len())];
                        for (k, b) in snippet.iter().enumerate() {
                            mutated.insert(at + k, *b);
                        }
                    }
                    _ => mutated[at] = (rng.next() & 0xff) as u8,
                }
            }
            let _ = replay(&mutated);
        }
        for _ in 0..300 {
            let mut value = seed.clone();
            scramble_integers(&mut value, &mut rng);
            if replay(&bytes(&value)).is_ok() {
                replayed += 1;
            }
        }
    }
    // Some scrambled traces must get past validation, or the arithmetic went untested.
    assert!(
        replayed > 50,
        "only {replayed} scrambled traces were replayed"
    );
}

// ---------------------------------------------------------------------------------
// The receipt's bytes (serde's compact writer) against the canonicalizer

#[test]
fn receipt_bytes_are_the_canonical_form_of_their_own_parse() {
    let mut odd_strings = worked_example(None);
    // Ids with characters JCS escapes, or must leave alone.
    odd_strings["workers"][0]["id"] = json!("w\u{1}\"\\é\n\u{1f}");
    odd_strings["workers"][1]["id"] = json!("w\u{7f}😀\u{2028}");
    odd_strings["events"][0]["id"] = json!("r\t\u{8}\u{c}\r/");
    for trace in [
        worked_example(None),
        worked_example(Some(1270)),
        odd_strings,
        base_trace(),
    ] {
        let out = replay(&bytes(&trace)).expect("valid trace");
        let mut parsed: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(out, jcs(&parsed).unwrap(), "canonical form");
        let claimed = parsed["receipt_digest"].as_str().unwrap().to_owned();
        parsed.as_object_mut().unwrap().remove("receipt_digest");
        assert_eq!(claimed, digest(&jcs(&parsed).unwrap()), "receipt_digest");
    }
}

#[test]
fn dominance_names_the_smallest_dominating_id_and_counts_the_rest() {
    // Four idle-cache workers whose queues grow with the id, listed out of order: each
    // is dominated (same reuse, more work after placement) by every smaller-queued one.
    let mut trace = worked_example(None);
    trace["workers"] = json!([
        worker("w3", "m1", 15_000, 0, json!([])),
        worker("w1", "m1", 5_000, 0, json!([])),
        worker("w0", "m1", 0, 0, json!([])),
        worker("w2", "m1", 10_000, 0, json!([])),
    ]);
    let receipt = replay_value(&trace);
    let decision = &run(&receipt, "least_load")["decisions"][0];
    for (w, by, count) in [
        ("w0", Value::Null, 0),
        ("w1", json!("w0"), 1),
        ("w2", json!("w0"), 2),
        ("w3", json!("w0"), 3),
    ] {
        assert_eq!(row(decision, w)["dominated_by"], by, "{w}");
        assert_eq!(row(decision, w)["dominated_count"], count, "{w}");
    }
}

#[test]
fn canonical_trace_bytes_are_the_canonical_form_of_their_own_parse() {
    let mut odd_strings = base_trace();
    odd_strings["workers"][1]["id"] = json!("w\u{1}\"\\é\n");
    odd_strings["sharing"][0]["tenants"] = json!(["z\t", "acme", "a\u{7f}"]);
    for trace in [base_trace(), worked_example(Some(5)), odd_strings] {
        let canonical = kvroute_oracle::validate(&bytes(&trace)).expect("valid trace");
        let parsed: Value = serde_json::from_slice(&canonical).expect("JSON");
        assert_eq!(canonical, jcs(&parsed).unwrap());
    }
}

// ---------------------------------------------------------------------------------
// §1.1, §2.2: numbers quoted as written; the byte order mark

/// The base trace's text with `events[2].epoch` (the clear's `3`) written as `literal`.
fn with_clear_epoch_literal(literal: &str) -> String {
    let text = String::from_utf8(bytes(&base_trace())).unwrap();
    assert_eq!(text.matches("\"epoch\":3").count(), 1);
    text.replace("\"epoch\":3", &format!("\"epoch\":{literal}"))
}

#[test]
fn numbers_are_quoted_as_written_at_their_own_path() {
    // The SPEC §2.2 examples, each one line at the member's own path.
    for literal in [
        "1e3",
        "-0",
        "-1",
        "18446744073709551616",
        "1e400",
        "1E+3",
        "5.0",
        "9007199254740992",
    ] {
        assert_eq!(
            errors_of_text(&with_clear_epoch_literal(literal)),
            [format!(
                "events[2].epoch: expected a non-negative integer, found {literal}"
            )]
        );
    }
    // A 5000-digit integer is valid JSON: its first 40 digits and `...`.
    let long = format!("1{}", "0".repeat(4999));
    assert_eq!(
        errors_of_text(&with_clear_epoch_literal(&long)),
        [format!(
            "events[2].epoch: expected a non-negative integer, found 1{}...",
            "0".repeat(39)
        )]
    );
    // 40 characters exactly are not cut; 41 are.
    let forty = format!("1{}", "0".repeat(39));
    assert_eq!(
        errors_of_text(&with_clear_epoch_literal(&forty)),
        [format!(
            "events[2].epoch: expected a non-negative integer, found {forty}"
        )]
    );
    // The nullable two use their own wording, with the literal as written too.
    let text = String::from_utf8(bytes(&base_trace()))
        .unwrap()
        .replace("\"freshness_ticks\":null", "\"freshness_ticks\":-0.0e-0");
    assert_eq!(
        errors_of_text(&text),
        ["policy.freshness_ticks: expected a non-negative integer or null, found -0.0e-0"]
    );
    // `0` and B are the ends of the range; a leading zero is not JSON at all.
    assert!(validate(with_clear_epoch_literal("0").as_bytes()).is_ok());
    assert!(validate(with_clear_epoch_literal("9007199254740991").as_bytes()).is_ok());
    assert!(errors_of_text(&with_clear_epoch_literal("03"))[0].starts_with("$: invalid JSON: "));
}

#[test]
fn numbers_inside_quoted_values_are_written_as_given() {
    // Arrays and objects quote their numbers as written; object members in byte order
    // of their names, a repeated name once with its last value.
    let text = String::from_utf8(bytes(&base_trace())).unwrap().replace(
        "\"id\":\"w1\"",
        "\"id\":{\"b\":1e400,\"a\":[-0,2.50],\"b\":1E3}",
    );
    assert_eq!(
        errors_of_text(&text),
        ["workers[1].id: expected a non-empty string, found {\"a\":[-0,2.50],\"b\":1E3}"]
    );
    // Strings: the short escapes, other controls as lowercase \u00xx, the rest as is.
    assert_single(
        &with(base_trace(), "/workers/1/epoch", json!("\u{8}\u{c}\n\r\t\u{1f}\"\\é\u{7f}")),
        "workers[1].epoch: expected a non-negative integer, found \"\\b\\f\\n\\r\\t\\u001f\\\"\\\\é\u{7f}\"",
    );
}

#[test]
fn syntax_errors_read_numbers_as_if_in_range() {
    // A huge literal is never the syntax error: the message is the one the same
    // document with an in-range literal of the same length gets.
    for (huge, small) in [
        ("{\"a\":1e400,}", "{\"a\":10000,}"),
        ("[1e400 x]", "[10000 x]"),
        ("{\"format\": -1e400", "{\"format\": -10000"),
        ("[18446744073709551616", "[10000000000000000000"),
        ("[1e999] []", "[10000] []"),
    ] {
        let lines = errors_of_text(huge);
        assert_eq!(lines, errors_of_text(small), "{huge}");
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("$: invalid JSON: "), "{lines:?}");
        assert!(!lines[0].contains("out of range"), "{lines:?}");
    }
    // Malformed literals stay serde_json's own errors.
    for text in [
        "[1.]", "[-]", "[1e]", "[01]", "[-01]", "[1.e5]", "[.5]", "[+1]",
    ] {
        let lines = errors_of_text(text);
        assert!(
            lines[0].starts_with("$: invalid JSON: "),
            "{text}: {lines:?}"
        );
    }
    // Digits inside strings are no literals: keys and values keep their text.
    let text = String::from_utf8(bytes(&base_trace()))
        .unwrap()
        .replace("\"id\":\"w1\"", "\"id\":\"1e400 \\\" -0\"");
    let canonical = validate(text.as_bytes()).expect("valid");
    assert!(String::from_utf8(canonical)
        .unwrap()
        .contains("\"1e400 \\\" -0\""));
}

#[test]
fn byte_order_mark_has_its_own_line() {
    let expected = "$: invalid JSON: the document starts with a UTF-8 byte order mark \
                    (EF BB BF), which JSON text must not carry";
    let mut text = b"\xEF\xBB\xBF".to_vec();
    text.extend(bytes(&base_trace()));
    assert_eq!(replay(&text).err(), Some(vec![expected.to_owned()]));
    assert_eq!(validate(&text).err(), Some(vec![expected.to_owned()]));
    assert_eq!(errors_of_text("\u{feff}"), [expected]);
    assert_eq!(errors_of_text("\u{feff}not json"), [expected]);
    // Only at the start: after whitespace it is serde_json's own syntax error.
    let lines = errors_of_text(" \u{feff}{}");
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("$: invalid JSON: "), "{lines:?}");
    assert_ne!(lines[0], expected);
}

// ---------------------------------------------------------------------------------
// §2.1: long paths

#[test]
fn long_paths_are_cut_as_in_the_spec_example() {
    // SPEC §2.1, byte for byte: an unknown member in events[0] whose 200-character name
    // (100 `a`s, a space, 99 `a`s) is written in brackets: a 213-character path.
    let name = format!("{} {}", "a".repeat(100), "a".repeat(99));
    let trace = with(base_trace(), &format!("/events/0/{name}"), json!(1));
    assert_single(
        &trace,
        "events[0][\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa[...]\
         aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]: unknown member \
         \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...",
    );
    // 200 `a`s alone are a plain identifier, so the path is the 210-character
    // `events[0].aaa…`: 70 `a`s before the marker, 35 after it.
    let name = "a".repeat(200);
    let trace = with(base_trace(), &format!("/events/0/{name}"), json!(1));
    assert_single(
        &trace,
        &format!(
            "events[0].{}[...]{}: unknown member \"{}...",
            "a".repeat(70),
            "a".repeat(35),
            "a".repeat(39)
        ),
    );
}

#[test]
fn paths_of_120_characters_are_kept_and_longer_ones_cut_by_characters() {
    // `events[0].` is 10 characters: a 110-character name makes a 120-character path.
    let name = format!("b{}", "c".repeat(109));
    let trace = with(base_trace(), &format!("/events/0/{name}"), json!(1));
    assert_single(
        &trace,
        &format!(
            "events[0].{name}: unknown member {}...",
            &format!("\"{name}")[..40]
        ),
    );
    // 121 characters: the first 80, the marker, the last 35.
    let name = format!("b{}z", "c".repeat(109));
    let path = format!("events[0].{name}");
    let trace = with(base_trace(), &format!("/events/0/{name}"), json!(1));
    assert_single(
        &trace,
        &format!(
            "{}[...]{}: unknown member {}...",
            &path[..80],
            &path[121 - 35..],
            &format!("\"{name}")[..40]
        ),
    );
    // Characters, not bytes: a cut inside a run of two-byte `é`s splits no sequence.
    let name = "é".repeat(150);
    let trace = with(base_trace(), &format!("/events/0/{name}"), json!(1));
    assert_single(
        &trace,
        &format!(
            "events[0][\"{}[...]{}\"]: unknown member \"{}...",
            "é".repeat(69),
            "é".repeat(33),
            "é".repeat(39)
        ),
    );
}

// ---------------------------------------------------------------------------------
// §1.3: work limits

fn segments_json(count: usize, prefix: &str) -> Value {
    Value::Array(
        (0..count)
            .map(|i| json!({ "key": format!("{prefix}{i}"), "tokens": 1 }))
            .collect(),
    )
}

fn names_json(count: usize, prefix: &str) -> Value {
    Value::Array((0..count).map(|i| json!(format!("{prefix}{i}"))).collect())
}

fn grants_json(count: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|i| json!({ "model": format!("m{i}"), "adapter": "base", "tenants": ["acme"] }))
            .collect(),
    )
}

fn cache_json(count: usize, tokens: u64) -> Value {
    Value::Array(
        (0..count)
            .map(|i| entry("acme", "m1", &format!("c{i}"), tokens))
            .collect(),
    )
}

#[test]
fn tenants_per_grant_limit() {
    assert!(validate(&bytes(&with(
        base_trace(),
        "/sharing/0/tenants",
        names_json(8, "t")
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/sharing/0/tenants", names_json(9, "t")),
        "sharing[0].tenants: 9 tenants exceed the lab limit of 8 per grant",
    );
}

#[test]
fn adapters_per_worker_limit() {
    assert!(validate(&bytes(&with(
        base_trace(),
        "/workers/0/adapters",
        names_json(8, "a")
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/workers/0/adapters", names_json(9, "a")),
        "workers[0].adapters: 9 adapters exceed the lab limit of 8 per worker",
    );
}

#[test]
fn cache_array_limit() {
    assert!(validate(&bytes(&with(
        base_trace(),
        "/workers/1/cache",
        cache_json(256, 1)
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/workers/1/cache", cache_json(257, 1)),
        "workers[1].cache: 257 cache entries exceed the lab limit of 256 per worker",
    );
    // The array's length counts entries of 0 tokens too.
    assert_single(
        &with(base_trace(), "/workers/1/cache", cache_json(257, 0)),
        "workers[1].cache: 257 cache entries exceed the lab limit of 256 per worker",
    );
}

#[test]
fn keys_per_event_limit() {
    // The request's prefix (1 token a segment stays within its prompt_tokens of 1500).
    assert!(validate(&bytes(&with(
        base_trace(),
        "/events/4/prefix",
        segments_json(32, "k")
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/events/4/prefix", segments_json(33, "k")),
        "events[4].prefix: 33 keys exceed the lab limit of 32 per event",
    );
    // A store's segments (w0 then holds 1 + 32 entries, far within its 256).
    assert!(validate(&bytes(&with(
        base_trace(),
        "/events/0/segments",
        segments_json(32, "k")
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/events/0/segments", segments_json(33, "k")),
        "events[0].segments: 33 keys exceed the lab limit of 32 per event",
    );
    // An evict's keys.
    assert!(validate(&bytes(&with(
        base_trace(),
        "/events/1/keys",
        names_json(32, "k")
    )))
    .is_ok());
    assert_single(
        &with(base_trace(), "/events/1/keys", names_json(33, "k")),
        "events[1].keys: 33 keys exceed the lab limit of 32 per event",
    );
}

#[test]
fn sharing_grants_limit() {
    assert!(validate(&bytes(&with(base_trace(), "/sharing", grants_json(8)))).is_ok());
    assert_single(
        &with(base_trace(), "/sharing", grants_json(9)),
        "sharing: 9 sharing grants exceed the lab limit of 8",
    );
}

#[test]
fn work_limits_of_the_scale_profile() {
    let trace = with(base_trace(), "/limits", json!("scale"));
    let trace = with(trace, "/sharing", grants_json(9));
    let trace = with(trace, "/sharing/0/tenants", names_json(9, "t"));
    let trace = with(trace, "/workers/0/adapters", names_json(9, "a"));
    let trace = with(trace, "/workers/1/cache", cache_json(257, 1));
    let trace = with(trace, "/events/4/prefix", segments_json(33, "k"));
    let trace = with(trace, "/events/0/segments", segments_json(300, "k"));
    let trace = with(trace, "/events/1/keys", names_json(33, "k"));
    assert!(validate(&bytes(&trace)).is_ok());
    let trace = with(trace, "/sharing/0/tenants", names_json(4097, "t"));
    assert_single(
        &trace,
        "sharing[0].tenants: 4097 tenants exceed the scale limit of 4096 per grant",
    );
}

#[test]
fn static_limits_in_the_order_of_stage_three() {
    let trace = with(many_workers(9), "/sharing", grants_json(9));
    let trace = with(trace, "/sharing/0/tenants", names_json(9, "t"));
    let trace = with(trace, "/workers/0/adapters", names_json(9, "a"));
    let mut cache = cache_json(256, 1);
    cache[200] = entry("acme", "m1", "c3", 1);
    let trace = with(trace, "/workers/0/cache", cache);
    let mut trace = with(trace, "/workers/1/id", json!("w0"));
    trace["workers"][0]["cache"]
        .as_array_mut()
        .unwrap()
        .push(entry("x", "m1", "k", 1));
    let trace = with(trace, "/events/4/prefix", segments_json(33, "k"));
    let trace = with(trace, "/events/4/decode_tokens", json!(6693));
    let trace = with(trace, "/events/1/keys", names_json(33, "k"));
    let trace = with(trace, "/events/1/worker", json!("nobody"));
    assert_eq!(
        errors_of(&trace),
        [
            "sharing[0].tenants: 9 tenants exceed the lab limit of 8 per grant",
            "workers[0].adapters: 9 adapters exceed the lab limit of 8 per worker",
            "workers[0].cache[200]: duplicate cache entry for key \"c3\"",
            "workers[0].cache: 257 cache entries exceed the lab limit of 256 per worker",
            "workers[1].id: duplicate worker id \"w0\"",
            "events[1].worker: unknown worker \"nobody\"",
            "events[1].keys: 33 keys exceed the lab limit of 32 per event",
            "events[4]: 8193 tokens (prompt_tokens + decode_tokens) exceed the lab limit of 8192",
            "events[4].prefix: 33 keys exceed the lab limit of 32 per event",
            "sharing: 9 sharing grants exceed the lab limit of 8",
            "workers: 9 workers exceed the lab limit of 8",
        ]
    );
}

// ---------------------------------------------------------------------------------
// §1.3: the residency limit (stage 4)

fn empty_worker(id: &str) -> Value {
    worker(id, "m1", 0, 0, json!([]))
}

/// A store of `count` one-token segments `<prefix>0…` at the given seq, tick and epoch.
fn store_n(worker: &str, seq: u64, tick: u64, epoch: u64, count: usize, prefix: &str) -> Value {
    json!({ "seq": seq, "tick": tick, "type": "cache", "op": "store", "worker": worker,
            "epoch": epoch, "tenant": "acme", "model": "m1", "adapter": "base",
            "segments": segments_json(count, prefix) })
}

fn cache_trace(workers: Vec<Value>, events: Vec<Value>) -> Value {
    json!({ "format": "kvroute-trace/1", "workers": workers, "events": events })
}

#[test]
fn residency_limit_as_in_the_spec_example() {
    // Nine stores of 32 distinct keys to an empty w0 at ticks and epochs 1 to 9.
    let stores: Vec<Value> = (1..=9u64)
        .map(|i| store_n("w0", i, i, i, 32, &format!("s{i}-")))
        .collect();
    assert!(validate(&bytes(&cache_trace(
        vec![empty_worker("w0")],
        stores[..8].to_vec()
    )))
    .is_ok());
    assert_single(
        &cache_trace(vec![empty_worker("w0")], stores.clone()),
        "events[8]: worker \"w0\" would hold 288 cache entries, over the lab limit of 256",
    );
    // An applied evict of 32 of those keys before the ninth store keeps it at 256.
    let mut events = stores[..8].to_vec();
    events.push(
        json!({ "seq": 100, "tick": 8, "type": "cache", "op": "evict", "worker": "w0",
                        "epoch": 50, "tenant": "acme", "model": "m1", "adapter": "base",
                        "keys": names_json(32, "s1-") }),
    );
    events.push(store_n("w0", 9, 9, 51, 32, "s9-"));
    assert!(validate(&bytes(&cache_trace(vec![empty_worker("w0")], events))).is_ok());
}

#[test]
fn residency_counts_resident_entries_after_applied_stores() {
    // w0 starts with 250 entries of 1 token and 6 of 0 tokens (256 in the array).
    let mut cache = cache_json(256, 1);
    for item in cache.as_array_mut().unwrap().iter_mut().skip(250) {
        item["tokens"] = json!(0);
    }
    let w0 = worker("w0", "m1", 0, 0, cache);
    // Six new keys: 256 resident, at the limit.
    let six = store_n("w0", 1, 1, 1, 6, "n");
    assert!(validate(&bytes(&cache_trace(vec![w0.clone()], vec![six.clone()]))).is_ok());
    // Seven: 257; a 0-token segment on an existing key removes one, so 256 again.
    let seven = store_n("w0", 1, 1, 1, 7, "n");
    assert_single(
        &cache_trace(vec![w0.clone()], vec![seven.clone()]),
        "events[0]: worker \"w0\" would hold 257 cache entries, over the lab limit of 256",
    );
    let mut seven_and_zero = seven.clone();
    seven_and_zero["segments"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "key": "c0", "tokens": 0 }));
    assert!(validate(&bytes(&cache_trace(vec![w0.clone()], vec![seven_and_zero]))).is_ok());
    // Re-storing the 0-token initial keys makes them resident again.
    let mut revive = store_n("w0", 1, 1, 1, 0, "n");
    revive["segments"] = json!([{ "key": "c250", "tokens": 5 }, { "key": "c251", "tokens": 5 }]);
    let mut revive_more = revive.clone();
    revive_more["segments"]
        .as_array_mut()
        .unwrap()
        .push(json!({ "key": "c252", "tokens": 5 }));
    revive_more["segments"]
        .as_array_mut()
        .unwrap()
        .extend(segments_json(4, "n").as_array().unwrap().iter().cloned());
    assert_single(
        &cache_trace(vec![w0.clone()], vec![revive_more]),
        "events[0]: worker \"w0\" would hold 257 cache entries, over the lab limit of 256",
    );
    // A stale store (epoch not above the worker's) changes nothing.
    let stale = with(seven.clone(), "/epoch", json!(0));
    assert!(validate(&bytes(&cache_trace(vec![w0.clone()], vec![stale]))).is_ok());
    // A clear applied first empties the cache.
    let clear = json!({ "seq": 0, "tick": 1, "type": "cache", "op": "clear", "worker": "w0",
                        "epoch": 1 });
    let after_clear = with(seven, "/epoch", json!(2));
    assert!(validate(&bytes(&cache_trace(vec![w0], vec![clear, after_clear]))).is_ok());
}

#[test]
fn residency_order_is_tick_seq_and_one_line_per_worker() {
    // In array order the w1 stores come first, but (tick, seq) puts w0's over-limit
    // store (tick 3) before w1's (tick 5). w0 goes over twice: one line only.
    let mut events = Vec::new();
    for i in 0..8u64 {
        events.push(store_n("w1", 100 + i, 5, 1 + i, 32, &format!("x{i}-")));
    }
    events.push(store_n("w1", 200, 5, 20, 32, "x9-")); // events[8]: w1 over, tick 5
    for i in 0..8u64 {
        events.push(store_n("w0", 10 + i, 1, 1 + i, 32, &format!("y{i}-")));
    }
    events.push(store_n("w0", 30, 3, 20, 1, "z0-")); // events[17]: w0 at 257, tick 3
    events.push(store_n("w0", 31, 4, 21, 1, "z1-")); // events[18]: w0 at 258, not reported
    let trace = cache_trace(vec![empty_worker("w0"), empty_worker("w1")], events);
    assert_eq!(
        errors_of(&trace),
        [
            "events[17]: worker \"w0\" would hold 257 cache entries, over the lab limit of 256",
            "events[8]: worker \"w1\" would hold 288 cache entries, over the lab limit of 256",
        ]
    );
    // Same tick: seq decides. w1's ninth store has seq 200 and w0's seq 30 and 31.
    let mut trace = trace;
    trace["events"][17]["tick"] = json!(5);
    trace["events"][18]["tick"] = json!(5);
    assert_eq!(errors_of(&trace).len(), 2);
    assert!(errors_of(&trace)[0].starts_with("events[17]: "));
}

#[test]
fn residency_runs_after_stage_three_and_before_overflow() {
    let stores: Vec<Value> = (1..=9u64)
        .map(|i| store_n("w0", i, i, i, 32, &format!("s{i}-")))
        .collect();
    // A stage 3 error hides the residency line.
    let mut events = stores.clone();
    events.push(store_n("ghost", 50, 9, 1, 1, "g"));
    assert_single(
        &cache_trace(vec![empty_worker("w0")], events),
        "events[9].worker: unknown worker \"ghost\"",
    );
    // The residency line hides the overflow line.
    let mut trace = cache_trace(
        vec![worker("w0", "m1", 9_007_199_254_740_991, 0, json!([]))],
        stores,
    );
    assert_single(
        &trace,
        "events[8]: worker \"w0\" would hold 288 cache entries, over the lab limit of 256",
    );
    trace["events"].as_array_mut().unwrap().pop();
    assert_single(
        &trace,
        "$: figures could overflow: the cost bound exceeds 9007199254740991",
    );
}

// ---------------------------------------------------------------------------------
// The policy members added after contract version 1: stale rules (§3.2), sequential
// epochs (§3.6), the cold reserve (§4.5). Values worked out by hand from SPEC.

/// A cache event of worker `w0` in namespace (t, m, base).
fn store(seq: u64, tick: u64, epoch: u64, segments: &[(&str, u64)]) -> Value {
    let segments: Vec<Value> = segments
        .iter()
        .map(|(key, tokens)| json!({ "key": key, "tokens": tokens }))
        .collect();
    json!({ "seq": seq, "tick": tick, "type": "cache", "op": "store", "worker": "w0",
            "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base",
            "segments": segments })
}

fn evict(seq: u64, tick: u64, epoch: u64, keys: &[&str]) -> Value {
    json!({ "seq": seq, "tick": tick, "type": "cache", "op": "evict", "worker": "w0",
            "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base", "keys": keys })
}

fn clear(seq: u64, tick: u64, epoch: u64) -> Value {
    json!({ "seq": seq, "tick": tick, "type": "cache", "op": "clear", "worker": "w0",
            "epoch": epoch })
}

/// A request of tenant t for model m with one prefix segment `key:tokens`.
fn probe(seq: u64, tick: u64, key: &str, tokens: u64) -> Value {
    json!({ "seq": seq, "tick": tick, "type": "request", "id": format!("r{seq}"),
            "tenant": "t", "model": "m", "adapter": "base",
            "prefix": [{ "key": key, "tokens": tokens }],
            "prompt_tokens": tokens, "decode_tokens": 0 })
}

/// One worker `w0` of model m, epoch `epoch`, with the given initial cache.
fn one_worker_trace(policy: Value, epoch: u64, cache: Value, events: Vec<Value>) -> Value {
    json!({
        "format": "kvroute-trace/1",
        "policy": policy,
        "workers": [{ "id": "w0", "model": "m", "adapters": [],
                      "prefill_rate": 1000, "decode_rate": 100,
                      "queued_prefill": 0, "active_decode": 0,
                      "observed_tick": 0, "epoch": epoch, "cache": cache }],
        "events": events,
    })
}

/// The reuse of `w0` in each decision of one run, in decision order.
fn reuses(run: &Value) -> Vec<u64> {
    run["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(|d| row(d, "w0")["reuse"].as_u64().expect("reuse"))
        .collect()
}

fn canonical_text(value: &Value) -> String {
    String::from_utf8(jcs(value).expect("jcs")).expect("utf8")
}

/// SPEC §3.2 "Worked example: where the rules differ", then three probes of k0 (50),
/// k1 (100) and k2 (10) at ticks 8–10 that read the final caches back:
/// worker_epoch {k1:100, k2:10} → reuses 0, 100, 10; key_epoch {k2:10} → 0, 0, 10;
/// arrival_order {k1:40} → 0, min(40, 100) = 40, 0.
fn rules_example(stale_rule: &str) -> Value {
    one_worker_trace(
        json!({ "stale_rule": stale_rule }),
        0,
        json!([]),
        vec![
            store(1, 1, 2, &[("k1", 100)]),
            store(2, 2, 1, &[("k0", 50), ("k1", 30)]),
            evict(3, 3, 4, &["k0"]),
            store(4, 4, 3, &[("k0", 50)]),
            store(5, 5, 7, &[("k2", 10)]),
            clear(6, 6, 6),
            store(7, 7, 5, &[("k1", 40)]),
            probe(8, 8, "k0", 50),
            probe(9, 9, "k1", 100),
            probe(10, 10, "k2", 10),
        ],
    )
}

#[test]
fn stale_rules_worked_example_worker_epoch() {
    let receipt = replay_value(&rules_example("worker_epoch"));
    for r in receipt["runs"].as_array().unwrap() {
        // No stale_mutations member and no stale_mutation_rejections metric off key_epoch.
        assert_eq!(
            canonical_text(&r["cache_log"]),
            concat!(
                r#"[{"epoch":2,"op":"store","outcome":"applied","seq":1,"tick":1,"worker":"w0"},"#,
                r#"{"epoch":1,"op":"store","outcome":"stale_epoch","seq":2,"tick":2,"worker":"w0"},"#,
                r#"{"epoch":4,"op":"evict","outcome":"applied","seq":3,"tick":3,"worker":"w0"},"#,
                r#"{"epoch":3,"op":"store","outcome":"stale_epoch","seq":4,"tick":4,"worker":"w0"},"#,
                r#"{"epoch":7,"op":"store","outcome":"applied","seq":5,"tick":5,"worker":"w0"},"#,
                r#"{"epoch":6,"op":"clear","outcome":"stale_epoch","seq":6,"tick":6,"worker":"w0"},"#,
                r#"{"epoch":5,"op":"store","outcome":"stale_epoch","seq":7,"tick":7,"worker":"w0"}]"#,
            )
        );
        assert_eq!(r["metrics"]["stale_event_rejections"], 4);
        assert!(r["metrics"].get("stale_mutation_rejections").is_none());
        assert_eq!(reuses(r), [0, 100, 10], "{}", r["policy"]);
    }
}

#[test]
fn stale_rules_worked_example_key_epoch() {
    let receipt = replay_value(&rules_example("key_epoch"));
    for r in receipt["runs"].as_array().unwrap() {
        assert_eq!(
            canonical_text(&r["cache_log"]),
            concat!(
                r#"[{"epoch":2,"op":"store","outcome":"applied","seq":1,"stale_mutations":0,"tick":1,"worker":"w0"},"#,
                r#"{"epoch":1,"op":"store","outcome":"partly_stale_key_epoch","seq":2,"stale_mutations":1,"tick":2,"worker":"w0"},"#,
                r#"{"epoch":4,"op":"evict","outcome":"applied","seq":3,"stale_mutations":0,"tick":3,"worker":"w0"},"#,
                r#"{"epoch":3,"op":"store","outcome":"stale_key_epoch","seq":4,"stale_mutations":1,"tick":4,"worker":"w0"},"#,
                r#"{"epoch":7,"op":"store","outcome":"applied","seq":5,"stale_mutations":0,"tick":5,"worker":"w0"},"#,
                r#"{"epoch":6,"op":"clear","outcome":"applied","seq":6,"stale_mutations":0,"tick":6,"worker":"w0"},"#,
                r#"{"epoch":5,"op":"store","outcome":"stale_key_epoch","seq":7,"stale_mutations":1,"tick":7,"worker":"w0"}]"#,
            )
        );
        assert_eq!(r["metrics"]["stale_event_rejections"], 2);
        assert_eq!(r["metrics"]["stale_mutation_rejections"], 3);
        assert_eq!(reuses(r), [0, 0, 10], "{}", r["policy"]);
    }
}

#[test]
fn stale_rules_worked_example_arrival_order() {
    let receipt = replay_value(&rules_example("arrival_order"));
    for r in receipt["runs"].as_array().unwrap() {
        let outcomes: Vec<&str> = r["cache_log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["applied"; 7]);
        assert!(r["cache_log"][0].get("stale_mutations").is_none());
        assert_eq!(r["metrics"]["stale_event_rejections"], 0);
        assert!(r["metrics"].get("stale_mutation_rejections").is_none());
        assert_eq!(reuses(r), [0, 40, 0], "{}", r["policy"]);
    }
}

/// An evict of a key that was never resident still leaves a tombstone: evict e3 [k]
/// (tombstone 3), then store e2 {k:10} is rejected (2 ≤ 3), store e4 {k:20} applies.
/// A repeated key is one judgement and one mutation per occurrence: store e5
/// {k:5, j:6, k:7} applies all three (k ends at 7), store e5 again {k:1, k:2, j:3}
/// rejects all three (5 ≤ 5), stale_mutations 3.
#[test]
fn key_epoch_tombstone_then_an_older_store_and_repeated_keys() {
    let trace = one_worker_trace(
        json!({ "stale_rule": "key_epoch" }),
        0,
        json!([]),
        vec![
            evict(1, 1, 3, &["k"]),
            store(2, 2, 2, &[("k", 10)]),
            probe(3, 3, "k", 30),
            store(4, 4, 4, &[("k", 20)]),
            probe(5, 5, "k", 30),
            store(6, 6, 5, &[("k", 5), ("j", 6), ("k", 7)]),
            probe(7, 7, "k", 30),
            store(8, 8, 5, &[("k", 1), ("k", 2), ("j", 3)]),
            probe(9, 9, "k", 30),
        ],
    );
    let receipt = replay_value(&trace);
    let r = run(&receipt, "cache_plus_load");
    let log: Vec<(String, u64)> = r["cache_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["outcome"].as_str().unwrap().to_owned(),
                e["stale_mutations"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        log,
        [
            ("applied".to_owned(), 0),
            ("stale_key_epoch".to_owned(), 1),
            ("applied".to_owned(), 0),
            ("applied".to_owned(), 0),
            ("stale_key_epoch".to_owned(), 3),
        ]
    );
    assert_eq!(reuses(r), [0, 20, 7, 7]);
    assert_eq!(r["metrics"]["stale_event_rejections"], 2);
    assert_eq!(r["metrics"]["stale_mutation_rejections"], 4);
}

/// The clear floor, on a worker starting at epoch 5 with an initial entry k0:8 (no key
/// epoch: as of the floor 5).
/// - store e5 {k1:9}: 5 ≤ floor 5, rejected; store e6 {k1:9} applies (ke 6).
/// - evict e9 [k2]: tombstone ke(k2) = 9 (k2 never resident).
/// - clear e4: 4 ≤ floor 5, rejected, counts 1; nothing changes (k0 still there).
/// - clear e7 > 5: removes k0 (no key epoch) and k1 (ke 6 ≤ 7), keeps the tombstone of
///   k2 (ke 9 > 7); floor 7.
/// - store e8 {k2:4}: 8 > floor but 8 ≤ tombstone 9, rejected; store e8 {k3:4} applies.
/// - store e7 without segments: 7 ≤ floor, stale_key_epoch with 0 mutations; evict e10
///   without keys: applied, 0.
/// - clear e10 (10 > 7) removes the tombstone of k2 (9 ≤ 10) and k3: store e10 {k2:2}
///   is then rejected by the floor (10 ≤ 10), e11 {k2:2} applies.
#[test]
fn key_epoch_clear_floor() {
    let trace = one_worker_trace(
        json!({ "stale_rule": "key_epoch" }),
        5,
        json!([{ "tenant": "t", "model": "m", "adapter": "base", "key": "k0", "tokens": 8 }]),
        vec![
            store(1, 1, 5, &[("k1", 9)]),
            store(2, 1, 6, &[("k1", 9)]),
            evict(3, 1, 9, &["k2"]),
            clear(4, 1, 4),
            probe(5, 1, "k0", 8),
            clear(6, 2, 7),
            probe(7, 2, "k0", 8),
            probe(8, 2, "k1", 9),
            store(9, 3, 8, &[("k2", 4)]),
            store(10, 3, 8, &[("k3", 4)]),
            probe(11, 3, "k2", 4),
            probe(12, 3, "k3", 4),
            store(13, 4, 7, &[]),
            evict(14, 4, 10, &[]),
            clear(15, 5, 10),
            store(16, 5, 10, &[("k2", 2)]),
            probe(17, 5, "k2", 2),
            store(18, 6, 11, &[("k2", 2)]),
            probe(19, 6, "k2", 2),
        ],
    );
    let receipt = replay_value(&trace);
    let r = run(&receipt, "least_load");
    let log: Vec<(u64, &str, u64)> = r["cache_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["outcome"].as_str().unwrap(),
                e["stale_mutations"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        log,
        [
            (1, "stale_key_epoch", 1),
            (2, "applied", 0),
            (3, "applied", 0),
            (4, "stale_key_epoch", 1),
            (6, "applied", 0),
            (9, "stale_key_epoch", 1),
            (10, "applied", 0),
            (13, "stale_key_epoch", 0),
            (14, "applied", 0),
            (15, "applied", 0),
            (16, "stale_key_epoch", 1),
            (18, "applied", 0),
        ]
    );
    // k0 before the clear e7, then k0, k1 after it, k2, k3, k2 after the clear e10, k2.
    assert_eq!(reuses(r), [8, 0, 0, 0, 4, 0, 2]);
    assert_eq!(r["metrics"]["stale_event_rejections"], 5);
    // 1 + 1 + 1 + 0 + 1: the rejected mutation-less store counts no mutation.
    assert_eq!(r["metrics"]["stale_mutation_rejections"], 4);
}

/// `last_heard` moves with every key_epoch outcome except stale_key_epoch. Freshness
/// window 2: evict e3 [j] at tick 0 (tombstone ke(j) = 3), store e1 {k:3} at tick 1
/// applies; store e1 {k:3} again at tick 5 is stale_key_epoch (1 ≤ ke 1) and leaves
/// last_heard at 1, so a request at tick 5 sees age 4 > 2: stale_view. Store e2
/// {k:3, j:1} at tick 6 is partly stale (k: 2 > 1 accepted; j: 2 ≤ 3 rejected) and
/// moves last_heard to 6: the request at tick 7 is fresh and reuses 3.
#[test]
fn key_epoch_last_heard() {
    let trace = one_worker_trace(
        json!({ "stale_rule": "key_epoch", "freshness_ticks": 2 }),
        0,
        json!([]),
        vec![
            evict(0, 0, 3, &["j"]),
            store(1, 1, 1, &[("k", 3)]),
            store(2, 5, 1, &[("k", 3)]),
            probe(3, 5, "k", 3),
            store(4, 6, 2, &[("k", 3), ("j", 1)]),
            probe(5, 7, "k", 3),
        ],
    );
    let receipt = replay_value(&trace);
    let r = run(&receipt, "round_robin");
    let outcomes: Vec<&str> = r["cache_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "applied",
            "applied",
            "stale_key_epoch",
            "partly_stale_key_epoch"
        ]
    );
    let first = &r["decisions"][0];
    assert_eq!(row(first, "w0")["reasons"], json!(["stale_view"]));
    let second = &r["decisions"][1];
    assert_eq!(row(second, "w0")["reasons"], json!([]));
    assert_eq!(row(second, "w0")["reuse"], 3);
}

/// SPEC §3.6 example (worker_epoch, sequential, w0 at epoch 0): e1 (H = 1), e3 (R = {3}:
/// gap, evidence_gaps 1), a request gets evidence_gap with reuse 0 and no boundary
/// reason (k is resident under tenant u only); e2 arrives, stale (2 ≤ 3) but received:
/// R = {2, 3} drains to H = 3, and the next request reads the cache again.
#[test]
fn evidence_gap_closes_when_the_missing_epoch_arrives() {
    let mut other_tenant = store(1, 1, 1, &[("k", 5)]);
    other_tenant["tenant"] = json!("u");
    let trace = one_worker_trace(
        json!({ "epochs": "sequential" }),
        0,
        json!([]),
        vec![
            other_tenant,
            store(2, 2, 3, &[("q", 4)]),
            probe(3, 3, "k", 5),
            probe(4, 3, "q", 4),
            store(5, 4, 2, &[("x", 1)]),
            probe(6, 5, "k", 5),
            probe(7, 5, "q", 4),
        ],
    );
    let receipt = replay_value(&trace);
    for r in receipt["runs"].as_array().unwrap() {
        let d = &r["decisions"];
        assert_eq!(row(&d[0], "w0")["reasons"], json!(["evidence_gap"]));
        assert_eq!(row(&d[0], "w0")["eligible"], true);
        assert_eq!(row(&d[1], "w0")["reasons"], json!(["evidence_gap"]));
        assert_eq!(row(&d[2], "w0")["reasons"], json!(["tenant_mismatch"]));
        assert_eq!(row(&d[3], "w0")["reasons"], json!([]));
        assert_eq!(reuses(r), [0, 0, 0, 4]);
        assert_eq!(d[1]["route_kind"], "cold");
        let m = &r["metrics"];
        assert_eq!(m["evidence_gaps"], 1);
        assert_eq!(m["evidence_gap_rows"], 2);
        assert_eq!(m["boundary_rejections"], 1);
        assert_eq!(m["stale_event_rejections"], 1);
        assert!(m.get("cold_reserve_exclusions").is_none());
    }
}

/// The other branch of the §3.6 example: e2 is lost, so the gap stays, through a
/// second missing epoch (e5 while e4 is missing too: no second count), until a clear
/// e6 is applied (worker_epoch: 6 > 5): H = 6, R = {}. A new gap later counts again.
#[test]
fn evidence_gap_closes_by_an_applied_clear() {
    let trace = one_worker_trace(
        json!({ "epochs": "sequential" }),
        0,
        json!([]),
        vec![
            store(1, 1, 1, &[("k", 5)]),
            store(2, 2, 3, &[("k", 5)]),
            store(3, 3, 5, &[("k", 5)]),
            probe(4, 4, "k", 5),
            clear(5, 5, 6),
            store(6, 5, 7, &[("k", 5)]),
            probe(7, 6, "k", 5),
            store(8, 7, 9, &[("k", 5)]),
            probe(9, 8, "k", 5),
        ],
    );
    let receipt = replay_value(&trace);
    let r = run(&receipt, "longest_prefix");
    let d = &r["decisions"];
    assert_eq!(row(&d[0], "w0")["reasons"], json!(["evidence_gap"]));
    assert_eq!(row(&d[1], "w0")["reasons"], json!([]));
    assert_eq!(row(&d[2], "w0")["reasons"], json!(["evidence_gap"]));
    assert_eq!(reuses(r), [0, 5, 0]);
    assert_eq!(r["metrics"]["evidence_gaps"], 2);
    assert_eq!(r["metrics"]["evidence_gap_rows"], 2);
}

/// A gap then a clear. Under worker_epoch: store e1 (H = 1), store e5 (R = {5}: gap),
/// clear e3 is stale (3 ≤ 5), so it does not resync but is received: R = {3, 5}; the
/// gap stays; e2 then drains 2 and 3 (H = 3, R = {5}), still a gap; e4 closes it
/// (H = 5). Under key_epoch the same clear is applied (3 > floor 0) and resyncs: H = 3,
/// R = {5}, still a gap since 4 is missing; e2 is a repeat (2 ≤ H); e4 closes it. The
/// clear keeps k under key_epoch (ke(k) = 5 > 3) and is dropped under worker_epoch, so
/// both end with k:5 and one gap counted.
#[test]
fn evidence_gap_then_a_clear_under_each_rule() {
    for rule in ["worker_epoch", "key_epoch"] {
        let trace = one_worker_trace(
            json!({ "epochs": "sequential", "stale_rule": rule }),
            0,
            json!([]),
            vec![
                store(1, 1, 1, &[("k", 5)]),
                store(2, 2, 5, &[("k", 5)]),
                clear(3, 3, 3),
                probe(4, 4, "k", 5),
                store(5, 5, 2, &[("k", 5)]),
                probe(6, 6, "k", 5),
                store(7, 7, 4, &[("j", 1)]),
                probe(8, 8, "k", 5),
            ],
        );
        let receipt = replay_value(&trace);
        let r = run(&receipt, "cache_plus_load");
        let d = &r["decisions"];
        assert_eq!(
            row(&d[0], "w0")["reasons"],
            json!(["evidence_gap"]),
            "{rule}"
        );
        assert_eq!(
            row(&d[1], "w0")["reasons"],
            json!(["evidence_gap"]),
            "{rule}"
        );
        assert_eq!(row(&d[2], "w0")["reasons"], json!([]), "{rule}");
        assert_eq!(r["metrics"]["evidence_gaps"], 1, "{rule}");
        assert_eq!(r["metrics"]["evidence_gap_rows"], 2, "{rule}");
        assert_eq!(row(&d[2], "w0")["reuse"], 5, "{rule}");
    }
}

/// A gap and a stale view on the same row, in reason order; workers[].epoch is where H
/// starts (epoch 10: e11 is the next, e12 alone is a gap).
#[test]
fn evidence_gap_with_stale_view_and_a_starting_epoch() {
    let trace = one_worker_trace(
        json!({ "epochs": "sequential", "freshness_ticks": 1 }),
        10,
        json!([]),
        vec![
            store(1, 1, 11, &[("k", 5)]),
            probe(2, 1, "k", 5),
            store(3, 2, 13, &[("k", 5)]),
            probe(4, 9, "k", 5),
        ],
    );
    let receipt = replay_value(&trace);
    let r = run(&receipt, "round_robin");
    assert_eq!(row(&r["decisions"][0], "w0")["reasons"], json!([]));
    assert_eq!(row(&r["decisions"][0], "w0")["reuse"], 5);
    assert_eq!(
        row(&r["decisions"][1], "w0")["reasons"],
        json!(["stale_view", "evidence_gap"])
    );
    assert_eq!(r["metrics"]["evidence_gap_rows"], 1);
}

/// The §8 trace with a cap and a cold reserve.
fn reserve_example(max_queued_work: Option<u64>, cold_reserve_milli: Option<u64>) -> Value {
    let mut trace = worked_example(max_queued_work);
    trace["policy"]["cold_reserve_milli"] = json!(cold_reserve_milli);
    trace
}

/// SPEC §4.5 worked example: cap 1300, reserve 50000. Threshold 1,250,000: w0 (reuse
/// 1024, after 1,276,000) is reserved out, w1 (cold) is chosen alone.
#[test]
fn cold_reserve_worked_example() {
    let receipt = replay_value(&reserve_example(Some(1300), Some(50_000)));
    let cpl = run(&receipt, "cache_plus_load");
    let d = &cpl["decisions"][0];
    assert_route(d, "w1", "cold", 1, 0);
    assert_eq!(row(d, "w0")["reasons"], json!(["cold_reserve"]));
    assert_eq!(row(d, "w0")["eligible"], true);
    assert_eq!(row(d, "w1")["reasons"], json!(["tenant_mismatch"]));
    assert_none_dominated(d);
    assert_eq!(cpl["metrics"]["cold_reserve_exclusions"], 1);
    assert_eq!(cpl["metrics"]["cold_reserve_fallbacks"], 0);
    assert_eq!(cpl["metrics"]["dominated_choices"], 0);
    assert_eq!(cpl["metrics"]["overload_escapes"], 0);
    // The other policies never reserve; their metrics are present, at 0.
    for policy in ["round_robin", "least_load", "longest_prefix"] {
        let r = run(&receipt, policy);
        assert_eq!(
            row(&r["decisions"][0], "w0")["reasons"],
            json!([]),
            "{policy}"
        );
        assert_eq!(r["metrics"]["cold_reserve_exclusions"], 0, "{policy}");
        assert_eq!(r["metrics"]["cold_reserve_fallbacks"], 0, "{policy}");
        assert!(r["metrics"].get("evidence_gaps").is_none(), "{policy}");
    }
}

/// Reserve 20000: threshold 1,280,000, w0 is not reserved out and every run is §8's,
/// byte for byte, plus the two metrics at 0.
#[test]
fn cold_reserve_below_the_threshold_is_the_plain_run() {
    let plain = replay_value(&worked_example(None));
    let reserved = replay_value(&reserve_example(Some(1300), Some(20_000)));
    for (p, r) in plain["runs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(reserved["runs"].as_array().unwrap())
    {
        let mut expected = p.clone();
        expected["metrics"]["cold_reserve_exclusions"] = json!(0);
        expected["metrics"]["cold_reserve_fallbacks"] = json!(0);
        assert_eq!(
            canonical_text(r),
            canonical_text(&expected),
            "{}",
            p["policy"]
        );
    }
}

/// Cap 1299, reserve 50000: w1 is overloaded (1,300,000 > 1,299,000), w0 reserved out
/// (1,276,000 > 1,249,000). The second stage {w0} chooses w0, a hit, not an escape.
#[test]
fn cold_reserve_falls_back_before_the_overload_escape() {
    let receipt = replay_value(&reserve_example(Some(1299), Some(50_000)));
    let cpl = run(&receipt, "cache_plus_load");
    let d = &cpl["decisions"][0];
    assert_route(d, "w0", "hit", 1, 0);
    assert_eq!(row(d, "w0")["reasons"], json!(["cold_reserve"]));
    assert_eq!(
        row(d, "w1")["reasons"],
        json!(["tenant_mismatch", "overloaded"])
    );
    assert_none_dominated(d);
    let m = &cpl["metrics"];
    assert_eq!(m["cold_reserve_exclusions"], 1);
    assert_eq!(m["cold_reserve_fallbacks"], 1);
    assert_eq!(m["overload_escapes"], 0);
    assert_eq!(m["cache_hits"], 1);
}

/// With both rows overloaded (cap 1200: 1,276,000 and 1,300,000 > 1,200,000) the
/// reserve never applies (an overloaded row is not reserved out) and the route is the
/// overload escape of §8 (w0 by after_milli, margin 24,000). A reserve above 1000·C
/// reserves the whole cap: cap 1300, reserve 5,000,000, threshold 0, w0 reserved out.
/// A reserve without a cap does nothing, but its metrics are present.
#[test]
fn cold_reserve_with_the_overload_escape_saturation_and_no_cap() {
    let receipt = replay_value(&reserve_example(Some(1200), Some(50_000)));
    let cpl = run(&receipt, "cache_plus_load");
    let d = &cpl["decisions"][0];
    assert_eq!(d["chosen"], "w0");
    assert_eq!(d["route_kind"], "overload_escape");
    assert_eq!(d["margin_milli"], 24_000);
    assert_eq!(row(d, "w0")["reasons"], json!(["overloaded"]));
    assert_eq!(cpl["metrics"]["cold_reserve_exclusions"], 0);
    assert_eq!(cpl["metrics"]["cold_reserve_fallbacks"], 0);
    assert_eq!(cpl["metrics"]["overload_escapes"], 1);

    let receipt = replay_value(&reserve_example(Some(1300), Some(5_000_000)));
    let d = &run(&receipt, "cache_plus_load")["decisions"][0];
    assert_eq!(row(d, "w0")["reasons"], json!(["cold_reserve"]));
    assert_eq!(d["chosen"], "w1");

    let plain = replay_value(&worked_example(None));
    let no_cap = replay_value(&reserve_example(None, Some(50_000)));
    let (p, r) = (
        run(&plain, "cache_plus_load"),
        run(&no_cap, "cache_plus_load"),
    );
    assert_eq!(p["decisions"], r["decisions"]);
    assert_eq!(r["metrics"]["cold_reserve_exclusions"], 0);
    assert_eq!(r["metrics"]["cold_reserve_fallbacks"], 0);
}

/// SPEC §1, §6.1: the three later members are written only off their defaults; spelled
/// out at their defaults they change neither the canonical trace nor the receipt.
#[test]
fn later_policy_members_in_the_canonical_trace() {
    let bare = json!({ "format": "kvroute-trace/1", "workers": [], "events": [] });
    let defaults = json!({ "format": "kvroute-trace/1", "workers": [], "events": [],
        "policy": { "stale_rule": "worker_epoch", "epochs": "any", "cold_reserve_milli": null } });
    assert_eq!(
        validate(&bytes(&bare)).unwrap(),
        validate(&bytes(&defaults)).unwrap()
    );
    let set = json!({ "format": "kvroute-trace/1", "workers": [], "events": [],
        "policy": { "stale_rule": "key_epoch", "epochs": "sequential", "cold_reserve_milli": 7 } });
    assert_eq!(
        String::from_utf8(validate(&bytes(&set)).unwrap()).unwrap(),
        concat!(
            r#"{"events":[],"format":"kvroute-trace/1","limits":"lab","policy":{"cold_reserve_milli":7,"#,
            r#""decode_weight_milli":1000,"epochs":"sequential","freshness_ticks":null,"#,
            r#""imbalance_penalty_milli":0,"max_queued_work":null,"stale_rule":"key_epoch"},"#,
            r#""sharing":[],"workers":[]}"#,
        )
    );
    let arrival = with(
        bare.clone(),
        "/policy",
        json!({ "stale_rule": "arrival_order" }),
    );
    assert!(String::from_utf8(validate(&bytes(&arrival)).unwrap())
        .unwrap()
        .contains(r#""max_queued_work":null,"stale_rule":"arrival_order"}"#));
    // Receipt bytes: the §8 trace with the defaults spelled out is the same receipt.
    let mut spelled = worked_example(None);
    spelled["policy"]["stale_rule"] = json!("worker_epoch");
    spelled["policy"]["epochs"] = json!("any");
    spelled["policy"]["cold_reserve_milli"] = Value::Null;
    assert_eq!(
        replay(&bytes(&spelled)).unwrap(),
        replay(&bytes(&worked_example(None))).unwrap()
    );
}

/// A receipt with every later member off its default keeps the metric members in JCS
/// order (`evidence_gap_rows` before `evidence_gaps`; `stale_mutation_rejections`
/// between the other two stale counts).
#[test]
fn later_policy_members_in_the_receipt_bytes() {
    let mut trace = rules_example("key_epoch");
    trace["policy"]["epochs"] = json!("sequential");
    trace["policy"]["cold_reserve_milli"] = json!(3);
    trace["policy"]["max_queued_work"] = json!(10);
    let out = replay(&bytes(&trace)).expect("valid");
    let mut parsed: Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(out, jcs(&parsed).unwrap(), "canonical form");
    let claimed = parsed["receipt_digest"].as_str().unwrap().to_owned();
    parsed.as_object_mut().unwrap().remove("receipt_digest");
    assert_eq!(claimed, digest(&jcs(&parsed).unwrap()));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(r#""cache_hits":"#));
    for name in [
        "cold_reserve_exclusions",
        "cold_reserve_fallbacks",
        "evidence_gap_rows",
        "evidence_gaps",
        "stale_mutation_rejections",
    ] {
        assert!(text.contains(&format!("\"{name}\":")), "{name}");
    }
}

#[test]
fn later_policy_members_validation() {
    assert_single(
        &with(base_trace(), "/policy/stale_rule", json!("Key_epoch")),
        r#"policy.stale_rule: expected "worker_epoch", "key_epoch" or "arrival_order", found "Key_epoch""#,
    );
    for (value, shown) in [
        (json!(null), "null"),
        (json!(1), "1"),
        (json!(["key_epoch"]), r#"["key_epoch"]"#),
    ] {
        assert_single(
            &with(base_trace(), "/policy/stale_rule", value.clone()),
            &format!(
                r#"policy.stale_rule: expected "worker_epoch", "key_epoch" or "arrival_order", found {shown}"#
            ),
        );
        assert_single(
            &with(base_trace(), "/policy/epochs", value),
            &format!(r#"policy.epochs: expected "any" or "sequential", found {shown}"#),
        );
    }
    assert_single(
        &with(base_trace(), "/policy/epochs", json!("sequential ")),
        r#"policy.epochs: expected "any" or "sequential", found "sequential ""#,
    );
    for (value, shown) in [
        (json!("5"), r#""5""#),
        (json!(-1), "-1"),
        (json!(1.5), "1.5"),
    ] {
        assert_single(
            &with(base_trace(), "/policy/cold_reserve_milli", value),
            &format!(
                "policy.cold_reserve_milli: expected a non-negative integer or null, found {shown}"
            ),
        );
    }
    assert!(validate(&bytes(&with(
        base_trace(),
        "/policy/cold_reserve_milli",
        json!(9_007_199_254_740_991u64)
    )))
    .is_ok());
    // Check order inside policy: the table order of §2.3, then unknown members.
    let mut trace = base_trace();
    trace["policy"] = json!({ "bogus": 1, "cold_reserve_milli": "x", "epochs": 2,
                              "stale_rule": "no", "max_queued_work": "y" });
    assert_eq!(
        errors_of(&trace),
        [
            r#"policy.max_queued_work: expected a non-negative integer or null, found "y""#,
            r#"policy.stale_rule: expected "worker_epoch", "key_epoch" or "arrival_order", found "no""#,
            r#"policy.epochs: expected "any" or "sequential", found 2"#,
            r#"policy.cold_reserve_milli: expected a non-negative integer or null, found "x""#,
            r#"policy.bogus: unknown member "bogus""#,
        ]
    );
    // A repeated member, after the checks of the first occurrence.
    let text = r#"{"format":"kvroute-trace/1","policy":{"epochs":"any","epochs":"sequential"},"workers":[],"events":[]}"#;
    assert_eq!(
        errors_of_text(text),
        [r#"policy.epochs: repeated member "epochs""#]
    );
}

// ---------------------------------------------------------------------------------
// §4.8 `dynamo_default`, the opt-in fifth run (`policy.dynamo_block_tokens`)

/// The trace of §8 with `dynamo_block_tokens = b`.
fn dynamo_example(block_tokens: u64) -> Value {
    let mut trace = worked_example(None);
    trace["policy"]["dynamo_block_tokens"] = json!(block_tokens);
    trace
}

fn policy_names(receipt: &Value) -> Vec<String> {
    receipt["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["policy"].as_str().expect("policy").to_owned())
        .collect()
}

/// §4.8's worked example, `b = 512`: `w0` overlaps 1024 tokens (two whole blocks),
/// `prefill_tokens = 1000 + 1200 − 1024 = 1176`, `active_decode 0` after the drain:
/// `cost 1,176,000`; `w1` and the ineligible `w2` have `1,200,000`. `w0` wins by 24,000.
#[test]
fn dynamo_worked_example_block_512() {
    let receipt = replay_value(&dynamo_example(512));
    assert_eq!(
        policy_names(&receipt),
        [
            "round_robin",
            "least_load",
            "longest_prefix",
            "cache_plus_load",
            "dynamo_default"
        ]
    );
    let dynamo = run(&receipt, "dynamo_default");
    let decision = &dynamo["decisions"][0];
    assert_route(decision, "w0", "hit", 1, 24_000);
    assert_eq!(row(decision, "w0")["cost_milli"], 1_176_000);
    assert_eq!(row(decision, "w1")["cost_milli"], 1_200_000);
    assert_eq!(row(decision, "w2")["cost_milli"], 1_200_000);

    // Every other row member is §8's: only cost_milli differs from cache_plus_load's.
    let cpl_decision = &run(&receipt, "cache_plus_load")["decisions"][0];
    for w in ["w0", "w1", "w2"] {
        let mut expected = row(cpl_decision, w).clone();
        expected["cost_milli"] = row(decision, w)["cost_milli"].clone();
        assert_eq!(row(decision, w), &expected, "{w}");
    }
    // Dominance is §8's.
    assert_eq!(row(decision, "w1")["dominated_by"], "w0");
    assert_eq!(row(decision, "w1")["dominated_count"], 1);
    assert_eq!(row(decision, "w0")["dominated_by"], Value::Null);
    assert_eq!(row(decision, "w2")["dominated_count"], 0);

    // Metrics as for any run choosing w0: latency 1000·(1000+176)/1000, skew 1000·3.
    let m = &dynamo["metrics"];
    assert_eq!(m["routed"], 1);
    assert_eq!(m["cache_hits"], 1);
    assert_eq!(m["reused_tokens"], 1024);
    assert_eq!(m["recomputed_tokens"], 176);
    assert_eq!(m["latency_proxy_mean_milli"], 1176);
    assert_eq!(m["latency_proxy_p95_milli"], 1176);
    assert_eq!(m["latency_proxy_max_milli"], 1176);
    assert_eq!(m["load_skew_milli"], 3000);
    assert_eq!(m["boundary_rejections"], 1);
    assert_eq!(m["dominated_choices"], 0);
    assert_eq!(m["overload_escapes"], 0);
    // No metric of its own: the same members as the other runs'.
    assert_eq!(
        m.as_object().unwrap().keys().collect::<Vec<_>>(),
        run(&receipt, "cache_plus_load")["metrics"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>()
    );

    // The four runs are exactly those of the trace without the member.
    let plain = replay_value(&worked_example(None));
    assert_eq!(
        receipt["runs"].as_array().unwrap()[..4],
        plain["runs"].as_array().unwrap()[..]
    );
}

/// §4.8's worked example, `b = 1000`: 1024 reused tokens are one whole block, so
/// `overlap_tokens 1000`, `prefill_tokens 1000 + 1200 − 1000 = 1200`, a tie with `w1`
/// at 1,200,000: `w0` by id, `tie_count 2`, `margin 0`; its reuse is still 1024, so the
/// route is a hit (§5 looks at `reuse`, not the overlap).
#[test]
fn dynamo_worked_example_block_1000() {
    let receipt = replay_value(&dynamo_example(1000));
    let dynamo = run(&receipt, "dynamo_default");
    let decision = &dynamo["decisions"][0];
    assert_route(decision, "w0", "hit", 2, 0);
    for w in ["w0", "w1", "w2"] {
        assert_eq!(row(decision, w)["cost_milli"], 1_200_000, "{w}");
    }
    assert_eq!(row(decision, "w0")["reuse"], 1024);
    assert_eq!(dynamo["metrics"]["cache_hits"], 1);
    assert_eq!(dynamo["metrics"]["reused_tokens"], 1024);
}

/// Decode blocks round up. §8 with `w1.active_decode = 250`, which drains by 100 to 150
/// at tick 1 (`w1.work = 150,000`, `after = 150,000 + 1,200,000 + 100,000 = 1,450,000`).
/// - `b = 512`: `w1` `1000·1200 + 1000·512·ceil(150/512) = 1,712,000`; `w0` 1,176,000.
/// - `b = 100`: `w0` `overlap 1000`, `1000·1200 = 1,200,000`;
///   `w1` `1,200,000 + 1000·100·ceil(150/100) = 1,400,000`: margin 200,000.
/// - `b = 1`: exact tokens: `w0` `1000·(1000 + 1200 − 1024) = 1,176,000`;
///   `w1` `1,200,000 + 150,000 = 1,350,000`: margin 174,000.
#[test]
fn dynamo_cost_rounds_decode_up_to_whole_blocks() {
    for (block_tokens, w0_cost, w1_cost) in [
        (512, 1_176_000, 1_712_000),
        (100, 1_200_000, 1_400_000),
        (1, 1_176_000, 1_350_000),
    ] {
        let trace = with(
            dynamo_example(block_tokens),
            "/workers/1/active_decode",
            json!(250),
        );
        let receipt = replay_value(&trace);
        let decision = &run(&receipt, "dynamo_default")["decisions"][0];
        let w1 = row(decision, "w1");
        assert_eq!(w1["active_decode"], 150);
        assert_eq!(w1["work_milli"], 150_000);
        assert_eq!(w1["after_milli"], 1_450_000);
        assert_eq!(
            row(decision, "w0")["cost_milli"],
            w0_cost,
            "b {block_tokens}"
        );
        assert_eq!(w1["cost_milli"], w1_cost, "b {block_tokens}");
        assert_eq!(decision["chosen"], "w0");
        assert_eq!(decision["margin_milli"], w1_cost - w0_cost);
        assert_eq!(decision["tie_count"], 1);
    }
}

/// The cap and the cold reserve do not apply in `dynamo_default` (§4.8). With §8's cap
/// of 1270 both eligible rows are `overloaded` in cache_plus_load (an escape), but the
/// fifth run has no such reason and chooses `w0` by its Dynamo cost as usual; its front
/// set is every eligible row, so `w1` is dominated by `w0` there.
#[test]
fn dynamo_default_ignores_the_cap_and_the_cold_reserve() {
    let mut trace = worked_example(Some(1270));
    trace["policy"]["cold_reserve_milli"] = json!(50_000);
    trace["policy"]["dynamo_block_tokens"] = json!(512);
    let receipt = replay_value(&trace);
    let cpl = &run(&receipt, "cache_plus_load")["decisions"][0];
    assert_eq!(cpl["route_kind"], "overload_escape");
    let dynamo = run(&receipt, "dynamo_default");
    let decision = &dynamo["decisions"][0];
    assert_eq!(decision["chosen"], "w0");
    assert_eq!(decision["route_kind"], "hit");
    assert_eq!(decision["margin_milli"], 24_000);
    assert_eq!(row(decision, "w0")["reasons"], json!([]));
    assert_eq!(row(decision, "w1")["reasons"], json!(["tenant_mismatch"]));
    assert_eq!(row(decision, "w1")["dominated_by"], "w0");
    let m = &dynamo["metrics"];
    assert_eq!(m["overload_escapes"], 0);
    // The reserve's metrics are there (its member is set) and count nothing.
    assert_eq!(m["cold_reserve_exclusions"], 0);
    assert_eq!(m["cold_reserve_fallbacks"], 0);
}

/// Placement in the fifth run adds the row's `recomputed` as in every run (§3.4).
/// §8 plus a second request `r2` (seq 2, tick 1, like `r1`), `b = 512`. After `r1` on
/// `w0`: `w0.queued_prefill = 1000 + 176 = 1176`, `active_decode 100`. For `r2`:
/// `w0` `prefill_tokens = 1176 + 1200 − 1024 = 1352`, `decode_blocks ceil(100/512) = 1`:
/// `1,352,000 + 512,000 = 1,864,000`; `w1` 1,200,000: `w1` wins, cold, margin 664,000.
/// `w0`: work `1,276,000`, after `1,552,000`; `w1` after 1,300,000: neither dominates.
/// Churn 1 (k0 went to w0, then w1); assigned w0 276,000, w1 1,300,000: skew
/// `floor(1000·1,300,000·3 / 1,576,000) = 2474`; latencies 1176 and 1200.
#[test]
fn dynamo_default_places_and_counts_like_any_run() {
    let mut trace = dynamo_example(512);
    let mut second = trace["events"][0].clone();
    second["seq"] = json!(2);
    second["id"] = json!("r2");
    trace["events"].as_array_mut().unwrap().push(second);
    let receipt = replay_value(&trace);
    let dynamo = run(&receipt, "dynamo_default");
    let decision = &dynamo["decisions"][1];
    assert_eq!(decision["request"], "r2");
    let w0 = row(decision, "w0");
    assert_eq!(w0["queued_prefill"], 1176);
    assert_eq!(w0["active_decode"], 100);
    assert_eq!(w0["work_milli"], 1_276_000);
    assert_eq!(w0["after_milli"], 1_552_000);
    assert_eq!(w0["cost_milli"], 1_864_000);
    assert_eq!(w0["dominated_count"], 0);
    assert_eq!(row(decision, "w1")["cost_milli"], 1_200_000);
    assert_eq!(row(decision, "w1")["dominated_count"], 0);
    assert_route(decision, "w1", "cold", 1, 664_000);
    let m = &dynamo["metrics"];
    assert_eq!(m["routed"], 2);
    assert_eq!(m["cache_hits"], 1);
    assert_eq!(m["reused_tokens"], 1024);
    assert_eq!(m["recomputed_tokens"], 1376);
    assert_eq!(m["route_churn"], 1);
    assert_eq!(m["load_skew_milli"], 2474);
    assert_eq!(m["latency_proxy_mean_milli"], 1188);
    assert_eq!(m["latency_proxy_p95_milli"], 1200);
    assert_eq!(m["latency_proxy_max_milli"], 1200);
    assert_eq!(m["boundary_rejections"], 2);
    assert_eq!(m["dominated_choices"], 0);
}

/// §1, §6.1: written only when set, between `decode_weight_milli` and `epochs` in JCS
/// order; `null` spelled out is the bare trace, canonical bytes and receipt bytes alike.
#[test]
fn dynamo_block_tokens_in_the_canonical_trace_and_receipt() {
    let bare = json!({ "format": "kvroute-trace/1", "workers": [], "events": [] });
    let set = with(
        bare.clone(),
        "/policy",
        json!({ "dynamo_block_tokens": 512 }),
    );
    assert_eq!(
        String::from_utf8(validate(&bytes(&set)).unwrap()).unwrap(),
        concat!(
            r#"{"events":[],"format":"kvroute-trace/1","limits":"lab","policy":{"#,
            r#""decode_weight_milli":1000,"dynamo_block_tokens":512,"freshness_ticks":null,"#,
            r#""imbalance_penalty_milli":0,"max_queued_work":null},"sharing":[],"workers":[]}"#,
        )
    );
    let all_set = with(
        bare.clone(),
        "/policy",
        json!({ "stale_rule": "key_epoch", "epochs": "sequential",
                "cold_reserve_milli": 7, "dynamo_block_tokens": 1 }),
    );
    assert_eq!(
        String::from_utf8(validate(&bytes(&all_set)).unwrap()).unwrap(),
        concat!(
            r#"{"events":[],"format":"kvroute-trace/1","limits":"lab","policy":{"cold_reserve_milli":7,"#,
            r#""decode_weight_milli":1000,"dynamo_block_tokens":1,"epochs":"sequential","#,
            r#""freshness_ticks":null,"imbalance_penalty_milli":0,"max_queued_work":null,"#,
            r#""stale_rule":"key_epoch"},"sharing":[],"workers":[]}"#,
        )
    );
    let spelled_null = with(
        bare.clone(),
        "/policy",
        json!({ "dynamo_block_tokens": null }),
    );
    assert_eq!(
        validate(&bytes(&spelled_null)).unwrap(),
        validate(&bytes(&bare)).unwrap()
    );
    let mut example_null = worked_example(None);
    example_null["policy"]["dynamo_block_tokens"] = Value::Null;
    assert_eq!(
        replay(&bytes(&example_null)).unwrap(),
        replay(&bytes(&worked_example(None))).unwrap()
    );
    assert_eq!(policy_names(&replay_value(&example_null)).len(), 4);

    // With the member set: the fifth run is last, the receipt canonical, its digest its own.
    let out = replay(&bytes(&dynamo_example(512))).unwrap();
    let mut parsed: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(out, jcs(&parsed).unwrap());
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(r#""policy":"dynamo_default"}],"trace_digest":"sha256:"#));
    let claimed = parsed["receipt_digest"].as_str().unwrap().to_owned();
    parsed.as_object_mut().unwrap().remove("receipt_digest");
    assert_eq!(claimed, digest(&jcs(&parsed).unwrap()));
    // An empty trace has five runs too, each with no decisions.
    let empty = replay_value(&set);
    assert_eq!(policy_names(&empty).len(), 5);
    assert_eq!(run(&empty, "dynamo_default")["decisions"], json!([]));
    // The metrics-only bytes list the same five runs.
    let validated = kvroute_oracle::validated(&bytes(&dynamo_example(512))).unwrap();
    let metrics: Value =
        serde_json::from_slice(&kvroute_oracle::replay_metrics(&validated).unwrap()).unwrap();
    assert_eq!(metrics.as_array().unwrap().len(), 5);
    assert_eq!(metrics[4]["policy"], "dynamo_default");
}

/// §1.1, §2.2, §2.3: an integer of at least 1 or `null`; one reason for every other
/// value, `0` included; checked after `cold_reserve_milli`, before unknown members.
#[test]
fn dynamo_block_tokens_validation() {
    for (value, shown) in [
        (json!(0), "0"),
        (json!(-1), "-1"),
        (json!("x"), r#""x""#),
        (json!(1.5), "1.5"),
        (json!(true), "true"),
        (json!([512]), "[512]"),
        (json!(9_007_199_254_740_992u64), "9007199254740992"),
    ] {
        assert_single(
            &with(base_trace(), "/policy/dynamo_block_tokens", value),
            &format!(
                "policy.dynamo_block_tokens: expected a positive integer or null, found {shown}"
            ),
        );
    }
    // Literals are quoted as written (§2.2).
    for literal in ["1e3", "-0", "512.0"] {
        let text = format!(
            r#"{{"format":"kvroute-trace/1","policy":{{"dynamo_block_tokens":{literal}}},"workers":[],"events":[]}}"#
        );
        assert_eq!(
            errors_of_text(&text),
            [format!(
                "policy.dynamo_block_tokens: expected a positive integer or null, found {literal}"
            )]
        );
    }
    for value in [json!(null), json!(1), json!(512)] {
        assert!(
            validate(&bytes(&with(
                base_trace(),
                "/policy/dynamo_block_tokens",
                value.clone()
            )))
            .is_ok(),
            "{value}"
        );
    }
    // A repeated member, after the check of the first occurrence.
    let repeated = |first: &str| {
        format!(
            r#"{{"format":"kvroute-trace/1","policy":{{"dynamo_block_tokens":{first},"dynamo_block_tokens":8}},"workers":[],"events":[]}}"#
        )
    };
    assert_eq!(
        errors_of_text(&repeated("4")),
        [r#"policy.dynamo_block_tokens: repeated member "dynamo_block_tokens""#]
    );
    assert_eq!(
        errors_of_text(&repeated("0")),
        [
            "policy.dynamo_block_tokens: expected a positive integer or null, found 0",
            r#"policy.dynamo_block_tokens: repeated member "dynamo_block_tokens""#,
        ]
    );
    // Its place in member order: last of the table, after cold_reserve_milli, then the
    // unknown members in document order.
    let mut trace = base_trace();
    trace["policy"] = json!({ "bogus": 1, "dynamo_block_tokens": 0, "cold_reserve_milli": "x",
                              "epochs": 2, "decode_weight_milli": -1 });
    assert_eq!(
        errors_of(&trace),
        [
            "policy.decode_weight_milli: expected a non-negative integer, found -1",
            r#"policy.epochs: expected "any" or "sequential", found 2"#,
            r#"policy.cold_reserve_milli: expected a non-negative integer or null, found "x""#,
            "policy.dynamo_block_tokens: expected a positive integer or null, found 0",
            r#"policy.bogus: unknown member "bogus""#,
        ]
    );
}

/// §1.4: with `b` set, `dynamo_bound = 1000·Q + 1000·(A + b)` must not pass B either.
#[test]
fn dynamo_bound_overflow() {
    let overflow = "$: figures could overflow: the cost bound exceeds 9007199254740991";
    // No workers, no events: Q = A = 0, so dynamo_bound = 1000·b and bound = 0.
    // floor(B / 1000) = 9,007,199,254,740: 9,007,199,254,740,000 <= B; one more is over.
    let empty = json!({ "format": "kvroute-trace/1", "workers": [], "events": [] });
    let inside = with(
        empty.clone(),
        "/policy",
        json!({ "dynamo_block_tokens": 9_007_199_254_740u64 }),
    );
    assert!(validate(&bytes(&inside)).is_ok());
    let outside = with(
        empty,
        "/policy",
        json!({ "dynamo_block_tokens": 9_007_199_254_741u64 }),
    );
    assert_single(&outside, overflow);

    // base_trace: Q = max(0, 100) + 1500 = 1600, A = max(0, 20) + 200 = 220, so
    // dynamo_bound = 1,600,000 + 1000·(220 + b) = 1,820,000 + 1000·b:
    // b = 9,007,199,252,920 gives 9,007,199,254,740,000 <= B; b + 1 gives
    // 9,007,199,254,741,000 > B. The plain bound is 1000·1500 + 1,820,000 = 3,320,000.
    let inside = with(
        base_trace(),
        "/policy/dynamo_block_tokens",
        json!(9_007_199_252_920u64),
    );
    assert!(validate(&bytes(&inside)).is_ok());
    let outside = with(
        base_trace(),
        "/policy/dynamo_block_tokens",
        json!(9_007_199_252_921u64),
    );
    assert_single(&outside, overflow);

    // The Dynamo cost counts decode tokens at 1000 each whatever decode_weight_milli is:
    // with dw = 0 and w1.active_decode = 9,007,199,254,740, the plain bound is
    // 1000·1500 + 1000·1600 = 3,100,000, but dynamo_bound with b = 1 is
    // 1,600,000 + 1000·(9,007,199,254,740 + 200 + 1) = 9,007,199,256,541,000 > B.
    let heavy = with(
        base_trace(),
        "/workers/1/active_decode",
        json!(9_007_199_254_740u64),
    );
    let heavy = with(heavy, "/policy/decode_weight_milli", json!(0));
    assert!(validate(&bytes(&heavy)).is_ok());
    assert_single(
        &with(heavy, "/policy/dynamo_block_tokens", json!(1)),
        overflow,
    );

    // Both bounds over: still one line.
    let both = with(base_trace(), "/workers/1/queued_prefill", json!(1u64 << 50));
    let both = with(both, "/policy/dynamo_block_tokens", json!(1));
    assert_single(&both, overflow);
    // An earlier stage's error comes alone (overflow runs only on an otherwise valid trace).
    let both = with(both, "/workers/1/decode_rate", json!(0));
    assert_single(
        &both,
        "workers[1].decode_rate: expected a positive integer, found 0",
    );
}

/// A reuse shorter than one block earns no Dynamo credit, yet the row's `reuse` is what
/// §5's route kind and §6.2's `cache_hits` look at. §8 with `w0.queued_prefill = 1000`
/// (drained to 0 at tick 1) and `b = 2048`: `w0` reuses 1024 tokens, `overlap_tokens =
/// 2048·floor(1024/2048) = 0`, cost `1000·(0 + 1200) = 1,200,000`, the same as `w1`:
/// `w0` by id, `tie_count 2`, `margin 0`, and the route is a `hit` with 1024 reused.
#[test]
fn dynamo_route_kind_follows_reuse_not_whole_blocks() {
    let trace = with(
        dynamo_example(2048),
        "/workers/0/queued_prefill",
        json!(1000),
    );
    let receipt = replay_value(&trace);
    let dynamo = run(&receipt, "dynamo_default");
    let decision = &dynamo["decisions"][0];
    assert_eq!(row(decision, "w0")["queued_prefill"], 0);
    assert_eq!(row(decision, "w0")["reuse"], 1024);
    assert_eq!(row(decision, "w0")["cost_milli"], 1_200_000);
    assert_eq!(row(decision, "w1")["cost_milli"], 1_200_000);
    assert_route(decision, "w0", "hit", 2, 0);
    let m = &dynamo["metrics"];
    assert_eq!(m["cache_hits"], 1);
    assert_eq!(m["reused_tokens"], 1024);
    // Latency proxy from the row's recomputed: 1000·(0 + 176)/1000.
    assert_eq!(m["latency_proxy_max_milli"], 176);
}
