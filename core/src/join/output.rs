//! A join written out (SPEC.md §14.3): the table a person reads, the canonical
//! `kvroute-join/2` document, the per-worker CSV, and the gates' lines on stderr
//! (§14.7).

use crate::input::json::quote_str;
use crate::join::attribution::Attribution;
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
    let mut value = json!({
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
    });
    // Written only when the records carry the figures, so other documents keep their
    // bytes (SPEC.md §14.3).
    if let (Some(attribution), Value::Object(members)) = (&figures.attribution, &mut value) {
        members.insert("attribution".to_owned(), attribution_value(attribution));
    }
    value
}

/// The `attribution` member (SPEC.md §14.3, §14.7), sums saturated at `B`.
fn attribution_value(a: &Attribution) -> Value {
    let workers: Vec<Value> = a
        .workers
        .iter()
        .map(|w| {
            json!({"worker": w.worker, "attributed": w.attributed,
                   "phantom": saturated(w.phantom), "missed": saturated(w.missed),
                   "drifted": w.drifted, "drift_pm": w.drift_pm})
        })
        .collect();
    json!({
        "attributed": a.attributed, "unknown": a.unknown,
        "cached_over_prompt": a.cached_over_prompt, "served_elsewhere": a.served_elsewhere,
        "served_outside_fleet": a.served_outside_fleet, "served_unknown": a.served_unknown,
        "prompt_tokens": saturated(a.prompt_tokens),
        "cached_tokens": saturated(a.cached_tokens),
        "lost_tokens": saturated(a.lost_tokens),
        "workload": saturated(a.workload), "boundary": saturated(a.boundary),
        "routing_paid_for_load": saturated(a.routing_paid_for_load),
        "routing_other": saturated(a.routing_other),
        "elsewhere_lost": saturated(a.elsewhere_lost),
        "elsewhere_gained": saturated(a.elsewhere_gained),
        "phantom": saturated(a.phantom), "missed": saturated(a.missed),
        "hidden": a.hidden, "drifted": a.drifted, "drift_pm": a.drift_pm,
        "elsewhere_pm": a.elsewhere_pm, "workers": workers,
    })
}

/// A sum as the document writes it: exact, or `B` when it would pass it (§14.5).
fn saturated(value: u128) -> u64 {
    value.min(u128::from(crate::input::limits::JSON_INTEGER_MAX)) as u64
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
    if let Some(attribution) = &join.figures.attribution {
        attribution_lines(&mut out, attribution, printable);
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

/// The attribution line and one line per serving worker that drifted (SPEC.md
/// §14.7), figures saturated as in the document.
fn attribution_lines(out: &mut String, a: &Attribution, printable: &dyn Fn(&str) -> String) {
    let _ = writeln!(
        out,
        "attribution: attributed {}  unknown {}  lost {} = workload {} + boundary {} + \
         routing {} (paid for load) + {} (other) + elsewhere {} - {} + phantom {} - missed {} \
         drift_pm {}  elsewhere_pm {}",
        a.attributed,
        a.unknown,
        saturated(a.lost_tokens),
        saturated(a.workload),
        saturated(a.boundary),
        saturated(a.routing_paid_for_load),
        saturated(a.routing_other),
        saturated(a.elsewhere_lost),
        saturated(a.elsewhere_gained),
        saturated(a.phantom),
        saturated(a.missed),
        a.drift_pm,
        a.elsewhere_pm
    );
    for w in a.workers.iter().filter(|w| w.drifted > 0) {
        let _ = writeln!(
            out,
            "attribution worker {}: attributed {}  phantom {}  missed {}  drifted {}  drift_pm {}",
            printable(&w.worker),
            w.attributed,
            saturated(w.phantom),
            saturated(w.missed),
            w.drifted,
            w.drift_pm
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

/// The gates `join` was given, each a per-mille from 0 to 1000 (SPEC.md §14.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gates {
    pub max_drift_pm: Option<u64>,
    pub max_elsewhere_pm: Option<u64>,
}

/// One line for each figure above its gate, in SPEC.md §14.7's order, or the lines
/// saying a gate cannot be judged when nothing of the run is attributed. Names are
/// quoted as §2.2 quotes them; the caller escapes them for its terminal. Empty when
/// every gate passed.
pub fn gate_lines(join: &Join, gates: Gates) -> Vec<String> {
    let run = join.figures.attribution.as_ref();
    if run.is_none_or(|a| a.attributed == 0) {
        let mut lines = Vec::new();
        if gates.max_drift_pm.is_some() {
            lines.push(cannot_judge("--max-drift-pm", "drift"));
        }
        if gates.max_elsewhere_pm.is_some() {
            lines.push(cannot_judge("--max-elsewhere-pm", "served elsewhere"));
        }
        return lines;
    }
    let mut subjects: Vec<(String, &Attribution)> = Vec::new();
    if let Some(run) = run {
        subjects.push((format!("run {}", join.run.name()), run));
    }
    for cohort in join.figures.cohorts.iter().flatten() {
        if let Some(attribution) = &cohort.figures.attribution {
            let about = format!(
                "cohort {} {} {}",
                quote_str(&cohort.tenant),
                quote_str(&cohort.model),
                quote_str(&cohort.adapter)
            );
            subjects.push((about, attribution));
        }
    }
    let mut lines = Vec::new();
    if let Some(max) = gates.max_drift_pm {
        let above = |pm: u64, attributed: u64, about: &str| {
            (pm > max).then(|| {
                format!(
                    "kvroute join: drift {pm}‰ of {attributed} attributed records is above \
                     --max-drift-pm {max} ({about})"
                )
            })
        };
        for (about, a) in &subjects {
            lines.extend(above(a.drift_pm, a.attributed, about));
        }
        for w in run.map_or(&[][..], |a| &a.workers[..]) {
            let about = format!("worker {}", quote_str(&w.worker));
            lines.extend(above(w.drift_pm, w.attributed, &about));
        }
    }
    if let Some(max) = gates.max_elsewhere_pm {
        for (about, a) in &subjects {
            if a.elsewhere_pm > max {
                lines.push(format!(
                    "kvroute join: served elsewhere {}‰ of {} attributed records is above \
                     --max-elsewhere-pm {max} ({about})",
                    a.elsewhere_pm, a.attributed
                ));
            }
        }
    }
    lines
}

fn cannot_judge(option: &str, figure: &str) -> String {
    format!(
        "kvroute join: {option}: no completed record carries cached tokens, so {figure} \
         cannot be judged"
    )
}
