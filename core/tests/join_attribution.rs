//! SPEC.md §14.7: why a request missed the cache. The worked example on §8's trace,
//! the parts' identity on hand-built receipts (one decision each, every policy's trade
//! for load), a doctored run of the lab trace, and the readers' new members.

use kvroute_core::join::{self, join, CompletionsFormat, Join, JoinError, JoinOptions};
use kvroute_core::join::{gate_lines, Gates};
use kvroute_core::join::{Attribution, WorkerDrift};
use kvroute_core::{replay_bytes, Policy, LAB_TRACE_JSON};
use serde_json::{json, Value};

const SPEC_TRACE: &str = include_str!("../../fixtures/spec_example/trace.json");

fn options(run: Policy) -> JoinOptions {
    JoinOptions {
        run: Some(run),
        ..JoinOptions::default()
    }
}

fn joined(receipt: &[u8], completions: &str, run: Policy) -> Join {
    join(receipt, completions.as_bytes(), &options(run)).expect("the join succeeds")
}

fn attribution(receipt: &[u8], completions: &str, run: Policy) -> Attribution {
    let joined = joined(receipt, completions, run);
    let attribution = joined.figures.attribution.expect("attribution is written");
    assert_adds_up(&attribution);
    attribution
}

/// `lost = workload + boundary + routing + elsewhere_lost − elsewhere_gained + phantom
/// − missed`, over the sums as over each record.
fn assert_adds_up(a: &Attribution) {
    assert_eq!(a.lost_tokens, a.prompt_tokens - a.cached_tokens, "{a:?}");
    let parts = a.workload
        + a.boundary
        + a.routing_paid_for_load
        + a.routing_other
        + a.elsewhere_lost
        + a.phantom;
    assert_eq!(
        a.lost_tokens + a.elsewhere_gained + a.missed,
        parts,
        "{a:?}"
    );
}

/// An AIPerf record of `id`, completed, with its cached tokens when given.
fn aiperf_line(id: &str, cached: Option<u64>) -> String {
    let mut metrics = json!({
        "time_to_first_token": {"value": 10, "unit": "ms"},
        "inter_token_latency": {"value": 1, "unit": "ms"},
    });
    if let Some(cached) = cached {
        metrics["usage_prompt_cache_read_tokens"] = json!({"value": cached, "unit": "tokens"});
    }
    json!({"metadata": {"x_request_id": id, "request_start_ns": 1}, "metrics": metrics}).to_string()
        + "\n"
}

/// A Dynamo `request_end` of `id`, completed, with its cached tokens and prefill worker
/// when given.
fn dynamo_line(id: &str, cached: Option<u64>, prefill_worker_id: Option<u64>) -> String {
    let mut request = json!({"request_id": "cmpl", "x_request_id": id, "ttft_ms": 10,
                             "avg_itl_ms": 1});
    if let Some(cached) = cached {
        request["cached_tokens"] = json!(cached);
    }
    if let Some(worker) = prefill_worker_id {
        request["worker"] = json!({"prefill_worker_id": worker, "decode_worker_id": 3});
    }
    json!({"event_type": "request_end", "request": request}).to_string() + "\n"
}

fn spec_receipt(policy_members: Value) -> Vec<u8> {
    let mut trace: Value = serde_json::from_str(SPEC_TRACE).unwrap();
    for (name, value) in policy_members.as_object().unwrap() {
        trace["policy"][name] = value.clone();
    }
    replay_bytes(trace.to_string().as_bytes()).expect("the trace is valid")
}

fn drift(worker: &str, figures: [u64; 5]) -> WorkerDrift {
    let [attributed, phantom, missed, drifted, drift_pm] = figures;
    WorkerDrift {
        worker: worker.to_owned(),
        attributed,
        phantom: u128::from(phantom),
        missed: u128::from(missed),
        drifted,
        drift_pm,
    }
}

