//! A join written out (SPEC.md §14.3): the table a person reads, the canonical
//! `kvroute-join/2` document, and the per-worker CSV.

use crate::join::figures::{CohortFigures, Goodput, JoinFigures, WorkerFigures};
use crate::join::Join;
use crate::output::canonical::jcs_bytes;
use crate::output::csv::{id_cell, CsvIds};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// The `format` of the JSON document.
pub const JOIN_FORMAT: &str = "kvroute-join/2";

/// The canonical bytes of the document, without a trailing `\n`.
pub fn json_bytes(join: &Join) -> Vec<u8> {
    let mut document = figures_value(&join.figures);
    let slo = join.slo.unwrap_or_default();
    let members = document.as_object_mut().expect("the figures are an object");
    members.insert("format".to_owned(), json!(JOIN_FORMAT));
    members.insert("receipt_digest".to_owned(), json!(join.receipt_digest));
    members.insert("run".to_owned(), json!(join.run.name()));
    members.insert(
        "slo".to_owned(),
        json!({"ttft_us": slo.ttft_us, "tpot_us": slo.tpot_us}),
    );
    // Written only with `--trace`, so a document without it keeps its bytes (§14.3).
    if let Some(cohorts) = &join.figures.cohorts {
        let cohorts: Vec<Value> = cohorts
            .iter()
            .map(|cohort| {
                let mut entry = figures_value(&cohort.figures);
                let members = entry.as_object_mut().expect("the figures are an object");
                members.insert("tenant".to_owned(), json!(cohort.tenant));
                members.insert("model".to_owned(), json!(cohort.model));
                members.insert("adapter".to_owned(), json!(cohort.adapter));
                entry
            })
            .collect();
        members.insert("cohorts".to_owned(), Value::Array(cohorts));
    }
    jcs_bytes(&document)
}

/// `counts`, `prediction`, `goodput` and `workers`: the members a run and a cohort
/// share.
fn figures_value(figures: &JoinFigures) -> Value {
    let c = &figures.counts;
    let goodput = figures.goodput.as_ref().map(|g| {
        json!({"good": g.good, "good_pm": g.good_pm, "span_ns": g.span_ns,
               "good_per_second_milli": g.good_per_second_milli})
    });
    let workers: Vec<Value> = figures
        .workers
        .iter()
        .map(|w| {
            json!({"worker": w.worker, "completed": w.completed, "ttft_mean_us": w.ttft_mean_us,
                   "tpot_mean_us": w.tpot_mean_us, "predicted_mean_milli": w.predicted_mean_milli,
                   "us_per_predicted_token": w.us_per_predicted_token})
        })
        .collect();
    json!({
        "counts": {
            "decisions": c.decisions, "routed": c.routed, "rejected": c.rejected,
            "completion_lines": c.completion_lines, "matched": c.matched,
            "dropped": c.dropped, "rejected_served": c.rejected_served,
            "unrouted": c.unrouted, "retried": c.retried, "cancelled": c.cancelled,
            "errors": c.errors, "completed": c.completed, "error_rate_pm": c.error_rate_pm,
        },
        "prediction": {
            "ttft_rank_gamma_pm": figures.ttft_rank_gamma_pm,
            "us_per_predicted_token": figures.us_per_predicted_token,
        },
        "goodput": goodput,
        "workers": workers,
    })
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
    if let Some(cohorts) = &join.figures.cohorts {
        cohort_lines(&mut out, cohorts, join.slo.is_some(), printable);
    }
    out
}

/// One line per cohort (SPEC.md §14.3), after the workers.
fn cohort_lines(
    out: &mut String,
    cohorts: &[CohortFigures],
    with_goodput: bool,
    printable: &dyn Fn(&str) -> String,
) {
    let good_header = if with_goodput { " good" } else { "" };
    let _ = writeln!(
        out,
        "cohort (tenant/model/adapter)     routed  matched  dropped completed   errors gamma_pm{good_header}"
    );
    for cohort in cohorts {
        let c = &cohort.figures.counts;
        let good = match (&cohort.figures.goodput, with_goodput) {
            (Some(g), true) => format!(" {}", g.good),
            _ => String::new(),
        };
        let name = format!(
            "{}/{}/{}",
            printable(&cohort.tenant),
            printable(&cohort.model),
            printable(&cohort.adapter)
        );
        let _ = writeln!(
            out,
            "{name:<32} {:>7} {:>8} {:>8} {:>9} {:>8} {:>8}{good}",
            c.routed,
            c.matched,
            c.dropped,
            c.completed,
            c.errors,
            or_dash(cohort.figures.ttft_rank_gamma_pm)
        );
    }
}

fn goodput_line(out: &mut String, slo: crate::join::figures::Slo, g: &Goodput) {
    let _ = writeln!(
        out,
        "goodput ({}): good {}  good_pm {}  span_ns {}  good_per_second_milli {}",
        slo.objectives_text("<="),
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
