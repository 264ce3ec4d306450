//! The closed-loop comparison `kvroute simulate` prints (SPEC.md §11, "Output").

use crate::simulate::closed_loop::SimRun;

/// The closed-loop comparison `kvroute simulate` prints: one row per policy.
/// `hit_pm` is routed requests with reuse, per mille; `phantom` counts tokens the router
/// believed reusable that the chosen engine had already evicted, `missed` tokens the
/// chosen engine held that the router did not believe; `lost` and `resyncs` count
/// events the bus lost and re-queries after a detected gap.
pub fn simulate_table(runs: &[SimRun], workers: usize, requests: usize) -> String {
    let mut out = format!("simulate: {requests} requests on {workers} workers\n");
    out.push_str(&format!(
        "{:<16} {:>8} {:>6} {:>12} {:>12} {:>7} {:>12} {:>12} {:>6} {:>7} {:>7} {:>6} {:>7} {:>10} {:>10}\n",
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
        "missed"
    ));
    for run in runs {
        let m = &run.metrics;
        let hit_pm = m.hits_per_mille();
        out.push_str(&format!(
            "{:<16} {:>8} {:>6} {:>12} {:>12} {:>7} {:>12} {:>12} {:>6} {:>7} {:>7} {:>6} {:>7} {:>10} {:>10}\n",
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
            run.stats.lost_events,
            run.stats.resyncs,
            run.stats.phantom_reuse_tokens,
            run.stats.missed_reuse_tokens,
        ));
    }
    out
}