#[test]
fn the_worked_example_least_load_paid_for_load() {
    let receipt = spec_receipt(json!({}));
    let a = attribution(&receipt, &aiperf_line("r1", Some(0)), Policy::LeastLoad);
    assert_eq!(
        a,
        Attribution {
            attributed: 1,
            served_unknown: 1,
            prompt_tokens: 1200,
            lost_tokens: 1200,
            workload: 176,
            routing_paid_for_load: 1024,
            hidden: 1,
            workers: vec![drift("w1", [1, 0, 0, 0, 0])],
            ..Attribution::default()
        }
    );
}

#[test]
fn the_worked_example_cache_plus_load_phantom_and_outside_the_fleet() {
    let receipt = spec_receipt(json!({}));
    let a = attribution(
        &receipt,
        &dynamo_line("r1", Some(512), None),
        Policy::CachePlusLoad,
    );
    assert_eq!(
        a,
        Attribution {
            attributed: 1,
            served_unknown: 1,
            prompt_tokens: 1200,
            cached_tokens: 512,
            lost_tokens: 688,
            workload: 176,
            phantom: 512,
            hidden: 1,
            drifted: 1,
            drift_pm: 1000,
            workers: vec![drift("w0", [1, 512, 0, 1, 1000])],
            ..Attribution::default()
        }
    );
    let document = join::json_bytes(&joined(
        &receipt,
        &dynamo_line("r1", Some(512), None),
        Policy::CachePlusLoad,
    ));
    let document = String::from_utf8(document).unwrap();
    assert!(
        document.contains(
            r#""workers":[{"attributed":1,"drift_pm":1000,"drifted":1,"missed":0,"phantom":512,"worker":"w0"}]"#
        ),
        "{document}"
    );

    let a = attribution(
        &receipt,
        &dynamo_line("r1", Some(512), Some(7)),
        Policy::CachePlusLoad,
    );
    assert_eq!(
        a,
        Attribution {
            attributed: 1,
            served_outside_fleet: 1,
            prompt_tokens: 1200,
            cached_tokens: 512,
            lost_tokens: 688,
            workload: 176,
            elsewhere_lost: 1024,
            missed: 512,
            hidden: 1,
            drifted: 1,
            drift_pm: 1000,
            elsewhere_pm: 1000,
            workers: vec![],
            ..Attribution::default()
        }
    );
}

#[test]
fn the_worked_example_cold_reserve_is_boundary() {
    let receipt = spec_receipt(json!({"max_queued_work": 1300, "cold_reserve_milli": 50000}));
    let a = attribution(&receipt, &aiperf_line("r1", Some(0)), Policy::CachePlusLoad);
    assert_eq!(
        a,
        Attribution {
            attributed: 1,
            served_unknown: 1,
            prompt_tokens: 1200,
            lost_tokens: 1200,
            workload: 176,
            boundary: 1024,
            hidden: 1,
            workers: vec![drift("w1", [1, 0, 0, 0, 0])],
            ..Attribution::default()
        }
    );
}

#[test]
fn records_without_cached_tokens_or_a_worker_leave_the_document_as_it_was() {
    let receipt = spec_receipt(json!({}));
    let joined = joined(&receipt, &aiperf_line("r1", None), Policy::LeastLoad);
    assert_eq!(joined.figures.attribution, None);
    let document = String::from_utf8(join::json_bytes(&joined)).unwrap();
    assert!(!document.contains("attribution"), "{document}");
    let table = join::table(&joined, &|s| s.to_owned());
    assert!(!table.contains("attribution"), "{table}");
    // Without anything attributed a gate cannot be judged.
    assert_eq!(
        gate_lines(
            &joined,
            Gates {
                max_drift_pm: Some(0),
                max_elsewhere_pm: Some(0)
            }
        ),
        vec![
            "kvroute join: --max-drift-pm: no completed record carries cached tokens, so \
             drift cannot be judged"
                .to_owned(),
            "kvroute join: --max-elsewhere-pm: no completed record carries cached tokens, so \
             served elsewhere cannot be judged"
                .to_owned(),
        ]
    );
}

