//! CSV export of candidate rows (SPEC.md §6.3) and the human-readable summary table.

use crate::receipt::Receipt;

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
            let chosen = d.chosen.map(|c| receipt.worker_id(c)).unwrap_or("");
            for r in &d.candidates {
                let reasons: Vec<&str> = r.reasons.iter().map(|x| x.name()).collect();
                let dominated_by: Vec<&str> = r
                    .dominated_by
                    .iter()
                    .map(|&w| receipt.worker_id(w))
                    .collect();
                writer.write_record([
                    run.policy.name(),
                    &d.seq.to_string(),
                    &d.tick.to_string(),
                    &d.request,
                    chosen,
                    d.route_kind.name(),
                    receipt.worker_id(r.worker),
                    if r.eligible { "true" } else { "false" },
                    &reasons.join(";"),
                    &r.reuse.to_string(),
                    &r.recomputed.to_string(),
                    &r.queued_prefill.to_string(),
                    &r.active_decode.to_string(),
                    &r.work_milli.to_string(),
                    &r.after_milli.to_string(),
                    &r.cost_milli.to_string(),
                    &dominated_by.join(";"),
                ])?;
            }
        }
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// A fixed-width summary: one row per policy with the headline metrics, then digests.
pub fn summary_table(receipt: &Receipt) -> String {
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
    for run in &receipt.runs {
        let m = &run.metrics;
        out.push_str(&format!(
            "{:<16} {:>6} {:>5} {:>5} {:>9} {:>11} {:>6} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8}\n",
            run.policy.name(),
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
    out.push_str(&format!("trace   {}\n", receipt.trace_digest));
    out.push_str(&format!("receipt {}\n", receipt.digest()));
    out
}
