//! The closed-loop comparison `kvroute simulate` prints (SPEC.md §11, "Output").

use crate::output::table::columns;
use crate::simulate::closed_loop::SimRun;

/// The closed-loop comparison `kvroute simulate` prints: one row per policy.
/// `hit_pm` is routed requests with reuse, per mille; `phantom` counts tokens the router
/// believed reusable that the chosen engine had already evicted, `missed` tokens the
/// chosen engine held that the router did not believe; `lost` and `resyncs` count
/// events the bus lost and re-queries after a detected gap.
///
/// The first line says what was simulated and under which settings (`settings`, the
/// caller's words for them: the engine options and the trace's stale rule and epochs),
/// so a pasted table carries what it depends on.
pub fn simulate_table(runs: &[SimRun], workers: usize, requests: usize, settings: &str) -> String {
    let mut out = format!("simulate: {requests} requests on {workers} workers; {settings}\n");
    let header = [
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
        "lost",
        "resyncs",
        "phantom",
        "missed",
    ];
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let m = &run.metrics;
            vec![
                run.policy.name().to_owned(),
                m.routed.to_string(),
                m.hits_per_mille().to_string(),
                m.reused_tokens.to_string(),
                m.recomputed_tokens.to_string(),
                m.load_skew_milli.to_string(),
                m.latency_proxy_mean_milli.to_string(),
                m.latency_proxy_p95_milli.to_string(),
                m.stale_event_rejections.to_string(),
                run.stats.store_events.to_string(),
                run.stats.evict_events.to_string(),
                run.stats.lost_events.to_string(),
                run.stats.resyncs.to_string(),
                run.stats.phantom_reuse_tokens.to_string(),
                run.stats.missed_reuse_tokens.to_string(),
            ]
        })
        .collect();
    out.push_str(&columns(
        &header,
        &rows,
        &[16, 8, 6, 12, 12, 7, 12, 12, 6, 7, 7, 6, 7, 10, 10],
    ));
    out
}
