//! SPEC §14.7: why a completed record's prompt was not served from cache. For each
//! completed record that carries a cached figure, the decision it matched is read row by
//! row, straight from the formulas of §14.7's table, into eight parts that add up to
//! `prompt − cached`; the document's `attribution` member sums them, with the drift
//! figures and one entry per serving worker. The gate lines of `--max-drift-pm` and
//! `--max-elsewhere-pm` are read back from a written document, so a harness can compare
//! them with the command line's stderr.
//!
//! Readings (where §14.7 leaves a choice):
//! - The chosen row and the serving row are the first row with that worker.
//! - A part given as a difference that a well-formed receipt never makes negative
//!   (`best_eligible − best_choosable`, `best_choosable − predicted`) is floored at 0, so
//!   a receipt that breaks §5's choice rule breaks the identity rather than writing a
//!   negative figure.
//! - `dynamo_default` takes the `cost_milli` score; any run whose policy is not named in
//!   §14.7 (`round_robin`, `longest_prefix`, another name) has no load score unless its
//!   decision is an `overload_escape`.
//! - "A matched record of the run has a cached figure or a serving worker" (§14.3) looks
//!   at each matched id's record (its first line, §14.2), cancelled, failed and
//!   not-completed ones included; a later line of the same id and a rejected decision's
//!   record (`rejected_served`, not matched) do not count.
//! - A cached figure is an integer as §1.1 writes one (plain digits): `1e2`, `5.0` and
//!   `-0` are not integers (AIPerf's `value`, Dynamo's `cached_tokens`).
//! - `hidden` looks at the eligible rows only, as §14.7 says ("some eligible row").
//! - The document's members are written in canonical order (§6.1 sorts an object's
//!   names), so §14.3's listing gives the members, not their byte order.
//! - The gate compares `figure > N`; with no attributed record in the run (or no
//!   `attribution` member at all) only the "cannot be judged" lines are given, one per
//!   gate given.

use std::collections::BTreeMap;

use super::{number, Decision, Record, Row};
use crate::jcs::Json;
use crate::json::{self, Node};

/// The reasons after which a row's holdings are not in the receipt (§4.2, §4.3).
const UNMEASURED_REASONS: [&str; 5] = [
    "stale_view",
    "evidence_gap",
    "tenant_mismatch",
    "model_mismatch",
    "adapter_mismatch",
];

/// Where an attributed record ran, against where it was routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    /// On the chosen worker (named by the record).
    Chosen,
    /// On another worker of the run.
    Elsewhere,
    /// On a worker the run has no row for.
    OutsideFleet,
    /// The record names no worker: taken to be the chosen one.
    Unknown,
}

/// One attributed record's figures (SPEC §14.7, "Per attributed record").
#[derive(Debug, Clone)]
struct Parts<'a> {
    prompt: u128,
    cached: u128,
    cached_over_prompt: bool,
    served: Served,
    /// The serving row's worker, when there is a serving row.
    serving_row_worker: Option<&'a str>,
    workload: u128,
    boundary: u128,
    routing_paid_for_load: u128,
    routing_other: u128,
    elsewhere_lost: u128,
    elsewhere_gained: u128,
    phantom: u128,
    missed: u128,
    hidden: bool,
}

fn has_reason(row: &Row, reason: &str) -> bool {
    row.reasons.iter().any(|r| r == reason)
}

/// The rows the run could choose from (SPEC §5, §4.5), as §14.7 lists them.
fn choosable_rows<'r>(policy: &str, rows: &'r [Row]) -> Vec<&'r Row> {
    let eligible: Vec<&Row> = rows.iter().filter(|r| r.eligible).collect();
    if policy != "cache_plus_load" {
        return eligible;
    }
    let unreserved: Vec<&Row> = eligible
        .iter()
        .copied()
        .filter(|r| !has_reason(r, "overloaded") && !has_reason(r, "cold_reserve"))
        .collect();
    if !unreserved.is_empty() {
        return unreserved;
    }
    let under_cap: Vec<&Row> = eligible
        .iter()
        .copied()
        .filter(|r| !has_reason(r, "overloaded"))
        .collect();
    if !under_cap.is_empty() {
        return under_cap;
    }
    eligible
}

