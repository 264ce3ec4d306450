//! CSV export of candidate rows (SPEC.md §6.3) and the human-readable summary table.

use crate::candidate::CandidateRow;
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::receipt::{Decision, Receipt};
use crate::simulate::SimRun;

/// The CSV header, in column order.
pub const CSV_COLUMNS: [&str; 17] = [
    "policy",
    "seq",
    "tick",
    "request",
    "chosen",
    "route_kind",
    "worker",
    "eligible",
    "reasons",
    "reuse",
    "recomputed",
    "queued_prefill",
    "active_decode",
    "work_milli",
    "after_milli",
    "cost_milli",
    "dominated_by",
];

/// One line per (run, decision, candidate), header first.
pub fn csv_bytes(receipt: &Receipt) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.write_record(CSV_COLUMNS)?;
    for run in &receipt.runs {
        for d in &run.decisions {
            for r in &d.candidates {
                writer.write_record(csv_record(run.policy, &receipt.worker_ids, d, r))?;
            }
        }
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// One candidate row's CSV fields, in [`CSV_COLUMNS`] order. `ids` maps worker indexes
/// to ids.
pub fn csv_record<S: AsRef<str>>(
    policy: Policy,
    ids: &[S],
    d: &Decision,
    r: &CandidateRow,
) -> [String; 17] {
    let id = |w: usize| ids[w].as_ref().to_owned();
    let reasons: Vec<&str> = r.reasons.iter().map(|x| x.name()).collect();
    let dominated_by: Vec<&str> = r.dominated_by.iter().map(|&w| ids[w].as_ref()).collect();
    [
        policy.name().to_owned(),
        d.seq.to_string(),
        d.tick.to_string(),
        d.request.clone(),
        d.chosen.map(id).unwrap_or_default(),
        d.route_kind.name().to_owned(),
        id(r.worker),
        r.eligible.to_string(),
        reasons.join(";"),
        r.reuse.to_string(),
        r.recomputed.to_string(),
        r.queued_prefill.to_string(),
        r.active_decode.to_string(),
        r.work_milli.to_string(),
        r.after_milli.to_string(),
        r.cost_milli.to_string(),
        dominated_by.join(";"),
    ]
}

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

/// The closed-loop comparison `kvroute simulate` prints: one row per policy.
/// `hit_pm` is routed requests with reuse, per mille; `phantom` counts tokens the router
/// believed reusable that the chosen engine had already evicted.
pub fn simulate_table(runs: &[SimRun], workers: usize, requests: usize) -> String {
    let mut out = format!("simulate: {requests} requests on {workers} workers\n");
    out.push_str(&format!(
        "{:<16} {:>8} {:>6} {:>12} {:>12} {:>7} {:>12} {:>12} {:>6} {:>7} {:>7} {:>10}\n",
        "policy",
        "routed",
        "hit_pm",
        "reused",
        "recomputed",
        "skew_m",
        "lat_mean_m",
        "lat_p95_m",
        "stale",
        "stores",
        "evicts",
        "phantom"
    ));
    for run in runs {
        let m = &run.metrics;
        let hit_pm = (1000 * m.cache_hits).checked_div(m.routed).unwrap_or(0);
        out.push_str(&format!(
            "{:<16} {:>8} {:>6} {:>12} {:>12} {:>7} {:>12} {:>12} {:>6} {:>7} {:>7} {:>10}\n",
            run.policy.name(),
            m.routed,
            hit_pm,
            m.reused_tokens,
            m.recomputed_tokens,
            m.load_skew_milli,
            m.latency_proxy_mean_milli,
            m.latency_proxy_p95_milli,
            m.stale_event_rejections,
            run.stats.store_events,
            run.stats.evict_events,
            run.stats.phantom_reuse_tokens,
        ));
    }
    out
}
