//! The receipt (`kvroute-receipt/1`, SPEC.md §6): every run's records as one JSON
//! document, with its canonical bytes and digests.
//!
//! The records themselves ([`crate::route::record`]) index workers; ids are put back
//! here, when the receipt is serialised. No key or tenant name is ever exported.
//!
//! The bytes come from the typed writer ([`crate::output::typed`]); the replay driver
//! (`crate::replay::receipt`) fills one in. The receipt as a JSON tree, the reference
//! the typed bytes are checked against, is built only in the test harness
//! (`kvroute_harness::receipt_tree`).

use crate::output::typed;
use crate::route::metrics::Metrics;
use crate::route::record::Run;
use serde_json::Value;

/// The full receipt: the trace digest and the four runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub trace_digest: String,
    /// Worker ids in id order; rows and logs index into this.
    pub worker_ids: Vec<String>,
    pub runs: Vec<Run>,
}

impl Receipt {
    /// `sha256:<hex>` of the canonical bytes of the receipt without its
    /// `receipt_digest` member.
    pub fn digest(&self) -> String {
        let runs = typed::runs_bytes_of_records(&self.worker_ids, &self.runs);
        typed::receipt_digest_of_runs(&runs, &self.trace_digest)
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

/// One run's metrics as JSON (the serde form: version-1 members, then the optional
/// ones a trace turns on).
pub fn metrics_value(m: &Metrics) -> Value {
    serde_json::to_value(m).expect("metrics are plain integers")
}

/// The version-1 metrics object, kept to check the serde form against it.
#[cfg(test)]
pub(crate) fn metrics_value_v1(m: &Metrics) -> Value {
    serde_json::json!({
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
