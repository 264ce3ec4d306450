//! A join written out (SPEC.md §14.3): the table a person reads, the canonical
//! `kvroute-join/1` document, and the per-worker CSV.

use crate::join::figures::{Goodput, WorkerFigures};
use crate::join::Join;
use crate::output::canonical::jcs_bytes;
use crate::output::csv::{id_cell, CsvIds};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The `format` of the JSON document.
pub const JOIN_FORMAT: &str = "kvroute-join/1";

/// The canonical bytes of the document, without a trailing `\n`.
pub fn json_bytes(join: &Join) -> Vec<u8> {
    let c = &join.figures.counts;
    let goodput = join.figures.goodput.as_ref().map(|g| {
        json!({"good": g.good, "good_pm": g.good_pm, "span_ns": g.span_ns,
               "good_per_second_milli": g.good_per_second_milli})
    });
    let workers: Vec<Value> = join
        .figures
        .workers
        .iter()
        .map(|w| {
            json!({"worker": w.worker, "completed": w.completed, "ttft_mean_us": w.ttft_mean_us,
                   "tpot_mean_us": w.tpot_mean_us, "predicted_mean_milli": w.predicted_mean_milli,
                   "us_per_predicted_token": w.us_per_predicted_token})
        })
        .collect();
    let slo = join.slo.unwrap_or_default();
    jcs_bytes(&json!({
        "format": JOIN_FORMAT,
        "receipt_digest": join.receipt_digest,
        "run": join.run.name(),
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "counts": {
            "decisions": c.decisions, "routed": c.routed, "rejected": c.rejected,
            "completion_lines": c.completion_lines, "matched": c.matched,
            "dropped": c.dropped, "rejected_served": c.rejected_served,
            "unrouted": c.unrouted, "retried": c.retried, "cancelled": c.cancelled,
            "errors": c.errors, "completed": c.completed, "error_rate_pm": c.error_rate_pm,
        },
        "prediction": {
            "ttft_rank_gamma_pm": join.figures.ttft_rank_gamma_pm,
            "us_per_predicted_token": join.figures.us_per_predicted_token,
        },
        "goodput": goodput,
        "workers": workers,
    }))
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// The table: counts, prediction figures, goodput when declared, then the workers.
/// Worker ids are printed through `printable`, which the caller escapes for its
/// terminal.
pub fn table(join: &Join, printable: &dyn Fn(&str) -> String) -> String {
    let c = &join.figures.counts;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} of receipt {}",
        join.run.name(),
        join.receipt_digest
    );
    let _ = writeln!(
        out,
        "decisions {} (routed {}, rejected {}); completion lines {}",
        c.decisions, c.routed, c.rejected, c.completion_lines
    );
    let _ = writeln!(
        out,
        "matched {}  dropped {}  rejected_served {}  unrouted {}  retried {}",
        c.matched, c.dropped, c.rejected_served, c.unrouted, c.retried
    );
    let _ = writeln!(
        out,
        "cancelled {}  errors {} (error_rate_pm {})  completed {}",
        c.cancelled, c.errors, c.error_rate_pm, c.completed
    );
    let _ = writeln!(
        out,
        "prediction: ttft_rank_gamma_pm {}  us_per_predicted_token {}",
        or_dash(join.figures.ttft_rank_gamma_pm),
        or_dash(join.figures.us_per_predicted_token)
    );
    if let (Some(slo), Some(g)) = (join.slo, &join.figures.goodput) {
        goodput_line(&mut out, slo, g);
    }
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>12} {:>12} {:>20} {:>22}",
        "worker",
        "completed",
        "ttft_mean_us",
        "tpot_mean_us",
        "predicted_mean_milli",
        "us_per_predicted_token"
    );
    for w in &join.figures.workers {
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>12} {:>12} {:>20} {:>22}",
            printable(&w.worker),
            w.completed,
            w.ttft_mean_us,
            w.tpot_mean_us,
            w.predicted_mean_milli,
            or_dash(w.us_per_predicted_token)
        );
    }
    out
}

fn goodput_line(out: &mut String, slo: crate::join::figures::Slo, g: &Goodput) {
    let objective = |name: &str, ms: Option<u64>| ms.map(|ms| format!("{name} <= {ms} ms"));
    let objectives: Vec<String> = [
        objective("ttft", slo.ttft_ms),
        objective("tpot", slo.tpot_ms),
    ]
    .into_iter()
    .flatten()
    .collect();
    let _ = writeln!(
        out,
        "goodput ({}): good {}  good_pm {}  span_ns {}  good_per_second_milli {}",
        objectives.join(", "),
        g.good,
        g.good_pm,
        g.span_ns,
        g.good_per_second_milli
    );
}

/// The per-worker CSV: a header of the six names, one row a worker.
pub fn csv_bytes(workers: &[WorkerFigures], ids: CsvIds) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record([
        "worker",
        "completed",
        "ttft_mean_us",
        "tpot_mean_us",
        "predicted_mean_milli",
        "us_per_predicted_token",
    ])?;
    for w in workers {
        writer.write_record([
            id_cell(&w.worker, ids).into_owned(),
            w.completed.to_string(),
            w.ttft_mean_us.to_string(),
            w.tpot_mean_us.to_string(),
            w.predicted_mean_milli.to_string(),
            w.us_per_predicted_token
                .map(|v| v.to_string())
                .unwrap_or_default(),
        ])?;
    }
    writer.into_inner().map_err(|e| e.into_error().into())
}
