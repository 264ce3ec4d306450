//! The receipt (`kvroute-receipt/1`, SPEC.md §6): every run's records as one JSON
//! document, with its canonical bytes and digests.
//!
//! The records themselves ([`crate::route::record`]) index workers; ids are put back
//! here, when the receipt is serialised. No key or tenant name is ever exported.
//!
//! The bytes come from the typed writer ([`crate::output::typed`]); the JSON tree
//! ([`Receipt::to_value`]) is kept as the reference those bytes are checked against.

use crate::input::trace::Trace;
use crate::output::canonical::trace_digest;
use crate::output::typed;
use crate::route::candidate::CandidateRow;
use crate::route::compiled::Compiled;
use crate::route::engine::run_all;
use crate::route::metrics::Metrics;
use crate::route::record::{CacheLogEntry, Decision, ObservationLogEntry, Run};
use serde_json::{json, Value};

/// Replays the trace under every policy and assembles the receipt in memory.
pub fn replay(trace: &Trace) -> Receipt {
    let compiled = Compiled::new(trace);
    Receipt {
        trace_digest: trace_digest(trace),
        worker_ids: compiled.worker_ids.iter().map(|w| w.to_string()).collect(),
        runs: run_all(&compiled),
    }
}

/// The full receipt: the trace digest and the four runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub trace_digest: String,
    /// Worker ids in id order; rows and logs index into this.
    pub worker_ids: Vec<String>,
    pub runs: Vec<Run>,
}

impl Receipt {
    /// The receipt as JSON without its `receipt_digest` member.
    pub fn body_value(&self) -> Value {
        json!({
            "format": RECEIPT_FORMAT,
            "trace_digest": self.trace_digest,
            "runs": self.runs.iter().map(|r| run_value(&self.worker_ids, r)).collect::<Vec<_>>(),
        })
    }

    /// `sha256:<hex>` of the canonical bytes of [`Receipt::body_value`].
    pub fn digest(&self) -> String {
        let runs = typed::runs_bytes_of_records(&self.worker_ids, &self.runs);
        typed::receipt_digest_of_runs(&runs, &self.trace_digest)
    }

    /// The full receipt as JSON, `receipt_digest` included: the tree form, for checking
    /// the typed bytes against the generic canonicalizer.
    pub fn to_value(&self) -> Value {
        let mut value = self.body_value();
        value
            .as_object_mut()
            .expect("the body is an object")
            .insert("receipt_digest".into(), Value::String(self.digest()));
        value
    }

    /// The canonical bytes of the full receipt (no trailing newline), written by type.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        let runs = typed::runs_bytes_of_records(&self.worker_ids, &self.runs);
        typed::assemble_receipt(&runs, &self.trace_digest)
    }

    pub fn worker_id(&self, index: usize) -> &str {
        &self.worker_ids[index]
    }
}

pub use typed::RECEIPT_FORMAT;

/// One run as JSON. `ids` maps worker indexes to ids.
pub fn run_value<S: AsRef<str>>(ids: &[S], run: &Run) -> Value {
    json!({
        "policy": run.policy.name(),
        "decisions": run.decisions.iter().map(|d| decision_value(ids, d)).collect::<Vec<_>>(),
        "cache_log": run.cache_log.iter().map(|e| cache_entry_value(ids, e)).collect::<Vec<_>>(),
        "observation_log": run.observation_log.iter()
            .map(|e| observation_entry_value(ids, e)).collect::<Vec<_>>(),
        "metrics": metrics_value(&run.metrics),
    })
}

pub fn cache_entry_value<S: AsRef<str>>(ids: &[S], e: &CacheLogEntry) -> Value {
    let mut value = json!({
        "seq": e.seq, "tick": e.tick, "worker": ids[e.worker].as_ref(),
        "epoch": e.epoch, "op": e.op.name(), "outcome": e.outcome.name(),
    });
    if let Some(stale) = e.stale_mutations {
        value["stale_mutations"] = json!(stale);
    }
    value
}

pub fn observation_entry_value<S: AsRef<str>>(ids: &[S], e: &ObservationLogEntry) -> Value {
    json!({
        "seq": e.seq, "tick": e.tick, "worker": ids[e.worker].as_ref(),
        "observed_tick": e.observed_tick, "outcome": e.outcome.name(),
    })
}

pub fn metrics_value(m: &Metrics) -> Value {
    serde_json::to_value(m).expect("metrics are plain integers")
}

/// The version-1 metrics object, kept to check the serde form against it.
#[cfg(test)]
pub(crate) fn metrics_value_v1(m: &Metrics) -> Value {
    json!({
        "routed": m.routed, "rejected": m.rejected, "cache_hits": m.cache_hits,
        "reused_tokens": m.reused_tokens, "recomputed_tokens": m.recomputed_tokens,
        "route_churn": m.route_churn, "load_skew_milli": m.load_skew_milli,
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

pub fn decision_value<S: AsRef<str>>(ids: &[S], d: &Decision) -> Value {
    json!({
        "seq": d.seq, "tick": d.tick, "request": d.request,
        "chosen": d.chosen.map(|c| ids[c].as_ref()),
        "route_kind": d.route_kind.name(),
        "tie_count": d.tie_count, "margin_milli": d.margin_milli,
        "candidates": d.candidates.iter()
            // The mutant exports only the chosen worker's row.
            .filter(|r| !crate::mutant::active("mutant-chosen-only-receipt") || Some(r.worker) == d.chosen)
            .map(|r| row_value(ids, r)).collect::<Vec<_>>(),
    })
}

fn row_value<S: AsRef<str>>(ids: &[S], r: &CandidateRow) -> Value {
    json!({
        "worker": ids[r.worker].as_ref(),
        "eligible": r.eligible,
        "reasons": r.reasons.iter().map(|x| x.name()).collect::<Vec<_>>(),
        "reuse": r.reuse, "recomputed": r.recomputed,
        "queued_prefill": r.queued_prefill, "active_decode": r.active_decode,
        "work_milli": r.work_milli, "after_milli": r.after_milli, "cost_milli": r.cost_milli,
        "dominated_by": r.dominated_by.map(|w| ids[w].as_ref()),
        "dominated_count": r.dominated_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the optional members, the serde form is the version-1 object.
    #[test]
    fn default_metrics_value_is_the_version_1_object() {
        let m = Metrics {
            routed: 3,
            stale_event_rejections: 2,
            ..Metrics::default()
        };
        assert_eq!(metrics_value(&m), metrics_value_v1(&m));
    }
}