#[test]
fn the_table_line_and_the_gate_lines() {
    let receipt = spec_receipt(json!({}));
    let joined = joined(
        &receipt,
        &dynamo_line("r1", Some(512), None),
        Policy::CachePlusLoad,
    );
    let table = join::table(&joined, &|s| s.to_owned());
    assert!(
        table.contains(
            "attribution: attributed 1  unknown 0  lost 688 = workload 176 + boundary 0 + \
             routing 0 (paid for load) + 0 (other) + elsewhere 0 - 0 + phantom 512 - missed 0 \
             drift_pm 1000  elsewhere_pm 0\n\
             attribution worker w0: attributed 1  phantom 512  missed 0  drifted 1  drift_pm 1000\n"
        ),
        "{table}"
    );
    let gates = Gates {
        max_drift_pm: Some(999),
        max_elsewhere_pm: Some(0),
    };
    assert_eq!(
        gate_lines(&joined, gates),
        vec![
            "kvroute join: drift 1000‰ of 1 attributed records is above --max-drift-pm 999 \
             (run cache_plus_load)"
                .to_owned(),
            "kvroute join: drift 1000‰ of 1 attributed records is above --max-drift-pm 999 \
             (worker \"w0\")"
                .to_owned(),
        ]
    );
    let passing = Gates {
        max_drift_pm: Some(1000),
        max_elsewhere_pm: Some(1000),
    };
    assert!(gate_lines(&joined, passing).is_empty());
}

/// One receipt row: worker, eligible, reasons, reuse, work_milli, after_milli,
/// cost_milli; `recomputed` makes `reuse + recomputed` the prompt.
struct Row(
    &'static str,
    bool,
    &'static [&'static str],
    u64,
    u64,
    u64,
    u64,
);

const PROMPT: u64 = 1000;

/// A JSON Lines receipt (SPEC.md §6.4) whose `policy` run has one decision, of request
/// `r1`, with these rows.
fn one_decision_receipt(policy: Policy, route_kind: &str, chosen: &str, rows: &[Row]) -> Vec<u8> {
    let candidates: Vec<Value> = rows
        .iter()
        .map(|Row(worker, eligible, reasons, reuse, work, after, cost)| {
            json!({"worker": worker, "eligible": eligible, "reasons": reasons,
                   "reuse": reuse, "recomputed": PROMPT - reuse, "work_milli": work,
                   "after_milli": after, "cost_milli": cost})
        })
        .collect();
    let decision = json!({"request": "r1", "tick": 1, "chosen": chosen,
                          "route_kind": route_kind, "candidates": candidates});
    let lines = [
        r#"{"format":"kvroute-receipt-stream/1","receipt_format":"kvroute-receipt/1","trace_digest":"t"}"#
            .to_owned(),
        json!({"decisions": decision, "policy": policy.name()}).to_string(),
        json!({"metrics": {}, "policy": policy.name()}).to_string(),
        r#"{"receipt_digest":"d"}"#.to_owned(),
    ];
    (lines.join("\n") + "\n").into_bytes()
}

/// The routing parts `(paid for load, other)` of one record served where routed.
fn routing(policy: Policy, route_kind: &str, chosen: &str, rows: &[Row]) -> (u128, u128) {
    let receipt = one_decision_receipt(policy, route_kind, chosen, rows);
    let a = attribution(&receipt, &aiperf_line("r1", Some(0)), policy);
    (a.routing_paid_for_load, a.routing_other)
}

