//! SPEC §14.7 (why a request missed the cache): the worked example on receipts the
//! oracle's own `replay` writes for the §8 trace and its §4.5 cold-reserve variant, then
//! hand-written receipts (join reads a receipt without verifying it, §14) whose rows are
//! chosen so that every part of §14.7's table can be checked by hand; the identity
//! `prompt − cached = workload + boundary + routing_paid_for_load + routing_other +
//! elsewhere_lost − elsewhere_gained + phantom − missed` on every document; the readers'
//! new members and their errors (§14.1, §14.1.1, §14.5); and the gate's stderr lines.

use kvroute_oracle::{gate_lines, join_inputs, replay, JoinFailure, JoinInputs};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------
// Building inputs

fn trace_worker(id: &str, model: &str, queued: u64, active: u64, cache: Value) -> Value {
    json!({
        "id": id, "model": model, "adapters": [],
        "prefill_rate": 1000, "decode_rate": 100,
        "queued_prefill": queued, "active_decode": active,
        "observed_tick": 0, "epoch": 0, "cache": cache,
    })
}

fn entry(tenant: &str, key: &str, tokens: u64) -> Value {
    json!({ "tenant": tenant, "model": "m1", "adapter": "base", "key": key, "tokens": tokens })
}

/// The trace of SPEC §8 (with the §4.5 policy members), plus `extra` events.
fn section8_trace(
    max_queued_work: Option<u64>,
    cold_reserve: Option<u64>,
    extra: &[Value],
) -> Vec<u8> {
    let mut events = vec![json!({
        "seq": 1, "tick": 1, "type": "request", "id": "r1",
        "tenant": "acme", "model": "m1", "adapter": "base",
        "prefix": [{ "key": "k0", "tokens": 512 }, { "key": "k1", "tokens": 512 }],
        "prompt_tokens": 1200, "decode_tokens": 100,
    })];
    events.extend(extra.iter().cloned());
    serde_json::to_vec(&json!({
        "format": "kvroute-trace/1",
        "policy": {
            "decode_weight_milli": 1000,
            "imbalance_penalty_milli": 500,
            "freshness_ticks": null,
            "max_queued_work": max_queued_work,
            "cold_reserve_milli": cold_reserve,
        },
        "workers": [
            trace_worker("w0", "m1", 2000, 100, json!([entry("acme", "k0", 512), entry("acme", "k1", 512)])),
            trace_worker("w1", "m1", 0, 0, json!([entry("beta", "k0", 512)])),
            trace_worker("w2", "m2", 0, 0, json!([])),
        ],
        "events": events,
    }))
    .unwrap()
}

/// One hand-written row: worker, eligible, reasons, reuse, recomputed, work_milli,
/// after_milli, cost_milli.
type HandRow<'a> = (&'a str, bool, &'a [&'a str], u64, u64, u64, u64, u64);

fn row_json(r: &HandRow) -> Value {
    let (worker, eligible, reasons, reuse, recomputed, work, after, cost) = *r;
    json!({
        "worker": worker, "eligible": eligible, "reasons": reasons, "reuse": reuse,
        "recomputed": recomputed, "queued_prefill": 0, "active_decode": 0,
        "work_milli": work, "after_milli": after, "cost_milli": cost,
        "dominated_by": null, "dominated_count": 0,
    })
}

