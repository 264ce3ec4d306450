//! Rule boundaries pinned by hand, on both sides of each edge, against core *and* the
//! oracle separately: the freshness window (SPEC.md §4.2), the overload cap (§4.5), the
//! imbalance penalty's floor (§4.4), a load observation as old as the last one (§3.3)
//! and the p95 index (§6.2).
//!
//! The differential harness catches a slip in one implementation only; these catch a
//! slip both make, because each expected figure is worked out here from SPEC, with the
//! arithmetic in the comments.

use serde_json::{json, Value};

/// The receipt of each implementation, parsed; both must accept the trace.
fn receipts(trace: &Value) -> [(&'static str, Value); 2] {
    let bytes = serde_json::to_vec(trace).expect("a JSON value serialises");
    let core = kvroute_core::replay_bytes(&bytes).unwrap_or_else(|e| panic!("core rejects: {e}"));
    let oracle = kvroute_oracle::replay(&bytes).unwrap_or_else(|e| panic!("oracle rejects: {e:?}"));
    let parse = |b: &[u8]| serde_json::from_slice(b).expect("a receipt is JSON");
    [("core", parse(&core)), ("oracle", parse(&oracle))]
}

fn run<'r>(receipt: &'r Value, policy: &str) -> &'r Value {
    receipt["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["policy"] == policy)
        .unwrap_or_else(|| panic!("no {policy} run"))
}

fn row<'r>(decision: &'r Value, worker: &str) -> &'r Value {
    decision["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .find(|r| r["worker"] == worker)
        .unwrap_or_else(|| panic!("no row for {worker}"))
}

fn worker(id: &str, model: &str, queued: u64, active: u64, cache: Value) -> Value {
    json!({ "id": id, "model": model, "adapters": [], "prefill_rate": 1000,
            "decode_rate": 100, "queued_prefill": queued, "active_decode": active,
            "observed_tick": 0, "epoch": 0, "cache": cache })
}

fn request(seq: u64, tick: u64, prefix: Value, prompt_tokens: u64, decode_tokens: u64) -> Value {
    json!({ "seq": seq, "tick": tick, "type": "request", "id": format!("r{seq}"),
            "tenant": "acme", "model": "m1", "adapter": "base", "prefix": prefix,
            "prompt_tokens": prompt_tokens, "decode_tokens": decode_tokens })
}

/// Freshness window F = 5; w0 was last heard at tick 0 (its `observed_tick`, no cache
/// event) and holds k0. At tick 5 its view is 5 - 0 = 5 ticks old: not over F, so its
/// cache counts (reuse 512, no reason). At tick 6 it is 6 > 5 ticks old: `stale_view`,
/// reuse 0. Placements never move `last_heard`.
#[test]
fn freshness_is_strictly_more_than_the_window() {
    let k0 =
        json!([{ "tenant": "acme", "model": "m1", "adapter": "base", "key": "k0", "tokens": 512 }]);
    let prefix = json!([{ "key": "k0", "tokens": 512 }]);
    let trace = json!({
        "format": "kvroute-trace/1",
        "policy": { "freshness_ticks": 5 },
        "workers": [worker("w0", "m1", 0, 0, k0)],
        "events": [request(1, 5, prefix.clone(), 600, 1), request(2, 6, prefix, 600, 1)],
    });
    for (who, receipt) in receipts(&trace) {
        let decisions = &run(&receipt, "longest_prefix")["decisions"];
        let at_edge = row(&decisions[0], "w0");
        assert_eq!(
            (at_edge["reuse"].as_u64(), &at_edge["reasons"]),
            (Some(512), &json!([])),
            "{who}: tick 5"
        );
        let past = row(&decisions[1], "w0");
        assert_eq!(
            (past["reuse"].as_u64(), &past["reasons"]),
            (Some(0), &json!(["stale_view"])),
            "{who}: tick 6"
        );
    }
}