#[test]
fn the_trade_for_load_is_judged_by_each_policys_own_score() {
    use Policy::*;
    // least_load scores work_milli: a lighter worker is a trade, a tie in work is not.
    let lighter = [
        Row("a", true, &[], 800, 5000, 0, 0),
        Row("b", true, &[], 0, 1000, 0, 0),
    ];
    assert_eq!(routing(LeastLoad, "cold", "b", &lighter), (800, 0));
    let tied = [
        Row("a", true, &[], 800, 1000, 0, 0),
        Row("b", true, &[], 0, 1000, 0, 0),
    ];
    assert_eq!(routing(LeastLoad, "cold", "b", &tied), (0, 800));
    // cache_plus_load and dynamo_default score cost_milli, not work_milli.
    let cheaper = [
        Row("a", true, &[], 800, 1000, 0, 9000),
        Row("b", true, &[], 0, 5000, 0, 3000),
    ];
    assert_eq!(routing(CachePlusLoad, "cold", "b", &cheaper), (800, 0));
    assert_eq!(routing(DynamoDefault, "cold", "b", &cheaper), (800, 0));
    assert_eq!(routing(LeastLoad, "cold", "b", &cheaper), (0, 800));
    let cost_tie = [
        Row("a", true, &[], 800, 9000, 0, 3000),
        Row("b", true, &[], 0, 1000, 0, 3000),
    ];
    assert_eq!(routing(CachePlusLoad, "cold", "b", &cost_tie), (0, 800));
    // An overload escape is scored by after_milli: here the cost says the opposite.
    let escape = [
        Row("a", true, &["overloaded"], 800, 0, 5000, 1000),
        Row("b", true, &["overloaded"], 0, 0, 2000, 9000),
    ];
    assert_eq!(
        routing(CachePlusLoad, "overload_escape", "b", &escape),
        (800, 0)
    );
    assert_eq!(routing(CachePlusLoad, "cold", "b", &escape), (0, 800));
    // round_robin never looks at load; longest_prefix takes the best holder.
    assert_eq!(routing(RoundRobin, "cold", "b", &lighter), (0, 800));
    assert_eq!(routing(LongestPrefix, "hit", "a", &lighter), (0, 0));
    // The best holder is the first in byte order among the rows of the best reuse.
    let two_holders = [
        Row("a", true, &[], 800, 1000, 0, 0),
        Row("b", true, &[], 0, 2000, 0, 0),
        Row("c", true, &[], 800, 9000, 0, 0),
    ];
    assert_eq!(routing(LeastLoad, "cold", "b", &two_holders), (0, 800));
}

#[test]
fn rows_the_run_turned_away_are_boundary_and_refused_evidence_is_hidden() {
    let policy = Policy::CachePlusLoad;
    let attribute = |rows: &[Row], chosen: &str| {
        let receipt = one_decision_receipt(policy, "cold", chosen, rows);
        attribution(&receipt, &aiperf_line("r1", Some(0)), policy)
    };
    // An overloaded holder, a free cold row: the holder's reuse is boundary.
    let a = attribute(
        &[
            Row("a", true, &["overloaded"], 600, 0, 0, 0),
            Row("b", true, &[], 0, 0, 0, 0),
        ],
        "b",
    );
    assert_eq!((a.workload, a.boundary, a.hidden), (400, 600, 0));
    // Every row overloaded: every eligible row is choosable again.
    let a = attribute(
        &[
            Row("a", true, &["overloaded"], 600, 0, 0, 0),
            Row("b", true, &["overloaded"], 0, 0, 0, 0),
        ],
        "b",
    );
    assert_eq!((a.workload, a.boundary, a.routing_other), (400, 0, 600));
    // An ineligible row's reuse is no one's; a stale eligible row hides workload.
    let a = attribute(
        &[
            Row("a", false, &["model_not_served"], 900, 0, 0, 0),
            Row("b", true, &["stale_view"], 0, 0, 0, 0),
        ],
        "b",
    );
    assert_eq!((a.workload, a.boundary, a.hidden), (1000, 0, 1));
    // With no workload, refused evidence hides nothing.
    let a = attribute(
        &[
            Row("a", true, &[], 1000, 0, 0, 0),
            Row("b", true, &["evidence_gap"], 0, 0, 0, 0),
        ],
        "a",
    );
    assert_eq!((a.workload, a.hidden), (0, 0));
}