/// The policy's load score of a row, `None` when the run has none (SPEC §14.7).
fn load_score(policy: &str, route_kind: &str, row: &Row) -> Option<u64> {
    if route_kind == "overload_escape" {
        return Some(row.after_milli);
    }
    match policy {
        "least_load" => Some(row.work_milli),
        "cache_plus_load" | "dynamo_default" => Some(row.cost_milli),
        _ => None,
    }
}

/// Whether the chosen row's score is below the best holder's: the choosable row with
/// `reuse = best_choosable` whose worker comes first in byte order.
fn traded_for_load(policy: &str, d: &Decision, chosen: &Row, choosable: &[&Row]) -> bool {
    let best_choosable = choosable.iter().map(|r| r.reuse).max().unwrap_or(0);
    let holder = choosable
        .iter()
        .filter(|r| r.reuse == best_choosable)
        .min_by(|a, b| a.worker.as_bytes().cmp(b.worker.as_bytes()));
    let Some(holder) = holder else {
        return false;
    };
    match (
        load_score(policy, &d.route_kind, chosen),
        load_score(policy, &d.route_kind, holder),
    ) {
        (Some(chosen_score), Some(holder_score)) => chosen_score < holder_score,
        _ => false,
    }
}

/// The parts of one completed record with a cached figure, `None` when its decision has
/// no chosen row (never for a matched record of a well-formed receipt).
fn parts<'a>(policy: &str, d: &'a Decision, rec: &Record, figure: u64) -> Option<Parts<'a>> {
    let (chosen_worker, _) = d.chosen.as_ref()?;
    let chosen = d.rows.iter().find(|r| &r.worker == chosen_worker)?;
    let prompt = u128::from(chosen.reuse) + u128::from(chosen.recomputed);
    let cached = u128::from(figure).min(prompt);
    let best_eligible = u128::from(
        d.rows
            .iter()
            .filter(|r| r.eligible)
            .map(|r| r.reuse)
            .max()
            .unwrap_or(0),
    );
    let choosable = choosable_rows(policy, &d.rows);
    let best_choosable = u128::from(choosable.iter().map(|r| r.reuse).max().unwrap_or(0));
    let predicted = u128::from(chosen.reuse);
    let (served, serving_row) = match &rec.serving_worker {
        Some(worker) => match d.rows.iter().find(|r| &r.worker == worker) {
            Some(row) if &row.worker == chosen_worker => (Served::Chosen, Some(row)),
            Some(row) => (Served::Elsewhere, Some(row)),
            None => (Served::OutsideFleet, None),
        },
        None => (Served::Unknown, Some(chosen)),
    };
    let served_reuse = u128::from(serving_row.map_or(0, |r| r.reuse));
    let routing = best_choosable.saturating_sub(predicted);
    let for_load = traded_for_load(policy, d, chosen, &choosable);
    let workload = prompt.saturating_sub(best_eligible);
    let hidden = workload > 0
        && d.rows.iter().any(|r| {
            r.eligible
                && UNMEASURED_REASONS
                    .iter()
                    .any(|reason| has_reason(r, reason))
        });
    Some(Parts {
        prompt,
        cached,
        cached_over_prompt: u128::from(figure) > prompt,
        served,
        serving_row_worker: serving_row.map(|r| r.worker.as_str()),
        workload,
        boundary: best_eligible.saturating_sub(best_choosable),
        routing_paid_for_load: if for_load { routing } else { 0 },
        routing_other: if for_load { 0 } else { routing },
        elsewhere_lost: predicted.saturating_sub(served_reuse),
        elsewhere_gained: served_reuse.saturating_sub(predicted),
        phantom: served_reuse.saturating_sub(cached),
        missed: cached.saturating_sub(served_reuse),
        hidden,
    })
}

/// `floor(1000 × part / whole)`, 0 when `whole` is 0.
fn per_mille(part: u128, whole: u128) -> u128 {
    (1000 * part).checked_div(whole).unwrap_or(0)
}

/// One `workers` entry's running figures: attributed, phantom, missed, drifted.
type WorkerSums = [u128; 4];