/// A hand-written receipt with one run `policy`; each decision (request, chosen,
/// route_kind, rows).
fn hand_receipt(policy: &str, decisions: &[(&str, Option<&str>, &str, Vec<HandRow>)]) -> Vec<u8> {
    let decisions: Vec<Value> = decisions
        .iter()
        .enumerate()
        .map(|(i, (request, chosen, kind, rows))| {
            json!({
                "seq": i + 1, "tick": 0, "request": request, "chosen": chosen,
                "route_kind": kind, "tie_count": 1, "margin_milli": 0,
                "candidates": rows.iter().map(row_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_vec(&json!({
        "format": "kvroute-receipt/1",
        "receipt_digest": "sha256:0",
        "runs": [{ "policy": policy, "decisions": decisions }],
    }))
    .unwrap()
}

/// An AIPerf record, completed, with `usage_prompt_cache_read_tokens` when given.
fn aiperf(id: &str, cached: Option<u64>) -> String {
    let usage = cached.map_or(String::new(), |c| {
        format!(r#","usage_prompt_cache_read_tokens":{{"value":{c},"unit":"tokens"}}"#)
    });
    format!(
        r#"{{"metadata":{{"x_request_id":"{id}","request_start_ns":0}},"metrics":{{"time_to_first_token":{{"value":1,"unit":"ms"}},"inter_token_latency":{{"value":1,"unit":"ms"}}{usage}}}}}"#
    )
}

/// A Dynamo `request_end` record, completed, with the given extra `request` members.
fn dynamo(id: &str, extra: &str) -> String {
    format!(
        r#"{{"event_type":"request_end","request":{{"request_id":"{id}","ttft_ms":1,"avg_itl_ms":1{extra}}}}}"#
    )
}

fn joined(
    receipt: &[u8],
    lines: &[String],
    format: &str,
    run: &str,
    trace: Option<&[u8]>,
) -> Value {
    let completions = lines.join("\n") + "\n";
    let bytes = join_inputs(&JoinInputs {
        receipt,
        completions: completions.as_bytes(),
        format: Some(format),
        run,
        slo: None,
        id_key: None,
        trace,
    })
    .expect("the join succeeds");
    serde_json::from_slice(&bytes).unwrap()
}

fn join_bytes(receipt: &[u8], lines: &[String], format: &str, run: &str) -> Vec<u8> {
    let completions = lines.join("\n") + "\n";
    join_inputs(&JoinInputs {
        receipt,
        completions: completions.as_bytes(),
        format: Some(format),
        run,
        slo: None,
        id_key: None,
        trace: None,
    })
    .expect("the join succeeds")
}

fn n(a: &Value, name: &str) -> i128 {
    a[name].as_i64().unwrap_or_else(|| panic!("{name} in {a}")) as i128
}

/// The identity of §14.7 on one `attribution` member (summed over its records).
fn assert_identity(a: &Value) {
    let lost = n(a, "prompt_tokens") - n(a, "cached_tokens");
    assert_eq!(n(a, "lost_tokens"), lost, "{a}");
    let parts = n(a, "workload")
        + n(a, "boundary")
        + n(a, "routing_paid_for_load")
        + n(a, "routing_other")
        + n(a, "elsewhere_lost")
        - n(a, "elsewhere_gained")
        + n(a, "phantom")
        - n(a, "missed");
    assert_eq!(parts, lost, "{a}");
}

/// An `attribution` member with every figure 0 but those given.
fn attribution(figures: Value, workers: Value) -> Value {
    let mut all = json!({
        "attributed": 0, "unknown": 0, "cached_over_prompt": 0, "served_elsewhere": 0,
        "served_outside_fleet": 0, "served_unknown": 0, "prompt_tokens": 0,
        "cached_tokens": 0, "lost_tokens": 0, "workload": 0, "boundary": 0,
        "routing_paid_for_load": 0, "routing_other": 0, "elsewhere_lost": 0,
        "elsewhere_gained": 0, "phantom": 0, "missed": 0, "hidden": 0, "drifted": 0,
        "drift_pm": 0, "elsewhere_pm": 0, "workers": workers,
    });
    for (name, value) in figures.as_object().unwrap() {
        assert!(all.get(name).is_some(), "no figure {name}");
        all[name] = value.clone();
    }
    all
}

// ---------------------------------------------------------------------------------
// The worked example (§14.7, on §8's trace)

/// `least_load` chose `w1`; AIPerf, cached 0: workload 176, routing_paid_for_load 1024
/// (w1's work_milli 0 below the best holder w0's), served_unknown, hidden 1 (w1 lists
/// tenant_mismatch), no drift: 176 + 1024 = 1200 − 0.
#[test]
fn worked_example_least_load() {
    let receipt = replay(&section8_trace(None, None, &[])).unwrap();
    let doc = joined(
        &receipt,
        &[aiperf("r1", Some(0))],
        "aiperf",
        "least_load",
        None,
    );
    let expected = attribution(
        json!({"attributed": 1, "served_unknown": 1, "prompt_tokens": 1200,
               "lost_tokens": 1200, "workload": 176, "routing_paid_for_load": 1024,
               "hidden": 1}),
        json!([{"worker": "w1", "attributed": 1, "phantom": 0, "missed": 0,
                "drifted": 0, "drift_pm": 0}]),
    );
    assert_eq!(doc["attribution"], expected);
    assert_identity(&doc["attribution"]);
}

/// `cache_plus_load` chose `w0`; Dynamo, cached 512, no worker: phantom 512, workload
/// 176, drift_pm 1000, workers as §14.7 writes it.
#[test]
fn worked_example_cache_plus_load_phantom() {
    let receipt = replay(&section8_trace(None, None, &[])).unwrap();
    let lines = [dynamo("r1", r#","cached_tokens":512"#)];
    let doc = joined(&receipt, &lines, "dynamo", "cache_plus_load", None);
    let expected = attribution(
        json!({"attributed": 1, "served_unknown": 1, "prompt_tokens": 1200,
               "cached_tokens": 512, "lost_tokens": 688, "workload": 176, "phantom": 512,
               "hidden": 1, "drifted": 1, "drift_pm": 1000}),
        json!([{"worker": "w0", "attributed": 1, "phantom": 512, "missed": 0,
                "drifted": 1, "drift_pm": 1000}]),
    );
    assert_eq!(doc["attribution"], expected);
    assert_identity(&doc["attribution"]);
    let bytes =
        String::from_utf8(join_bytes(&receipt, &lines, "dynamo", "cache_plus_load")).unwrap();
    assert!(bytes.contains(
        r#""workers":[{"attributed":1,"drift_pm":1000,"drifted":1,"missed":0,"phantom":512,"worker":"w0"}]"#
    ), "{bytes}");
}

/// The same record served by `prefill_worker_id` 7: `dynamo|7|dp0` is no worker of the
/// run: served_outside_fleet, elsewhere_pm 1000, elsewhere_lost 1024, missed 512:
/// 176 + 1024 − 512 = 688; workers [].
#[test]
fn worked_example_served_outside_the_fleet() {
    let receipt = replay(&section8_trace(None, None, &[])).unwrap();
    let lines = [dynamo(
        "r1",
        r#","cached_tokens":512,"worker":{"prefill_worker_id":7}"#,
    )];
    let doc = joined(&receipt, &lines, "dynamo", "cache_plus_load", None);
    let expected = attribution(
        json!({"attributed": 1, "served_outside_fleet": 1, "prompt_tokens": 1200,
               "cached_tokens": 512, "lost_tokens": 688, "workload": 176,
               "elsewhere_lost": 1024, "missed": 512, "hidden": 1, "drifted": 1,
               "drift_pm": 1000, "elsewhere_pm": 1000}),
        json!([]),
    );
    assert_eq!(doc["attribution"], expected);
    assert_identity(&doc["attribution"]);
}

/// §4.5's cold reserve (cap 1300, reserve 50000): `w1` chosen, `w0` has cold_reserve:
/// boundary 1024, workload 176, the whole 1200 with cached 0.
#[test]
fn worked_example_cold_reserve() {
    let receipt = replay(&section8_trace(Some(1300), Some(50_000), &[])).unwrap();
    let doc = joined(
        &receipt,
        &[aiperf("r1", Some(0))],
        "aiperf",
        "cache_plus_load",
        None,
    );
    let expected = attribution(
        json!({"attributed": 1, "served_unknown": 1, "prompt_tokens": 1200,
               "lost_tokens": 1200, "workload": 176, "boundary": 1024, "hidden": 1}),
        json!([{"worker": "w1", "attributed": 1, "phantom": 0, "missed": 0,
                "drifted": 0, "drift_pm": 0}]),
    );
    assert_eq!(doc["attribution"], expected);
    assert_identity(&doc["attribution"]);
}

// ---------------------------------------------------------------------------------
// Where it ran (hand-written receipts)

const W0: &str = "dynamo|0|dp0";
const W1: &str = "dynamo|1|dp0";
const W2: &str = "dynamo|2|dp0";

/// `cache_plus_load`, prompt 1000: W0 reuse 600 (cost 900,000), W1 reuse 200 (cost
/// 800,000, chosen), W2 reuse 0. best_eligible = best_choosable = 600, predicted 200;
/// W1's cost is below the holder W0's: routing_paid_for_load 400; workload 400.
fn fleet_receipt(requests: &[&str]) -> Vec<u8> {
    let rows = || {
        vec![
            (W0, true, &[][..], 600, 400, 0, 0, 900_000),
            (W1, true, &[][..], 200, 800, 0, 0, 800_000),
            (W2, true, &[][..], 0, 1000, 0, 0, 1_000_000),
        ]
    };
    let decisions: Vec<_> = requests
        .iter()
        .map(|r| (*r, Some(W1), "hit", rows()))
        .collect();
    hand_receipt("cache_plus_load", &decisions)
}

fn one_record(extra: &str) -> Value {
    let doc = joined(
        &fleet_receipt(&["q"]),
        &[dynamo("q", extra)],
        "dynamo",
        "cache_plus_load",
        None,
    );
    assert_identity(&doc["attribution"]);
    doc["attribution"].clone()
}

/// Served on W0 (reuse 600 > predicted 200), cached 500: elsewhere_gained 400, phantom
/// 100: 400 + 400 − 400 + 100 = 500 = 1000 − 500.
#[test]
fn served_elsewhere_with_more_reuse() {
    let got = one_record(r#","cached_tokens":500,"worker":{"prefill_worker_id":0}"#);
    let expected = attribution(
        json!({"attributed": 1, "served_elsewhere": 1, "prompt_tokens": 1000,
               "cached_tokens": 500, "lost_tokens": 500, "workload": 400,
               "routing_paid_for_load": 400, "elsewhere_gained": 400, "phantom": 100,
               "drifted": 1, "drift_pm": 1000, "elsewhere_pm": 1000}),
        json!([{"worker": W0, "attributed": 1, "phantom": 100, "missed": 0,
                "drifted": 1, "drift_pm": 1000}]),
    );
    assert_eq!(got, expected);
}

/// Served on W2 (reuse 0 < predicted 200), cached 0: elsewhere_lost 200, no drift:
/// 400 + 400 + 200 = 1000.
#[test]
fn served_elsewhere_with_less_reuse() {
    let got =
        one_record(r#","cached_tokens":0,"worker":{"prefill_worker_id":2,"prefill_dp_rank":null}"#);
    let expected = attribution(
        json!({"attributed": 1, "served_elsewhere": 1, "prompt_tokens": 1000,
               "lost_tokens": 1000, "workload": 400, "routing_paid_for_load": 400,
               "elsewhere_lost": 200, "elsewhere_pm": 1000}),
        json!([{"worker": W2, "attributed": 1, "phantom": 0, "missed": 0,
                "drifted": 0, "drift_pm": 0}]),
    );
    assert_eq!(got, expected);
}

/// Served on the chosen worker, named: neither elsewhere nor unknown; cached 300 > 200
/// predicted: missed 100: 400 + 400 − 100 = 700.
#[test]
fn served_where_routed() {
    let got =
        one_record(r#","cached_tokens":300,"worker":{"prefill_worker_id":1,"prefill_dp_rank":0}"#);
    let expected = attribution(
        json!({"attributed": 1, "prompt_tokens": 1000, "cached_tokens": 300,
               "lost_tokens": 700, "workload": 400, "routing_paid_for_load": 400,
               "missed": 100, "drifted": 1, "drift_pm": 1000}),
        json!([{"worker": W1, "attributed": 1, "phantom": 0, "missed": 100,
                "drifted": 1, "drift_pm": 1000}]),
    );
    assert_eq!(got, expected);
}

/// A rank other than the row's: `dynamo|1|dp3` is outside the fleet (served_reuse 0):
/// elsewhere_lost 200, missed 100 (cached 100): 400 + 400 + 200 − 100 = 900.
#[test]
fn served_outside_the_fleet_by_rank() {
    let got =
        one_record(r#","cached_tokens":100,"worker":{"prefill_worker_id":1,"prefill_dp_rank":3}"#);
    let expected = attribution(
        json!({"attributed": 1, "served_outside_fleet": 1, "prompt_tokens": 1000,
               "cached_tokens": 100, "lost_tokens": 900, "workload": 400,
               "routing_paid_for_load": 400, "elsewhere_lost": 200, "missed": 100,
               "drifted": 1, "drift_pm": 1000, "elsewhere_pm": 1000}),
        json!([]),
    );
    assert_eq!(got, expected);
}

/// Cached 1500 above prompt 1000: cached 1000, cached_over_prompt; no worker: the
/// chosen row serves (reuse 200): missed 800: 400 + 400 − 800 = 0.
#[test]
fn cached_above_prompt() {
    let got = one_record(r#","cached_tokens":1500"#);
    let expected = attribution(
        json!({"attributed": 1, "cached_over_prompt": 1, "served_unknown": 1,
               "prompt_tokens": 1000, "cached_tokens": 1000, "workload": 400,
               "routing_paid_for_load": 400, "missed": 800, "drifted": 1,
               "drift_pm": 1000}),
        json!([{"worker": W1, "attributed": 1, "phantom": 0, "missed": 800,
                "drifted": 1, "drift_pm": 1000}]),
    );
    assert_eq!(got, expected);
}

/// A serving worker but no cached figure: written, unknown 1, every other figure 0.
#[test]
fn a_worker_without_a_cached_figure() {
    let got = one_record(r#","cached_tokens":null,"worker":{"prefill_worker_id":0}"#);
    assert_eq!(got, attribution(json!({"unknown": 1}), json!([])));
}

/// No record of the run carries a figure: no `attribution` member, and the document is
/// the one a join of the same records without the members' `null`s writes.
#[test]
fn no_figure_no_member() {
    let receipt = fleet_receipt(&["q"]);
    let plain = join_bytes(&receipt, &[dynamo("q", "")], "dynamo", "cache_plus_load");
    let nulls = join_bytes(
        &receipt,
        &[dynamo("q", r#","cached_tokens":null,"worker":null"#)],
        "dynamo",
        "cache_plus_load",
    );
    assert_eq!(plain, nulls);
    let doc: Value = serde_json::from_slice(&plain).unwrap();
    assert!(doc.get("attribution").is_none(), "{doc}");
    let doc = joined(
        &receipt,
        &[aiperf("q", None)],
        "aiperf",
        "cache_plus_load",
        None,
    );
    assert!(doc.get("attribution").is_none(), "{doc}");
    // Only an id's record (its first line) counts: a retry's figure is not read.
    let retried = joined(
        &receipt,
        &[dynamo("q", ""), dynamo("q", r#","cached_tokens":5"#)],
        "dynamo",
        "cache_plus_load",
        None,
    );
    assert_eq!(retried["counts"]["retried"], 1);
    assert!(retried.get("attribution").is_none(), "{retried}");
    // A worker object with only the rank names no serving worker.
    let rank_only = join_bytes(
        &receipt,
        &[dynamo("q", r#","worker":{"prefill_dp_rank":1}"#)],
        "dynamo",
        "cache_plus_load",
    );
    assert_eq!(plain, rank_only);
}

/// Rejected and not-completed records are not attributed. A rejected decision's record
/// (rejected_served) is not matched, so it alone writes no member; a matched record
/// that did not complete (no ttft_ms) writes the member, with nothing attributed.
#[test]
fn rejected_and_not_completed_records() {
    let rows = vec![(W0, false, &["model_not_served"][..], 0, 1000, 0, 0, 0)];
    let receipt = hand_receipt("cache_plus_load", &[("x", None, "rejected", rows)]);
    let doc = joined(
        &receipt,
        &[aiperf("x", Some(5))],
        "aiperf",
        "cache_plus_load",
        None,
    );
    assert_eq!(doc["counts"]["rejected_served"], 1);
    assert!(doc.get("attribution").is_none(), "{doc}");

    let receipt = fleet_receipt(&["q", "p"]);
    let dropped_stream = r#"{"event_type":"request_end","request":{"request_id":"q","cached_tokens":7,"worker":{"prefill_worker_id":0}}}"#;
    let doc = joined(
        &receipt,
        &[dropped_stream.to_owned()],
        "dynamo",
        "cache_plus_load",
        None,
    );
    assert_eq!(doc["counts"]["matched"], 1);
    assert_eq!(doc["counts"]["completed"], 0);
    assert_eq!(doc["attribution"], attribution(json!({}), json!([])));
}

/// Several records in one run: the sums and the counts add up, and so does the
/// identity; `unknown` counts the completed record without a figure.
#[test]
fn sums_over_several_records() {
    let receipt = fleet_receipt(&["a", "b", "c", "d"]);
    let lines = [
        dynamo(
            "a",
            r#","cached_tokens":500,"worker":{"prefill_worker_id":0}"#,
        ),
        dynamo(
            "b",
            r#","cached_tokens":0,"worker":{"prefill_worker_id":2}"#,
        ),
        dynamo("c", r#","cached_tokens":1500"#),
        dynamo("d", ""),
    ];
    let doc = joined(&receipt, &lines, "dynamo", "cache_plus_load", None);
    let a = &doc["attribution"];
    assert_identity(a);
    let expected = attribution(
        json!({"attributed": 3, "unknown": 1, "cached_over_prompt": 1,
               "served_elsewhere": 2, "served_unknown": 1, "prompt_tokens": 3000,
               "cached_tokens": 1500, "lost_tokens": 1500, "workload": 1200,
               "routing_paid_for_load": 1200, "elsewhere_lost": 200,
               "elsewhere_gained": 400, "phantom": 100, "missed": 800, "drifted": 2,
               "drift_pm": 666, "elsewhere_pm": 666}),
        json!([
            {"worker": W0, "attributed": 1, "phantom": 100, "missed": 0, "drifted": 1, "drift_pm": 1000},
            {"worker": W1, "attributed": 1, "phantom": 0, "missed": 800, "drifted": 1, "drift_pm": 1000},
            {"worker": W2, "attributed": 1, "phantom": 0, "missed": 0, "drifted": 0, "drift_pm": 0},
        ]),
    );
    assert_eq!(*a, expected);
}

// ---------------------------------------------------------------------------------
// The trade for load, policy by policy (AIPerf records, cached = predicted: no drift)

/// The routing parts of one decision: prompt 1000, holder `w1` reuse 600 with the given
/// scores, chosen `w0` reuse 200 with its own, under `policy` and `route_kind`.
fn routing(
    policy: &str,
    kind: &str,
    chosen: (u64, u64, u64),
    holder: (u64, u64, u64),
    reasons: &[&str],
) -> Value {
    let rows = vec![
        ("w0", true, reasons, 200, 800, chosen.0, chosen.1, chosen.2),
        ("w1", true, reasons, 600, 400, holder.0, holder.1, holder.2),
    ];
    let receipt = hand_receipt(policy, &[("q", Some("w0"), kind, rows)]);
    let doc = joined(&receipt, &[aiperf("q", Some(200))], "aiperf", policy, None);
    let a = doc["attribution"].clone();
    assert_identity(&a);
    assert_eq!(n(&a, "workload"), 400);
    assert_eq!(
        n(&a, "routing_paid_for_load") + n(&a, "routing_other"),
        400 * i128::from(policy != "longest_prefix")
    );
    a
}

#[test]
fn least_load_trades_for_load_on_work_milli() {
    // work_milli 100 below the holder's 5000 (its cost is higher: cost is not read).
    let a = routing("least_load", "hit", (100, 0, 9_000_000), (5000, 0, 1), &[]);
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (400, 0)
    );
    // Equal work_milli: chosen by id, not for load.
    let a = routing("least_load", "hit", (5000, 0, 0), (5000, 0, 0), &[]);
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (0, 400)
    );
}

#[test]
fn cache_plus_load_trades_on_cost_and_a_tie_is_other() {
    let a = routing(
        "cache_plus_load",
        "hit",
        (9_000_000, 0, 700_000),
        (0, 0, 900_000),
        &[],
    );
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (400, 0)
    );
    let a = routing(
        "cache_plus_load",
        "hit",
        (0, 0, 900_000),
        (0, 0, 900_000),
        &[],
    );
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (0, 400)
    );
}

#[test]
fn round_robin_is_always_other_and_longest_prefix_never_trades() {
    let a = routing("round_robin", "hit", (0, 0, 0), (5000, 5000, 5000), &[]);
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (0, 400)
    );
    // longest_prefix: its chosen row holds best_choosable.
    let rows = vec![
        ("w0", true, &[][..], 600, 400, 9000, 9000, 9000),
        ("w1", true, &[][..], 200, 800, 0, 0, 0),
    ];
    let receipt = hand_receipt("longest_prefix", &[("q", Some("w0"), "hit", rows)]);
    let doc = joined(
        &receipt,
        &[aiperf("q", Some(600))],
        "aiperf",
        "longest_prefix",
        None,
    );
    assert_eq!(
        doc["attribution"],
        attribution(
            json!({"attributed": 1, "served_unknown": 1, "prompt_tokens": 1000,
               "cached_tokens": 600, "lost_tokens": 400, "workload": 400}),
            json!([{"worker": "w0", "attributed": 1, "phantom": 0, "missed": 0, "drifted": 0, "drift_pm": 0}]),
        )
    );
}

/// An overload escape scores by `after_milli`: chosen after 100 below the holder's 500
/// (its cost, higher than the holder's, would say otherwise). Every eligible row is
/// overloaded, so every eligible row is choosable and boundary is 0.
#[test]
fn overload_escape_trades_on_after_milli() {
    let a = routing(
        "cache_plus_load",
        "overload_escape",
        (0, 100, 2_000_000),
        (0, 500, 100),
        &["overloaded"],
    );
    assert_eq!(
        (
            n(&a, "routing_paid_for_load"),
            n(&a, "routing_other"),
            n(&a, "boundary")
        ),
        (400, 0, 0)
    );
    let a = routing(
        "cache_plus_load",
        "overload_escape",
        (0, 500, 100),
        (0, 100, 2_000_000),
        &["overloaded"],
    );
    assert_eq!(
        (n(&a, "routing_paid_for_load"), n(&a, "routing_other")),
        (0, 400)
    );
}

/// The run's limits: W overloaded (reuse 600) and a cold_reserve row (reuse 400) leave
/// only the chosen row (reuse 200) in the first stage: boundary 400, no routing part.
/// Without the unreserved row, the reserved row comes back (second stage).
#[test]
fn boundary_in_both_stages() {
    let rows = vec![
        ("a", true, &["overloaded"][..], 600, 400, 0, 0, 0),
        ("b", true, &["cold_reserve"][..], 400, 600, 0, 0, 0),
        ("c", true, &[][..], 200, 800, 0, 0, 5),
        ("d", false, &["model_not_served"][..], 0, 1000, 0, 0, 0),
    ];
    let receipt = hand_receipt("cache_plus_load", &[("q", Some("c"), "hit", rows)]);
    let doc = joined(
        &receipt,
        &[aiperf("q", Some(200))],
        "aiperf",
        "cache_plus_load",
        None,
    );
    let a = &doc["attribution"];
    assert_identity(a);
    assert_eq!(
        (n(a, "workload"), n(a, "boundary"), n(a, "routing_other")),
        (400, 400, 0)
    );
    assert_eq!(n(a, "routing_paid_for_load"), 0);

    let rows = vec![
        ("a", true, &["overloaded"][..], 600, 400, 0, 0, 0),
        ("b", true, &["cold_reserve"][..], 400, 600, 0, 0, 9),
        ("c", true, &["cold_reserve"][..], 200, 800, 0, 0, 5),
    ];
    let receipt = hand_receipt("cache_plus_load", &[("q", Some("c"), "hit", rows)]);
    let doc = joined(
        &receipt,
        &[aiperf("q", Some(200))],
        "aiperf",
        "cache_plus_load",
        None,
    );
    let a = &doc["attribution"];
    assert_identity(a);
    // best_choosable 400 (b, back in the second stage): boundary 200; c's cost 5 is below
    // b's 9: paid for load 200.
    assert_eq!(
        (
            n(a, "workload"),
            n(a, "boundary"),
            n(a, "routing_paid_for_load")
        ),
        (400, 200, 200)
    );
    // In least_load neither reason narrows the choice: best_choosable 600.
    let rows = vec![
        ("a", true, &["overloaded"][..], 600, 400, 9, 0, 0),
        ("c", true, &[][..], 200, 800, 5, 0, 0),
    ];
    let receipt = hand_receipt("least_load", &[("q", Some("c"), "hit", rows)]);
    let doc = joined(
        &receipt,
        &[aiperf("q", Some(200))],
        "aiperf",
        "least_load",
        None,
    );
    let a = &doc["attribution"];
    assert_eq!((n(a, "boundary"), n(a, "routing_paid_for_load")), (0, 400));
}

/// `hidden`: workload above 0 and an eligible row with one of the five reasons; not
/// when workload is 0, nor when the reason is on an ineligible row.
#[test]
fn hidden_counts_refused_evidence() {
    for (reason, eligible, prompt_rest, expected) in [
        ("stale_view", true, 400, 1),
        ("evidence_gap", true, 400, 1),
        ("model_mismatch", true, 400, 1),
        ("adapter_mismatch", true, 400, 1),
        ("tenant_mismatch", false, 400, 0),
        ("stale_view", true, 0, 0),
        ("overloaded", true, 400, 0),
    ] {
        let reasons = [reason];
        let rows = vec![
            ("a", true, &[][..], 600, prompt_rest, 0, 0, 0),
            ("b", eligible, &reasons[..], 0, 600 + prompt_rest, 0, 0, 0),
        ];
        let receipt = hand_receipt("least_load", &[("q", Some("a"), "hit", rows)]);
        let doc = joined(
            &receipt,
            &[aiperf("q", Some(600))],
            "aiperf",
            "least_load",
            None,
        );
        let a = &doc["attribution"];
        assert_identity(a);
        assert_eq!(n(a, "workload"), i128::from(prompt_rest));
        assert_eq!(
            n(a, "hidden"),
            expected,
            "{reason} {eligible} {prompt_rest}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Cohorts

/// §8's trace plus r2 (tenant beta, prefix k0 512, prompt 600) at tick 2: in
/// cache_plus_load r1 goes to w0 as in §8; each cohort has its own attribution, and the
/// cohorts' sums are the run's.
#[test]
fn each_cohort_has_its_own_attribution() {
    let r2 = json!({
        "seq": 2, "tick": 2, "type": "request", "id": "r2",
        "tenant": "beta", "model": "m1", "adapter": "base",
        "prefix": [{ "key": "k0", "tokens": 512 }],
        "prompt_tokens": 600, "decode_tokens": 10,
    });
    let trace = section8_trace(None, None, &[r2]);
    let receipt = replay(&trace).unwrap();
    let lines = [
        dynamo("r1", r#","cached_tokens":512"#),
        dynamo("r2", r#","cached_tokens":512"#),
    ];
    let doc = joined(&receipt, &lines, "dynamo", "cache_plus_load", Some(&trace));
    let run = &doc["attribution"];
    assert_identity(run);
    let cohorts = doc["cohorts"].as_array().unwrap();
    assert_eq!(cohorts.len(), 2);
    assert_eq!(cohorts[0]["tenant"], "acme");
    // acme: the worked example's second bullet.
    assert_eq!(
        cohorts[0]["attribution"],
        attribution(
            json!({"attributed": 1, "served_unknown": 1, "prompt_tokens": 1200,
               "cached_tokens": 512, "lost_tokens": 688, "workload": 176, "phantom": 512,
               "hidden": 1, "drifted": 1, "drift_pm": 1000}),
            json!([{"worker": "w0", "attributed": 1, "phantom": 512, "missed": 0,
                "drifted": 1, "drift_pm": 1000}]),
        )
    );
    for cohort in cohorts {
        assert_identity(&cohort["attribution"]);
    }
    for figure in [
        "attributed",
        "prompt_tokens",
        "cached_tokens",
        "workload",
        "phantom",
        "missed",
        "drifted",
    ] {
        let total: i128 = cohorts.iter().map(|c| n(&c["attribution"], figure)).sum();
        assert_eq!(total, n(run, figure), "{figure}");
    }
    assert_eq!(n(run, "attributed"), 2);
}

/// Without any figure in the run, no cohort has the member either.
#[test]
fn no_cohort_attribution_without_figures() {
    let trace = section8_trace(None, None, &[]);
    let receipt = replay(&trace).unwrap();
    let doc = joined(
        &receipt,
        &[dynamo("r1", "")],
        "dynamo",
        "cache_plus_load",
        Some(&trace),
    );
    assert!(doc.get("attribution").is_none());
    assert!(doc["cohorts"][0].get("attribution").is_none(), "{doc}");
}

// ---------------------------------------------------------------------------------
// The readers' errors (§14.5)

fn line_errors(format: &str, line: &str) -> Vec<String> {
    let receipt = fleet_receipt(&["q"]);
    let completions = format!("{line}\n");
    match join_inputs(&JoinInputs {
        receipt: &receipt,
        completions: completions.as_bytes(),
        format: Some(format),
        run: "cache_plus_load",
        slo: None,
        id_key: None,
        trace: None,
    }) {
        Err(JoinFailure::Lines(lines)) => lines.into_iter().map(|(_, reason)| reason).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn aiperf_cache_read_tokens_errors() {
    let with = |usage: &str| {
        format!(
            r#"{{"metadata":{{"x_request_id":"q","request_start_ns":0}},"metrics":{{"usage_prompt_cache_read_tokens":{usage}}}}}"#
        )
    };
    let path = "metrics.usage_prompt_cache_read_tokens";
    for (value, found) in [
        ("1.5", "1.5"),
        ("-1", "-1"),
        ("9007199254740992", "9007199254740992"),
        ("\"3\"", "\"3\""),
        ("1e2", "1e2"),
        ("-0", "-0"),
    ] {
        assert_eq!(
            line_errors(
                "aiperf",
                &with(&format!(r#"{{"value":{value},"unit":"tokens"}}"#))
            ),
            [format!(
                "{path}.value: expected a non-negative integer, found {found}"
            )]
        );
    }
    assert_eq!(
        line_errors("aiperf", &with(r#"{"value":3,"unit":"ms"}"#)),
        [format!(r#"{path}.unit: expected "tokens", found "ms""#)]
    );
    assert_eq!(
        line_errors("aiperf", &with("null")),
        [format!("{path}: expected an object, found null")]
    );
    assert_eq!(
        line_errors("aiperf", &with("{}")),
        [
            format!(r#"{path}: missing required member "value""#),
            format!(r#"{path}: missing required member "unit""#),
        ]
    );
    // After the two durations, before error; value before unit, each then its repeats.
    let line = r#"{"metadata":{"x_request_id":"q","request_start_ns":0},"metrics":{"usage_prompt_cache_read_tokens":{"unit":1,"value":-2,"value":3},"time_to_first_token":5},"error":3}"#;
    assert_eq!(
        line_errors("aiperf", line),
        [
            "metrics.time_to_first_token: expected an object, found 5".to_owned(),
            format!("{path}.value: expected a non-negative integer, found -2"),
            format!(r#"{path}.value: repeated member "value""#),
            format!("{path}.unit: expected \"tokens\", found 1"),
            "error: expected an object or null, found 3".to_owned(),
        ]
    );
    // The figure B itself is read.
    let ok = with(r#"{"value":9007199254740991,"unit":"tokens"}"#);
    let doc = joined(
        &fleet_receipt(&["q"]),
        &[ok],
        "aiperf",
        "cache_plus_load",
        None,
    );
    assert_eq!(doc["counts"]["matched"], 1);
    assert!(doc.get("attribution").is_some());
}

#[test]
fn dynamo_cached_tokens_and_worker_errors() {
    let with = |extra: &str| dynamo("q", extra);
    let p = "request";
    for (value, found) in [
        ("1.5", "1.5"),
        ("-1", "-1"),
        ("9007199254740992", "9007199254740992"),
        ("\"3\"", "\"3\""),
    ] {
        assert_eq!(
            line_errors("dynamo", &with(&format!(r#","cached_tokens":{value}"#))),
            [format!(
                "{p}.cached_tokens: expected a non-negative integer or null, found {found}"
            )]
        );
    }
    assert_eq!(
        line_errors("dynamo", &with(r#","worker":[]"#)),
        [format!("{p}.worker: expected an object or null, found []")]
    );
    assert_eq!(
        line_errors("dynamo", &with(r#","worker":{"prefill_worker_id":18446744073709551616,"prefill_dp_rank":4294967296}"#)),
        [
            format!("{p}.worker.prefill_worker_id: expected an integer from 0 to 18446744073709551615 or null, found 18446744073709551616"),
            format!("{p}.worker.prefill_dp_rank: expected an integer from 0 to 4294967295 or null, found 4294967296"),
        ]
    );
    // In the table's order, each with its repeats; wrapped paths start with `event.`.
    let line = r#"{"event":{"event_type":"request_end","request":{"worker":{"prefill_dp_rank":-1,"prefill_worker_id":"7"},"cached_tokens":-3,"request_id":"q","worker":null,"cached_tokens":1}}}"#;
    assert_eq!(
        line_errors("dynamo", line),
        [
            "event.request.cached_tokens: expected a non-negative integer or null, found -3",
            "event.request.cached_tokens: repeated member \"cached_tokens\"",
            "event.request.worker: repeated member \"worker\"",
            "event.request.worker.prefill_worker_id: expected an integer from 0 to 18446744073709551615 or null, found \"7\"",
            "event.request.worker.prefill_dp_rank: expected an integer from 0 to 4294967295 or null, found -1",
        ]
    );
    // The largest of each is read.
    let top = with(
        r#","cached_tokens":0,"worker":{"prefill_worker_id":18446744073709551615,"prefill_dp_rank":4294967295,"decode_worker_id":"x"}"#,
    );
    let doc = joined(
        &fleet_receipt(&["q"]),
        &[top],
        "dynamo",
        "cache_plus_load",
        None,
    );
    assert_eq!(n(&doc["attribution"], "served_outside_fleet"), 1);
}

// ---------------------------------------------------------------------------------
// The gate

#[test]
fn gate_lines_in_order() {
    let r2 = json!({
        "seq": 2, "tick": 2, "type": "request", "id": "r2",
        "tenant": "beta", "model": "m1", "adapter": "base",
        "prefix": [{ "key": "k0", "tokens": 512 }],
        "prompt_tokens": 600, "decode_tokens": 10,
    });
    let trace = section8_trace(None, None, &[r2]);
    let receipt = replay(&trace).unwrap();
    // r1 drifts (phantom 512, on w0) and runs outside the fleet... no: r1 has no worker;
    // r2 is served outside the fleet with the figure it was predicted.
    let lines = [
        dynamo("r1", r#","cached_tokens":512"#),
        dynamo(
            "r2",
            r#","cached_tokens":0,"worker":{"prefill_worker_id":9}"#,
        ),
    ];
    let completions = lines.join("\n") + "\n";
    let document = join_inputs(&JoinInputs {
        receipt: &receipt,
        completions: completions.as_bytes(),
        format: Some("dynamo"),
        run: "cache_plus_load",
        slo: None,
        id_key: None,
        trace: Some(&trace),
    })
    .unwrap();
    let doc: Value = serde_json::from_slice(&document).unwrap();
    let run = &doc["attribution"];
    // r1: phantom, drift; r2: served outside the fleet with served_reuse 0, cached 0:
    // no drift.
    assert_eq!(
        (
            n(run, "attributed"),
            n(run, "drifted"),
            n(run, "drift_pm"),
            n(run, "elsewhere_pm")
        ),
        (2, 1, 500, 500)
    );
    assert_eq!(
        gate_lines(&document, Some(499), Some(499)),
        [
            "kvroute join: drift 500‰ of 2 attributed records is above --max-drift-pm 499 (run cache_plus_load)",
            "kvroute join: drift 1000‰ of 1 attributed records is above --max-drift-pm 499 (cohort \"acme\" \"m1\" \"base\")",
            "kvroute join: drift 1000‰ of 1 attributed records is above --max-drift-pm 499 (worker \"w0\")",
            "kvroute join: served elsewhere 500‰ of 2 attributed records is above --max-elsewhere-pm 499 (run cache_plus_load)",
            "kvroute join: served elsewhere 1000‰ of 1 attributed records is above --max-elsewhere-pm 499 (cohort \"beta\" \"m1\" \"base\")",
        ]
    );
    // At the figure: not above.
    assert_eq!(
        gate_lines(&document, Some(1000), Some(1000)),
        Vec::<String>::new()
    );
    assert_eq!(
        gate_lines(&document, None, Some(500)),
        ["kvroute join: served elsewhere 1000‰ of 1 attributed records is above --max-elsewhere-pm 500 (cohort \"beta\" \"m1\" \"base\")"]
    );
    assert_eq!(gate_lines(&document, None, None), Vec::<String>::new());
}

#[test]
fn gate_cannot_be_judged_without_attributed_records() {
    let receipt = fleet_receipt(&["q"]);
    let drift = "kvroute join: --max-drift-pm: no completed record carries cached tokens, so drift cannot be judged";
    let elsewhere = "kvroute join: --max-elsewhere-pm: no completed record carries cached tokens, so served elsewhere cannot be judged";
    // No member at all, and a member with nothing attributed.
    for extra in ["", r#","worker":{"prefill_worker_id":0}"#] {
        let mut document = join_bytes(&receipt, &[dynamo("q", extra)], "dynamo", "cache_plus_load");
        document.push(b'\n');
        assert_eq!(
            gate_lines(&document, Some(0), Some(1000)),
            [drift, elsewhere]
        );
        assert_eq!(gate_lines(&document, None, Some(0)), [elsewhere]);
        assert_eq!(gate_lines(&document, None, None), Vec::<String>::new());
    }
}