/// A fleet named as §13.7 names Dynamo's workers, so records can name where they ran.
const FLEET: [&str; 3] = ["dynamo|1|dp0", "dynamo|2|dp0", "dynamo|3|dp0"];

fn dynamo_fleet_receipt() -> Vec<u8> {
    one_decision_receipt(
        Policy::LeastLoad,
        "hit",
        FLEET[0],
        &[
            Row(FLEET[0], true, &[], 500, 0, 0, 0),
            Row(FLEET[1], true, &[], 700, 9000, 0, 0),
            Row(FLEET[2], true, &[], 0, 9000, 0, 0),
        ],
    )
}

#[test]
fn where_the_record_ran_moves_the_elsewhere_parts() {
    let receipt = dynamo_fleet_receipt();
    let served = |cached: Option<u64>, worker: Option<u64>| {
        attribution(
            &receipt,
            &dynamo_line("r1", cached, worker),
            Policy::LeastLoad,
        )
    };
    // Where it was routed, cached as predicted: only the workload and the routing.
    let a = served(Some(500), Some(1));
    assert_eq!(
        (a.served_elsewhere, a.workload, a.routing_paid_for_load),
        (0, 300, 200)
    );
    assert_eq!((a.elsewhere_lost, a.elsewhere_gained, a.drifted), (0, 0, 0));
    // On a worker that held more: a credit.
    let a = served(Some(700), Some(2));
    assert_eq!(
        (a.served_elsewhere, a.elsewhere_gained, a.elsewhere_lost),
        (1, 200, 0)
    );
    assert_eq!((a.drifted, a.elsewhere_pm), (0, 1000));
    assert_eq!(a.workers, vec![drift(FLEET[1], [1, 0, 0, 0, 0])]);
    // On a worker that held less.
    let a = served(Some(0), Some(3));
    assert_eq!(
        (a.served_elsewhere, a.elsewhere_lost, a.elsewhere_gained),
        (1, 500, 0)
    );
    // Outside the fleet: no serving row, its reuse 0.
    let a = served(Some(100), Some(9));
    assert_eq!(
        (a.served_outside_fleet, a.elsewhere_lost, a.missed),
        (1, 500, 100)
    );
    assert_eq!(a.workers, vec![]);
    // A figure above the prompt counts at the prompt.
    let a = served(Some(5000), Some(1));
    assert_eq!(
        (a.cached_over_prompt, a.cached_tokens, a.missed),
        (1, 1000, 500)
    );
    // A worker without a cached figure: written, nothing attributed.
    let a = served(None, Some(1));
    assert_eq!((a.attributed, a.unknown, a.workers.len()), (0, 1, 0));
}

#[test]
fn records_that_did_not_complete_are_not_attributed() {
    let receipt = dynamo_fleet_receipt();
    let line = r#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":3,"cached_tokens":500}}"#;
    let a = attribution(&receipt, &(line.to_owned() + "\n"), Policy::LeastLoad);
    assert_eq!(
        a,
        Attribution::default(),
        "written (a matched record has a figure), nothing counted"
    );
}

fn lab_trace_as_dynamo() -> String {
    let mut trace = LAB_TRACE_JSON.to_owned();
    for i in 0..4 {
        trace = trace.replace(&format!("\"w{i}\""), &format!("\"dynamo|{i}|dp0\""));
    }
    trace
}

/// A routed decision as the tests read it: request, chosen worker, every row's
/// `(worker, reuse)`, and the prompt.
type Routed = (String, String, Vec<(String, u64)>, u64);

