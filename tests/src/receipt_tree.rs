//! The receipt as a JSON tree, built member by member from its records with
//! `serde_json::json!`: the reference the typed writer's bytes are checked against
//! (their canonical form must be these bytes). Only tests need it, so it lives here
//! rather than in core.

use kvroute_core::output::{metrics_value, Receipt, RECEIPT_FORMAT};
use kvroute_core::route::CandidateRow;
use kvroute_core::route::{CacheLogEntry, Decision, ObservationLogEntry, Run};
use serde_json::{json, Value};

/// The full receipt as JSON, `receipt_digest` included.
pub fn receipt_value(receipt: &Receipt) -> Value {
    let ids = &receipt.worker_ids;
    json!({
        "format": RECEIPT_FORMAT,
        "receipt_digest": receipt.digest(),
        "trace_digest": receipt.trace_digest,
        "runs": receipt.runs.iter().map(|r| run_value(ids, r)).collect::<Vec<_>>(),
    })
}

/// One run as JSON. `ids` maps worker indexes to ids.
fn run_value(ids: &[String], run: &Run) -> Value {
    json!({
        "policy": run.policy.name(),
        "decisions": run.decisions.iter().map(|d| decision_value(ids, d)).collect::<Vec<_>>(),
        "cache_log": run.cache_log.iter().map(|e| cache_entry_value(ids, e)).collect::<Vec<_>>(),
        "observation_log": run.observation_log.iter()
            .map(|e| observation_entry_value(ids, e)).collect::<Vec<_>>(),
        "metrics": metrics_value(&run.metrics),
    })
}

fn cache_entry_value(ids: &[String], e: &CacheLogEntry) -> Value {
    let mut value = json!({
        "seq": e.seq, "tick": e.tick, "worker": ids[e.worker],
        "epoch": e.epoch, "op": e.op.name(), "outcome": e.outcome.name(),
    });
    if let Some(stale) = e.stale_mutations {
        value["stale_mutations"] = json!(stale);
    }
    value
}

fn observation_entry_value(ids: &[String], e: &ObservationLogEntry) -> Value {
    json!({
        "seq": e.seq, "tick": e.tick, "worker": ids[e.worker],
        "observed_tick": e.observed_tick, "outcome": e.outcome.name(),
    })
}

fn decision_value(ids: &[String], d: &Decision) -> Value {
    json!({
        "seq": d.seq, "tick": d.tick, "request": d.request,
        "chosen": d.chosen.map(|c| &ids[c]),
        "route_kind": d.route_kind.name(),
        "tie_count": d.tie_count, "margin_milli": d.margin_milli,
        "candidates": d.candidates.iter().map(|r| row_value(ids, r)).collect::<Vec<_>>(),
    })
}

fn row_value(ids: &[String], r: &CandidateRow) -> Value {
    json!({
        "worker": ids[r.worker],
        "eligible": r.eligible,
        "reasons": r.reasons.iter().map(|x| x.name()).collect::<Vec<_>>(),
        "reuse": r.reuse, "recomputed": r.recomputed,
        "queued_prefill": r.queued_prefill, "active_decode": r.active_decode,
        "work_milli": r.work_milli, "after_milli": r.after_milli, "cost_milli": r.cost_milli,
        "dominated_by": r.dominated_by.map(|w| &ids[w]),
        "dominated_count": r.dominated_count,
    })
}
