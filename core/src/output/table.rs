//! The human-readable summary `kvroute replay` prints: one row per policy with the
//! headline metrics of SPEC.md §6.2, then the trace and receipt digests.

use crate::output::receipt::Receipt;
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;

/// A fixed-width summary: one row per policy with the headline metrics, then digests.
pub fn summary_table(receipt: &Receipt) -> String {
    let runs: Vec<(Policy, Metrics)> = receipt
        .runs
        .iter()
        .map(|r| (r.policy, r.metrics.clone()))
        .collect();
    summary_table_of(&runs, &receipt.trace_digest, &receipt.digest())
}

/// The summary table from each run's metrics and the two digests.
pub fn summary_table_of(
    runs: &[(Policy, Metrics)],
    trace_digest: &str,
    receipt_digest: &str,
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:>6} {:>5} {:>5} {:>9} {:>11} {:>6} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8}\n",
        "policy",
        "routed",
        "rej",
        "hits",
        "reused",
        "recomputed",
        "churn",
        "skew_m",
        "lat_mean",
        "lat_p95",
        "stale",
        "boundary",
        "escapes",
        "dominated"
    ));
    for (policy, m) in runs {
        out.push_str(&format!(
            "{:<16} {:>6} {:>5} {:>5} {:>9} {:>11} {:>6} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8}\n",
            policy.name(),
            m.routed,
            m.rejected,
            m.cache_hits,
            m.reused_tokens,
            m.recomputed_tokens,
            m.route_churn,
            m.load_skew_milli,
            m.latency_proxy_mean_milli,
            m.latency_proxy_p95_milli,
            m.stale_event_rejections + m.stale_observation_rejections,
            m.boundary_rejections,
            m.overload_escapes,
            m.dominated_choices,
        ));
    }
    out.push_str(&format!("trace   {trace_digest}\n"));
    out.push_str(&format!("receipt {receipt_digest}\n"));
    out
}