/// The lab trace with its workers named as Dynamo's, so Dynamo records can name them.
fn lab_as_dynamo() -> (Vec<u8>, Vec<Routed>) {
    let trace = lab_trace_as_dynamo();
    let receipt = replay_bytes(trace.as_bytes()).expect("the renamed lab trace is valid");
    let document: Value = serde_json::from_slice(&receipt).unwrap();
    let run = &document["runs"][3];
    assert_eq!(run["policy"], "cache_plus_load");
    let decisions = run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["chosen"].is_string())
        .map(|d| {
            let rows: Vec<(String, u64)> = d["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["worker"].as_str().unwrap().to_owned(),
                        r["reuse"].as_u64().unwrap(),
                    )
                })
                .collect();
            let chosen = d["chosen"].as_str().unwrap().to_owned();
            let row = d["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["worker"] == d["chosen"])
                .unwrap();
            let prompt = row["reuse"].as_u64().unwrap() + row["recomputed"].as_u64().unwrap();
            (
                d["request"].as_str().unwrap().to_owned(),
                chosen,
                rows,
                prompt,
            )
        })
        .collect();
    (receipt, decisions)
}

fn dynamo_id(worker: &str) -> u64 {
    worker.split('|').nth(1).unwrap().parse().unwrap()
}

/// What the receipt's rows predict `worker` reuses.
fn reuse_of(rows: &[(String, u64)], worker: &str) -> u64 {
    rows.iter()
        .find(|(w, _)| w == worker)
        .map(|(_, r)| *r)
        .unwrap()
}

/// One Dynamo record a decision, its worker and cached tokens as `doctor` makes them
/// from the decision's index, chosen worker and predicted reuse.
fn doctored_lines(
    decisions: &[Routed],
    doctor: &dyn Fn(usize, &str, u64) -> (String, u64),
) -> String {
    decisions
        .iter()
        .enumerate()
        .map(|(i, (request, chosen, rows, _))| {
            let (worker, cached) = doctor(i, chosen, reuse_of(rows, chosen));
            dynamo_line(request, Some(cached), Some(dynamo_id(&worker)))
        })
        .collect()
}

/// The attribution of records that say exactly what the receipt predicted.
fn honest_attribution(receipt: &[u8], decisions: &[Routed]) -> Attribution {
    attribution(
        receipt,
        &doctored_lines(decisions, &|_, chosen, predicted| {
            (chosen.to_owned(), predicted)
        }),
        Policy::CachePlusLoad,
    )
}

#[test]
fn honest_records_are_attributed_without_drift() {
    let (receipt, decisions) = lab_as_dynamo();
    let honest = honest_attribution(&receipt, &decisions);
    assert_eq!(honest.attributed, decisions.len() as u64);
    assert_eq!((honest.drifted, honest.served_elsewhere), (0, 0));
}

#[test]
fn a_record_served_elsewhere_moves_only_the_elsewhere_counts() {
    let (receipt, decisions) = lab_as_dynamo();
    let honest = honest_attribution(&receipt, &decisions);
    // One served on another worker, cached what that worker held: elsewhere only.
    let (moved, (_, chosen, rows, _)) = decisions
        .iter()
        .enumerate()
        .find(|(_, (_, chosen, rows, _))| {
            rows.iter()
                .any(|(w, r)| w != chosen && *r != reuse_of(rows, chosen))
        })
        .expect("a decision whose rows differ");
    let (other, other_reuse) = rows
        .iter()
        .find(|(w, r)| w != chosen && *r != reuse_of(rows, chosen))
        .unwrap()
        .clone();
    let predicted = reuse_of(rows, chosen);
    let a = attribution(
        &receipt,
        &doctored_lines(&decisions, &|i, chosen, predicted| {
            if i == moved {
                (other.clone(), other_reuse)
            } else {
                (chosen.to_owned(), predicted)
            }
        }),
        Policy::CachePlusLoad,
    );
    assert_eq!((a.served_elsewhere, a.drifted), (1, 0));
    assert_eq!(
        a.elsewhere_lost + honest.elsewhere_gained,
        honest.elsewhere_lost + u128::from(predicted.saturating_sub(other_reuse))
    );
    assert_eq!(
        a.elsewhere_gained,
        honest.elsewhere_gained + u128::from(other_reuse.saturating_sub(predicted))
    );
}