/// Cap C = 100, so rows with `after_milli > 100,000` are excluded. With
/// `decode_weight_milli = 1`, a cold request of 100 prompt tokens and 0 decode gives
/// `after = 1000 * queued + 1 * active + 1000 * 100 + 0`:
/// w0 (active 0): 100,000 — at the cap, not over it, so choosable;
/// w1 (active 1): 100,001 — one milli over: `overloaded`.
/// cache_plus_load routes to w0 as a cold route, not an overload escape.
#[test]
fn the_overload_cap_excludes_only_rows_strictly_over_it() {
    let trace = json!({
        "format": "kvroute-trace/1",
        "policy": { "decode_weight_milli": 1, "max_queued_work": 100 },
        "workers": [worker("w0", "m1", 0, 0, json!([])), worker("w1", "m1", 0, 1, json!([]))],
        "events": [request(1, 0, json!([]), 100, 0)],
    });
    for (who, receipt) in receipts(&trace) {
        let decision = &run(&receipt, "cache_plus_load")["decisions"][0];
        let (w0, w1) = (row(decision, "w0"), row(decision, "w1"));
        assert_eq!(w0["after_milli"].as_u64(), Some(100_000), "{who}");
        assert_eq!(w0["reasons"], json!([]), "{who}: at the cap");
        assert_eq!(w1["after_milli"].as_u64(), Some(100_001), "{who}");
        assert_eq!(
            w1["reasons"],
            json!(["overloaded"]),
            "{who}: one over the cap"
        );
        assert_eq!(
            (&decision["chosen"], &decision["route_kind"]),
            (&json!("w0"), &json!("cold")),
            "{who}"
        );
    }
}

/// Imbalance penalty 999 milli, `decode_weight_milli = 1`, a cold request of 10 prompt
/// tokens and 0 decode: `after = 10,000 + active`. Eligible: w0 (active 0, after 10,000)
/// and w1 (active 1,001, after 11,001), so n = 2 and S = 21,001. w2 serves another
/// model: ineligible, outside n and S, but priced all the same.
/// - w0: 2 * 10,000 - 21,001 < 0, imbalance 0; cost = 10,000 + 0 + 0 = 10,000.
/// - w1: excess 2 * 11,001 - 21,001 = 1,001; 999 * 1,001 / 2,000 = 499.9995, floored
///   to 499 (rounding would give 500); cost = 10,000 + 1,001 + 499 = 11,500.
/// - w2 (active 5,000, after 15,000): excess 30,000 - 21,001 = 8,999; 999 * 8,999 /
///   2,000 = 4,495.0005 → 4,495; cost = 10,000 + 5,000 + 4,495 = 19,495.
///
/// With w1 at active 2,000 instead the division is exact: excess 2,000 (S = 22,000),
/// 999 * 2,000 / 2,000 = 999; cost = 10,000 + 2,000 + 999 = 12,999.
#[test]
fn the_imbalance_penalty_is_floored_and_counts_eligible_rows_only() {
    for (w1_active, w1_cost, w2_cost) in [(1_001, 11_500, 19_495), (2_000, 12_999, 0)] {
        let trace = json!({
            "format": "kvroute-trace/1",
            "policy": { "decode_weight_milli": 1, "imbalance_penalty_milli": 999 },
            "workers": [
                worker("w0", "m1", 0, 0, json!([])),
                worker("w1", "m1", 0, w1_active, json!([])),
                worker("w2", "m2", 0, 5_000, json!([])),
            ],
            "events": [request(1, 0, json!([]), 10, 0)],
        });
        for (who, receipt) in receipts(&trace) {
            let decision = &run(&receipt, "cache_plus_load")["decisions"][0];
            assert_eq!(
                row(decision, "w0")["cost_milli"].as_u64(),
                Some(10_000),
                "{who}"
            );
            assert_eq!(
                row(decision, "w1")["cost_milli"].as_u64(),
                Some(w1_cost),
                "{who}: w1 active {w1_active}"
            );
            if w2_cost > 0 {
                assert_eq!(
                    row(decision, "w2")["cost_milli"].as_u64(),
                    Some(w2_cost),
                    "{who}: w2"
                );
            }
        }
    }
}

