//! The receipt (`kvroute-receipt/1`, SPEC.md §6) and its digest. Keys and tenant names
//! never appear here: rows name workers only.
//!
//! The bytes are serde's: every receipt object is a `#[derive(Serialize)]` struct of
//! borrowed fields, declared in RFC 8785 member order (all names are ASCII, so that is
//! plain byte order), and serde_json's compact writer produces them. That writer emits
//! integers in decimal and escapes strings exactly as JCS does (`"`, `\`, the short
//! escapes, other control characters as lowercase `\u00xx`), so no tree is built and no
//! canonicalizer runs; `tests.rs` checks the bytes against the canonicalizer anyway.

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::replay::{CacheLogEntry, Decision, Metrics, ObservationLogEntry, Row, Run};

#[derive(Serialize)]
struct RowOut<'a> {
    active_decode: u64,
    after_milli: u64,
    cost_milli: u64,
    dominated_by: Option<&'a str>,
    dominated_count: u64,
    eligible: bool,
    queued_prefill: u64,
    reasons: &'a [&'static str],
    recomputed: u64,
    reuse: u64,
    work_milli: u64,
    worker: &'a str,
}

impl<'a> From<&'a Row> for RowOut<'a> {
    fn from(row: &'a Row) -> Self {
        RowOut {
            active_decode: row.active_decode,
            after_milli: row.after_milli,
            cost_milli: row.cost_milli,
            dominated_by: row.dominated_by.as_deref(),
            dominated_count: row.dominated_count,
            eligible: row.eligible,
            queued_prefill: row.queued_prefill,
            reasons: &row.reasons,
            recomputed: row.recomputed,
            reuse: row.reuse,
            work_milli: row.work_milli,
            worker: &row.worker,
        }
    }
}

/// A slice serialised as a JSON array of its items' output form, converted one at a
/// time as serde asks for them.
struct Each<'a, T, O>(&'a [T], fn(&'a T) -> O);

impl<'a, T, O: Serialize> Serialize for Each<'a, T, O> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(self.1))
    }
}

#[derive(Serialize)]
struct DecisionOut<'a> {
    candidates: Each<'a, Row, RowOut<'a>>,
    chosen: Option<&'a str>,
    margin_milli: u64,
    request: &'a str,
    route_kind: &'a str,
    seq: u64,
    tick: u64,
    tie_count: u64,
}

impl<'a> From<&'a Decision> for DecisionOut<'a> {
    fn from(d: &'a Decision) -> Self {
        DecisionOut {
            candidates: Each(&d.candidates, RowOut::from),
            chosen: d.chosen.as_deref(),
            margin_milli: d.margin_milli,
            request: &d.request,
            route_kind: d.route_kind,
            seq: d.seq,
            tick: d.tick,
            tie_count: d.tie_count,
        }
    }
}

/// `stale_mutations` is written only under `stale_rule: "key_epoch"` (§6).
#[derive(Serialize)]
struct CacheEntryOut<'a> {
    epoch: u64,
    op: &'a str,
    outcome: &'a str,
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    stale_mutations: Option<u64>,
    tick: u64,
    worker: &'a str,
}

impl<'a> From<&'a CacheLogEntry> for CacheEntryOut<'a> {
    fn from(e: &'a CacheLogEntry) -> Self {
        CacheEntryOut {
            epoch: e.epoch,
            op: e.op,
            outcome: e.outcome,
            seq: e.seq,
            stale_mutations: e.stale_mutations,
            tick: e.tick,
            worker: &e.worker,
        }
    }
}

#[derive(Serialize)]
struct ObservationOut<'a> {
    observed_tick: u64,
    outcome: &'a str,
    seq: u64,
    tick: u64,
    worker: &'a str,
}

impl<'a> From<&'a ObservationLogEntry> for ObservationOut<'a> {
    fn from(e: &'a ObservationLogEntry) -> Self {
        ObservationOut {
            observed_tick: e.observed_tick,
            outcome: e.outcome,
            seq: e.seq,
            tick: e.tick,
            worker: &e.worker,
        }
    }
}

/// The metrics of the later policy members are written only when present (§6.2).
#[derive(Serialize)]
struct MetricsOut {
    boundary_rejections: u64,
    cache_hits: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cold_reserve_exclusions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cold_reserve_fallbacks: Option<u64>,
    dominated_choices: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_gap_rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_gaps: Option<u64>,
    latency_proxy_max_milli: u64,
    latency_proxy_mean_milli: u64,
    latency_proxy_p95_milli: u64,
    load_skew_milli: u64,
    overload_escapes: u64,
    recomputed_tokens: u64,
    rejected: u64,
    reused_tokens: u64,
    route_churn: u64,
    routed: u64,
    stale_event_rejections: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    stale_mutation_rejections: Option<u64>,
    stale_observation_rejections: u64,
}