/// The `workers` entries: one per serving row's worker, in worker id byte order.
fn serving_workers<'a>(all: &[Parts<'a>]) -> Vec<Json<'a>> {
    let mut by_worker: BTreeMap<&'a str, WorkerSums> = BTreeMap::new();
    for p in all {
        if let Some(worker) = p.serving_row_worker {
            let sums = by_worker.entry(worker).or_default();
            sums[0] += 1;
            sums[1] += p.phantom;
            sums[2] += p.missed;
            sums[3] += u128::from(p.phantom > 0 || p.missed > 0);
        }
    }
    by_worker
        .into_iter()
        .map(|(worker, [n, phantom, missed, drifted])| {
            Json::Object(vec![
                ("worker", Json::Str(worker)),
                ("attributed", int(n)),
                ("phantom", int(phantom)),
                ("missed", int(missed)),
                ("drifted", int(drifted)),
                ("drift_pm", int(per_mille(drifted, n))),
            ])
        })
        .collect()
}

/// The `attribution` member over the completed records `completed` (each with the
/// decision it matched) of a run whose policy is `policy` (SPEC §14.7, "Sums").
pub(super) fn attribution<'a>(policy: &str, completed: &[(&'a Decision, &Record)]) -> Json<'a> {
    let mut unknown: u128 = 0;
    let mut all: Vec<Parts<'a>> = Vec::new();
    for (d, rec) in completed {
        match rec.cached_tokens {
            None => unknown += 1,
            Some(figure) => all.extend(parts(policy, d, rec, figure)),
        }
    }
    let count = |keep: &dyn Fn(&Parts) -> bool| all.iter().filter(|p| keep(p)).count() as u128;
    let sum = |take: &dyn Fn(&Parts) -> u128| all.iter().map(take).sum::<u128>();
    let attributed = all.len() as u128;
    let drifts = |p: &Parts| p.phantom > 0 || p.missed > 0;
    let drifted = count(&drifts);
    let away = count(&|p| matches!(p.served, Served::Elsewhere | Served::OutsideFleet));
    let workers = serving_workers(&all);
    Json::Object(vec![
        ("attributed", int(attributed)),
        ("unknown", int(unknown)),
        ("cached_over_prompt", int(count(&|p| p.cached_over_prompt))),
        (
            "served_elsewhere",
            int(count(&|p| p.served == Served::Elsewhere)),
        ),
        (
            "served_outside_fleet",
            int(count(&|p| p.served == Served::OutsideFleet)),
        ),
        (
            "served_unknown",
            int(count(&|p| p.served == Served::Unknown)),
        ),
        ("prompt_tokens", int(sum(&|p| p.prompt))),
        ("cached_tokens", int(sum(&|p| p.cached))),
        ("lost_tokens", int(sum(&|p| p.prompt - p.cached))),
        ("workload", int(sum(&|p| p.workload))),
        ("boundary", int(sum(&|p| p.boundary))),
        (
            "routing_paid_for_load",
            int(sum(&|p| p.routing_paid_for_load)),
        ),
        ("routing_other", int(sum(&|p| p.routing_other))),
        ("elsewhere_lost", int(sum(&|p| p.elsewhere_lost))),
        ("elsewhere_gained", int(sum(&|p| p.elsewhere_gained))),
        ("phantom", int(sum(&|p| p.phantom))),
        ("missed", int(sum(&|p| p.missed))),
        ("hidden", int(count(&|p| p.hidden))),
        ("drifted", int(drifted)),
        ("drift_pm", int(per_mille(drifted, attributed))),
        ("elsewhere_pm", int(per_mille(away, attributed))),
        ("workers", Json::Array(workers)),
    ])
}

fn int<'a>(value: u128) -> Json<'a> {
    number(i128::try_from(value).unwrap_or(i128::MAX))
}

/// Whether a matched record carries a figure §14.7 reads: `attribution` is written
/// only when one of the run's does (SPEC §14.3).
pub(super) fn carries_figure(rec: &Record) -> bool {
    rec.cached_tokens.is_some() || rec.serving_worker.is_some()
}

// ---------------------------------------------------------------------------------------
// The gate (SPEC §14.7, "The gate")
// ---------------------------------------------------------------------------------------