#[test]
fn records_that_cached_fewer_or_more_tokens_drift_once_each() {
    let (receipt, decisions) = lab_as_dynamo();
    let honest = honest_attribution(&receipt, &decisions);
    // One with fewer cached tokens than predicted, one with more.
    let fewer = decisions
        .iter()
        .position(|(_, chosen, rows, _)| reuse_of(rows, chosen) > 0)
        .expect("a hit");
    let more = (0..decisions.len())
        .find(|&i| {
            let (_, chosen, rows, prompt) = &decisions[i];
            i != fewer && reuse_of(rows, chosen) < *prompt
        })
        .expect("another decision with something to prefill");
    let a = attribution(
        &receipt,
        &doctored_lines(&decisions, &|i, chosen, predicted| {
            let cached = match i {
                _ if i == fewer => predicted - 1,
                _ if i == more => predicted + 1,
                _ => predicted,
            };
            (chosen.to_owned(), cached)
        }),
        Policy::CachePlusLoad,
    );
    assert_eq!((a.drifted, a.phantom, a.missed), (2, 1, 1));
    assert_eq!(
        (a.served_elsewhere, a.cached_tokens),
        (0, honest.cached_tokens)
    );
    let drifting: u64 = a.workers.iter().map(|w| w.drifted).sum();
    assert_eq!(drifting, 2);
}