/// w0 has `prefill_rate` 1. Load at tick 4 observed at 4 (queued 100): applied. Load at
/// tick 5 observed at 4 again (queued 200): not older than the current observation, so
/// applied (`>=`). Load at tick 6 observed at 3 (queued 999): older, stale. The request
/// at tick 6 sees queued 200 drained from tick 5 by 1 token: 199 (had the second
/// observation been dropped, it would see 100 drained over 2 ticks: 98).
#[test]
fn an_observation_as_old_as_the_last_is_applied_and_an_older_one_is_not() {
    let mut w0 = worker("w0", "m1", 0, 0, json!([]));
    w0["prefill_rate"] = json!(1);
    let load = |seq: u64, tick: u64, observed_tick: u64, queued: u64| {
        json!({ "seq": seq, "tick": tick, "type": "load", "worker": "w0",
                "observed_tick": observed_tick, "queued_prefill": queued, "active_decode": 0 })
    };
    let trace = json!({
        "format": "kvroute-trace/1",
        "workers": [w0],
        "events": [load(1, 4, 4, 100), load(2, 5, 4, 200), load(3, 6, 3, 999), request(4, 6, json!([]), 10, 0)],
    });
    for (who, receipt) in receipts(&trace) {
        let run = run(&receipt, "least_load");
        let outcomes: Vec<&Value> = run["observation_log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["outcome"])
            .collect();
        assert_eq!(
            outcomes,
            [
                &json!("applied"),
                &json!("applied"),
                &json!("stale_observation")
            ],
            "{who}"
        );
        assert_eq!(
            row(&run["decisions"][0], "w0")["queued_prefill"].as_u64(),
            Some(199),
            "{who}"
        );
        assert_eq!(
            run["metrics"]["stale_observation_rejections"].as_u64(),
            Some(1),
            "{who}"
        );
    }
}

/// One worker (`prefill_rate` 1000) and N cold requests with prompts 1..=N, ten ticks
/// apart, so each finds the queue empty (10 ticks drain 10,000 tokens) and its latency
/// proxy is floor(1000 * (0 + p) / 1000) = p. The p95 is `sorted[ceil(95 N / 100) - 1]`:
/// - N = 20: ceil(19) - 1 = index 18, the proxy 19 (not 20, the maximum);
/// - N = 21: ceil(19.95) - 1 = index 19, the proxy 20 (a floor would give 19).
///
/// The mean is floor(N (N + 1) / 2 / N): 210 / 20 = 10.5 → 10 and 231 / 21 = 11.
#[test]
fn the_p95_index_is_the_ceiling_at_multiples_of_twenty_and_between() {
    for (n, p95, mean) in [(20u64, 19u64, 10u64), (21, 20, 11), (40, 38, 20)] {
        let events: Vec<Value> = (1..=n)
            .map(|i| request(i, 10 * i, json!([]), i, 0))
            .collect();
        let trace = json!({
            "format": "kvroute-trace/1",
            "workers": [worker("w0", "m1", 0, 0, json!([]))],
            "events": events,
        });
        for (who, receipt) in receipts(&trace) {
            let metrics = &run(&receipt, "round_robin")["metrics"];
            assert_eq!(
                metrics["latency_proxy_p95_milli"].as_u64(),
                Some(p95),
                "{who}: N = {n}"
            );
            assert_eq!(
                metrics["latency_proxy_mean_milli"].as_u64(),
                Some(mean),
                "{who}: N = {n}"
            );
            assert_eq!(
                metrics["latency_proxy_max_milli"].as_u64(),
                Some(n),
                "{who}: N = {n}"
            );
        }
    }
}