/// A member's integer value (0 when absent or not a plain integer).
fn figure(members: &[json::Member], name: &str) -> u128 {
    match json::member(members, name) {
        Some(Node::Number(text)) => text.parse().unwrap_or(0),
        _ => 0,
    }
}

fn text_of(members: &[json::Member], name: &str) -> String {
    match json::member(members, name) {
        Some(Node::String(text)) => text.to_string(),
        _ => String::new(),
    }
}

/// What one gate line is about, with its attribution's members.
struct Judged<'m, 'd> {
    about: String,
    attribution: &'m [json::Member<'d>],
}

fn attribution_of<'m, 'd>(object: &'m [json::Member<'d>]) -> Option<&'m [json::Member<'d>]> {
    match json::member(object, "attribution") {
        Some(Node::Object(members)) => Some(members),
        _ => None,
    }
}

fn drift_line(figures: &[json::Member], max: u64, about: &str) -> Option<String> {
    let pm = figure(figures, "drift_pm");
    (pm > u128::from(max)).then(|| {
        format!(
            "kvroute join: drift {pm}‰ of {} attributed records is above --max-drift-pm {max} ({about})",
            figure(figures, "attributed")
        )
    })
}

fn elsewhere_line(figures: &[json::Member], max: u64, about: &str) -> Option<String> {
    let pm = figure(figures, "elsewhere_pm");
    (pm > u128::from(max)).then(|| {
        format!(
            "kvroute join: served elsewhere {pm}‰ of {} attributed records is above --max-elsewhere-pm {max} ({about})",
            figure(figures, "attributed")
        )
    })
}

/// SPEC §14.7's gate: the stderr lines `join` prints, in order, for a written
/// `kvroute-join/2` document (canonical bytes, with or without the final `\n`) under
/// `--max-drift-pm` and `--max-elsewhere-pm` (each `None` when not given). An empty list
/// means exit as usual; any line means exit 3. A document that is not a join document
/// gives no line.
pub fn gate_lines(
    document: &[u8],
    max_drift_pm: Option<u64>,
    max_elsewhere_pm: Option<u64>,
) -> Vec<String> {
    let trimmed = document.strip_suffix(b"\n").unwrap_or(document);
    let Ok(Node::Object(top)) = json::parse(trimmed) else {
        return Vec::new();
    };
    let run = attribution_of(&top);
    if run.is_none_or(|figures| figure(figures, "attributed") == 0) {
        let mut lines = Vec::new();
        if max_drift_pm.is_some() {
            lines.push("kvroute join: --max-drift-pm: no completed record carries cached tokens, so drift cannot be judged".to_owned());
        }
        if max_elsewhere_pm.is_some() {
            lines.push("kvroute join: --max-elsewhere-pm: no completed record carries cached tokens, so served elsewhere cannot be judged".to_owned());
        }
        return lines;
    }
    let run = run.unwrap_or(&[]);
    let mut judged = vec![Judged {
        about: format!("run {}", text_of(&top, "run")),
        attribution: run,
    }];
    if let Some(Node::Array(cohorts)) = json::member(&top, "cohorts") {
        for cohort in cohorts {
            let Node::Object(members) = cohort else {
                continue;
            };
            judged.push(Judged {
                about: format!(
                    "cohort {} {} {}",
                    json::quote_str(&text_of(members, "tenant")),
                    json::quote_str(&text_of(members, "model")),
                    json::quote_str(&text_of(members, "adapter"))
                ),
                attribution: attribution_of(members).unwrap_or(&[]),
            });
        }
    }
    let mut lines = Vec::new();
    if let Some(max) = max_drift_pm {
        for j in &judged {
            lines.extend(drift_line(j.attribution, max, &j.about));
        }
        if let Some(Node::Array(workers)) = json::member(run, "workers") {
            for worker in workers {
                if let Node::Object(members) = worker {
                    let about = format!("worker {}", json::quote_str(&text_of(members, "worker")));
                    lines.extend(drift_line(members, max, &about));
                }
            }
        }
    }
    if let Some(max) = max_elsewhere_pm {
        for j in &judged {
            lines.extend(elsewhere_line(j.attribution, max, &j.about));
        }
    }
    lines
}
