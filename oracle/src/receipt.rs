//! The receipt (`kvroute-receipt/1`, SPEC.md §6) as a JSON value, and its digest. Keys
//! and tenant names never appear here: rows name workers only.

use serde_json::{json, Value};

use crate::canonical::{digest, jcs};
use crate::replay::{Decision, Metrics, Row, Run};

fn row_value(row: &Row) -> Value {
    json!({
        "worker": row.worker,
        "eligible": row.eligible,
        "reasons": row.reasons,
        "reuse": row.reuse,
        "recomputed": row.recomputed,
        "queued_prefill": row.queued_prefill,
        "active_decode": row.active_decode,
        "work_milli": row.work_milli,
        "after_milli": row.after_milli,
        "cost_milli": row.cost_milli,
        "dominated_by": row.dominated_by,
    })
}

fn decision_value(decision: &Decision) -> Value {
    json!({
        "seq": decision.seq,
        "tick": decision.tick,
        "request": decision.request,
        "chosen": decision.chosen,
        "route_kind": decision.route_kind,
        "tie_count": decision.tie_count,
        "margin_milli": decision.margin_milli,
        "candidates": decision.candidates.iter().map(row_value).collect::<Vec<Value>>(),
    })
}

fn metrics_value(m: &Metrics) -> Value {
    json!({
        "routed": m.routed,
        "rejected": m.rejected,
        "cache_hits": m.cache_hits,
        "reused_tokens": m.reused_tokens,
        "recomputed_tokens": m.recomputed_tokens,
        "route_churn": m.route_churn,
        "load_skew_milli": m.load_skew_milli,
        "latency_proxy_mean_milli": m.latency_proxy_mean_milli,
        "latency_proxy_p95_milli": m.latency_proxy_p95_milli,
        "latency_proxy_max_milli": m.latency_proxy_max_milli,
        "stale_event_rejections": m.stale_event_rejections,
        "stale_observation_rejections": m.stale_observation_rejections,
        "boundary_rejections": m.boundary_rejections,
        "overload_escapes": m.overload_escapes,
        "dominated_choices": m.dominated_choices,
    })
}

fn run_value(run: &Run) -> Value {
    let cache_log: Vec<Value> = run
        .cache_log
        .iter()
        .map(|e| {
            json!({
                "seq": e.seq, "tick": e.tick, "worker": e.worker,
                "epoch": e.epoch, "op": e.op, "outcome": e.outcome,
            })
        })
        .collect();
    let observation_log: Vec<Value> = run
        .observation_log
        .iter()
        .map(|e| {
            json!({
                "seq": e.seq, "tick": e.tick, "worker": e.worker,
                "observed_tick": e.observed_tick, "outcome": e.outcome,
            })
        })
        .collect();
    json!({
        "policy": run.policy.name(),
        "decisions": run.decisions.iter().map(decision_value).collect::<Vec<Value>>(),
        "cache_log": cache_log,
        "observation_log": observation_log,
        "metrics": metrics_value(&run.metrics),
    })
}

/// Canonical bytes of the full receipt, `receipt_digest` included. The digest covers
/// the canonical bytes of the receipt without that member.
pub fn receipt_bytes(trace_digest: &str, runs: &[Run]) -> Result<Vec<u8>, String> {
    let mut receipt = json!({
        "format": "kvroute-receipt/1",
        "trace_digest": trace_digest,
        "runs": runs.iter().map(run_value).collect::<Vec<Value>>(),
    });
    let receipt_digest = digest(&jcs(&receipt)?);
    if let Value::Object(members) = &mut receipt {
        members.insert("receipt_digest".to_owned(), Value::String(receipt_digest));
    }
    jcs(&receipt)
}

/// Canonical bytes of `[{"metrics": …, "policy": …}, …]`, one per run: the receipt's
/// metrics without its decisions, for comparing runs that keep no receipt.
pub fn metrics_bytes(runs: &[Run]) -> Result<Vec<u8>, String> {
    let runs: Vec<Value> = runs
        .iter()
        .map(|run| json!({ "policy": run.policy.name(), "metrics": metrics_value(&run.metrics) }))
        .collect();
    jcs(&Value::Array(runs))
}