impl From<&Metrics> for MetricsOut {
    fn from(m: &Metrics) -> Self {
        MetricsOut {
            boundary_rejections: m.boundary_rejections,
            cache_hits: m.cache_hits,
            cold_reserve_exclusions: m.cold_reserve_exclusions,
            cold_reserve_fallbacks: m.cold_reserve_fallbacks,
            dominated_choices: m.dominated_choices,
            evidence_gap_rows: m.evidence_gap_rows,
            evidence_gaps: m.evidence_gaps,
            latency_proxy_max_milli: m.latency_proxy_max_milli,
            latency_proxy_mean_milli: m.latency_proxy_mean_milli,
            latency_proxy_p95_milli: m.latency_proxy_p95_milli,
            load_skew_milli: m.load_skew_milli,
            overload_escapes: m.overload_escapes,
            recomputed_tokens: m.recomputed_tokens,
            rejected: m.rejected,
            reused_tokens: m.reused_tokens,
            route_churn: m.route_churn,
            routed: m.routed,
            stale_event_rejections: m.stale_event_rejections,
            stale_mutation_rejections: m.stale_mutation_rejections,
            stale_observation_rejections: m.stale_observation_rejections,
        }
    }
}

#[derive(Serialize)]
struct RunOut<'a> {
    cache_log: Each<'a, CacheLogEntry, CacheEntryOut<'a>>,
    decisions: Each<'a, Decision, DecisionOut<'a>>,
    metrics: MetricsOut,
    observation_log: Each<'a, ObservationLogEntry, ObservationOut<'a>>,
    policy: &'static str,
}

impl<'a> From<&'a Run> for RunOut<'a> {
    fn from(run: &'a Run) -> Self {
        RunOut {
            cache_log: Each(&run.cache_log, CacheEntryOut::from),
            decisions: Each(&run.decisions, DecisionOut::from),
            metrics: MetricsOut::from(&run.metrics),
            observation_log: Each(&run.observation_log, ObservationOut::from),
            policy: run.policy.name(),
        }
    }
}

/// The receipt without its digest: what `receipt_digest` is the SHA-256 of.
#[derive(Serialize)]
struct BodyOut<'a> {
    format: &'static str,
    runs: Each<'a, Run, RunOut<'a>>,
    trace_digest: &'a str,
}

/// The full receipt; `receipt_digest` sorts between `format` and `runs`.
#[derive(Serialize)]
struct ReceiptOut<'a> {
    format: &'static str,
    receipt_digest: &'a str,
    runs: Each<'a, Run, RunOut<'a>>,
    trace_digest: &'a str,
}

const FORMAT: &str = "kvroute-receipt/1";

/// Canonical bytes of the full receipt, `receipt_digest` included. The digest covers
/// the canonical bytes of the receipt without that member: the body is serialised
/// once straight into the hasher, then the full receipt once into the result.
pub fn receipt_bytes(trace_digest: &str, runs: &[Run]) -> Result<Vec<u8>, String> {
    let mut hasher = Sha256::new();
    let body = BodyOut {
        format: FORMAT,
        runs: Each(runs, RunOut::from),
        trace_digest,
    };
    serde_json::to_writer(&mut hasher, &body).map_err(|e| format!("serialization failed: {e}"))?;
    let mut receipt_digest = String::from("sha256:");
    for byte in hasher.finalize() {
        receipt_digest.push_str(&format!("{byte:02x}"));
    }
    let receipt = ReceiptOut {
        format: FORMAT,
        receipt_digest: &receipt_digest,
        runs: Each(runs, RunOut::from),
        trace_digest,
    };
    serde_json::to_vec(&receipt).map_err(|e| format!("serialization failed: {e}"))
}

#[derive(Serialize)]
struct RunMetricsOut {
    metrics: MetricsOut,
    policy: &'static str,
}

/// Canonical bytes of `[{"metrics": …, "policy": …}, …]`, one per run: the receipt's
/// metrics without its decisions, for comparing runs that keep no receipt.
pub fn metrics_bytes(runs: &[Run]) -> Result<Vec<u8>, String> {
    let runs: Vec<RunMetricsOut> = runs
        .iter()
        .map(|run| RunMetricsOut {
            metrics: MetricsOut::from(&run.metrics),
            policy: run.policy.name(),
        })
        .collect();
    serde_json::to_vec(&runs).map_err(|e| format!("serialization failed: {e}"))
}