fn completions_error(line: &str, format: CompletionsFormat) -> Vec<String> {
    let receipt = spec_receipt(json!({}));
    let options = JoinOptions {
        format: Some(format),
        ..JoinOptions::default()
    };
    match join(&receipt[..], line.as_bytes(), &options) {
        Err(JoinError::Completions(errors)) => errors.into_iter().map(|e| e.reason).collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_cached_tokens_and_workers_are_named_in_order() {
    let aiperf = r#"{"metadata":{"x_request_id":"r1","request_start_ns":1},"metrics":{"usage_prompt_cache_read_tokens":{"value":1.5,"unit":"ms"}}}"#;
    assert_eq!(
        completions_error(aiperf, CompletionsFormat::Aiperf),
        vec![
            "metrics.usage_prompt_cache_read_tokens.value: expected a non-negative integer, \
             found 1.5",
            "metrics.usage_prompt_cache_read_tokens.unit: expected \"tokens\", found \"ms\"",
        ]
    );
    let aiperf = r#"{"metadata":{"x_request_id":"r1","request_start_ns":1},"metrics":{"usage_prompt_cache_read_tokens":{"value":9007199254740992}}}"#;
    assert_eq!(
        completions_error(aiperf, CompletionsFormat::Aiperf),
        vec![
            "metrics.usage_prompt_cache_read_tokens.value: expected a non-negative integer, \
             found 9007199254740992",
            "metrics.usage_prompt_cache_read_tokens: missing required member \"unit\"",
        ]
    );
    let dynamo = r#"{"event":{"event_type":"request_end","request":{"request_id":"c","cached_tokens":-1,"worker":{"prefill_worker_id":18446744073709551616,"prefill_dp_rank":4294967296,"prefill_dp_rank":0}}}}"#;
    assert_eq!(
        completions_error(dynamo, CompletionsFormat::Dynamo),
        vec![
            "event.request.cached_tokens: expected a non-negative integer or null, found -1",
            "event.request.worker.prefill_worker_id: expected an integer from 0 to \
             18446744073709551615 or null, found 18446744073709551616",
            "event.request.worker.prefill_dp_rank: expected an integer from 0 to 4294967295 \
             or null, found 4294967296",
            "event.request.worker.prefill_dp_rank: repeated member \"prefill_dp_rank\"",
        ]
    );
    let dynamo = r#"{"event_type":"request_end","request":{"request_id":"c","worker":[1]}}"#;
    assert_eq!(
        completions_error(dynamo, CompletionsFormat::Dynamo),
        vec!["request.worker: expected an object or null, found [1]"]
    );
}

#[test]
fn the_largest_worker_id_and_rank_name_a_worker() {
    let line = r#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":1,"avg_itl_ms":1,"worker":{"prefill_worker_id":18446744073709551615,"prefill_dp_rank":4294967295}}}"#;
    let receipt = one_decision_receipt(
        Policy::LeastLoad,
        "hit",
        "dynamo|18446744073709551615|dp4294967295",
        &[Row(
            "dynamo|18446744073709551615|dp4294967295",
            true,
            &[],
            10,
            0,
            0,
            0,
        )],
    );
    let a = attribution(&receipt, &(line.to_owned() + "\n"), Policy::LeastLoad);
    // Named and found in the fleet, but no cached figure: nothing attributed.
    assert_eq!((a.unknown, a.served_outside_fleet), (1, 0));
    let with_figure = line.replace(r#""ttft_ms":1"#, r#""ttft_ms":1,"cached_tokens":10"#);
    let a = attribution(&receipt, &(with_figure + "\n"), Policy::LeastLoad);
    assert_eq!(
        a.workers,
        vec![drift(
            "dynamo|18446744073709551615|dp4294967295",
            [1, 0, 0, 0, 0]
        )]
    );
}

#[test]
fn each_cohort_is_attributed_over_its_own_records() {
    let (receipt, decisions) = lab_as_dynamo();
    // Every record served where routed, one token short of the prediction when it had
    // one: each hit drifts.
    let completions: String = decisions
        .iter()
        .map(|(request, chosen, rows, _)| {
            let predicted = rows.iter().find(|(w, _)| w == chosen).unwrap().1;
            let cached = predicted.saturating_sub(1);
            dynamo_line(request, Some(cached), Some(dynamo_id(chosen)))
        })
        .collect();
    let trace = kvroute_core::parse_trace(lab_trace_as_dynamo().as_bytes()).unwrap();
    let options = JoinOptions {
        trace: Some(Ok(kvroute_core::join::TraceCohorts::of(&trace, None))),
        ..options(Policy::CachePlusLoad)
    };
    let joined = join(&receipt[..], completions.as_bytes(), &options).unwrap();
    let run = joined.figures.attribution.clone().unwrap();
    let cohorts = joined.figures.cohorts.clone().unwrap();
    assert!(cohorts.len() > 1);
    let of_cohorts = |f: fn(&Attribution) -> u128| -> u128 {
        cohorts
            .iter()
            .map(|c| f(c.figures.attribution.as_ref().unwrap()))
            .sum()
    };
    assert_eq!(
        of_cohorts(|a| u128::from(a.attributed)),
        u128::from(run.attributed)
    );
    assert_eq!(of_cohorts(|a| a.phantom), run.phantom);
    assert_eq!(of_cohorts(|a| a.lost_tokens), run.lost_tokens);
    assert!(run.drifted > 0);
    let lines = gate_lines(
        &joined,
        Gates {
            max_drift_pm: Some(0),
            max_elsewhere_pm: None,
        },
    );
    let cohort_lines = lines.iter().filter(|l| l.contains("(cohort \"")).count();
    let drifting_cohorts = cohorts
        .iter()
        .filter(|c| c.figures.attribution.as_ref().unwrap().drift_pm > 0)
        .count();
    assert_eq!(cohort_lines, drifting_cohorts);
    assert!(lines[0].ends_with("(run cache_plus_load)"), "{lines:?}");
    assert!(
        lines.last().unwrap().contains("(worker \"dynamo|"),
        "{lines:?}"
    );
}
