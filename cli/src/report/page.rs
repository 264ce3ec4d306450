//! The report page: the view model handed to the minijinja template
//! (`cli/templates/report.html`) and the size budget.
//!
//! The page embeds everything it shows (CSS, script, SVG) and fetches nothing, which its
//! Content-Security-Policy enforces. Per-decision detail is the only part that grows
//! with the trace, so [`render_within_budget`] keeps the interesting decisions plus a
//! sample (see [`super::select`]) and halves the sample, then the cap per kind, until
//! the page's bytes fit [`REPORT_BYTES_MAX`]; the page states what it kept. A request id
//! can be any length, so the page shows a long one cut (see [`super::shown`]).

use super::charts;
use super::diff::{self, DiffEntry};
use super::model::{DecisionDoc, Lab, RowDoc};
use super::select::{self, KINDS};
use super::shown::{shown_request_id, REQUEST_ID_SHOWN_MAX_BYTES};
use kvroute_core::route::metrics::Metrics;
use kvroute_core::Policy;
use minijinja::Environment;
use serde::Serialize;
use std::collections::BTreeMap;

/// The report's size budget: a page this size opens in a second in a browser.
pub const REPORT_BYTES_MAX: usize = 10_000_000;
/// Rows of each log listed on the page; the page says how many there are in all.
const LOG_ROWS_MAX: usize = 300;
/// Differing decisions listed in the shadow-diff section.
const SHADOW_ROWS_MAX: usize = 200;

const TEMPLATE_HTML: &str = include_str!("../../templates/report.html");
const TEMPLATE_CSS: &str = include_str!("../../templates/report.css");
const TEMPLATE_JS: &str = include_str!("../../templates/report.js");

#[derive(Serialize)]
struct PolicyView<'a> {
    name: &'a str,
    slot: usize,
    metrics: &'a Metrics,
}

#[derive(Serialize)]
struct Chart {
    title: String,
    svg: String,
}

#[derive(Serialize)]
struct KindView {
    name: &'static str,
    label: &'static str,
}

#[derive(Serialize)]
struct KindCountView {
    name: &'static str,
    label: &'static str,
    total: usize,
    kept: usize,
}

#[derive(Serialize)]
struct DetailView<'a> {
    policy: &'a str,
    decision: &'a DecisionDoc,
    /// The request id as the page shows it ([`shown_request_id`]).
    request: String,
    kinds: String,
    kind_labels: String,
    svg: String,
}

#[derive(Serialize)]
struct PolicyDetail<'a> {
    policy: &'a str,
    total: usize,
    kept: usize,
    complete: bool,
    counts: Vec<KindCountView>,
}

#[derive(Serialize)]
struct StaleRow<'a> {
    log: &'static str,
    seq: u64,
    tick: u64,
    worker: &'a str,
    evidence: String,
}

#[derive(Serialize)]
struct BoundaryRow<'a> {
    seq: u64,
    tick: u64,
    request: String,
    worker: &'a str,
    reasons: String,
}

#[derive(Serialize, Default)]
struct CohortRow {
    model: String,
    adapter: String,
    policy: String,
    requests: u64,
    routed: u64,
    hits: u64,
    reused: u64,
    recomputed: u64,
    latency_mean_milli: u64,
}

#[derive(Serialize)]
struct Shadow<'a> {
    baseline: &'a str,
    candidate: &'a str,
    summary: String,
    entries: Vec<DiffEntry>,
    differing: usize,
}

#[derive(Serialize)]
struct PageView<'a> {
    source: &'a str,
    trace_digest: &'a str,
    receipt_digest: &'a str,
    workers: usize,
    decisions: usize,
    budget_mb: usize,
    sample: usize,
    per_kind_max: usize,
    /// How many request ids are shown cut, and the length they are cut at.
    request_ids_cut: usize,
    request_id_shown_max_bytes: usize,
    close_call_margin_milli: u64,
    default_policy: &'a str,
    policies: Vec<PolicyView<'a>>,
    bars: Vec<Chart>,
    work: Vec<Chart>,
    work_lines_max: usize,
    kinds: Vec<KindView>,
    details: Vec<PolicyDetail<'a>>,
    detail_decisions: Vec<DetailView<'a>>,
    stale_rows: Vec<StaleRow<'a>>,
    stale_total: usize,
    boundary_rows: Vec<BoundaryRow<'a>>,
    boundary_total: usize,
    log_rows_max: usize,
    cohorts: Option<Vec<CohortRow>>,
    /// A trace was given but no request id of the receipt is in it.
    cohorts_unmatched: bool,
    shadow: Option<Shadow<'a>>,
    shadow_error: Option<String>,
    completions: Option<&'a super::completions::CompletionsView>,
}

/// A rendered page and what it kept.
pub struct Rendered {
    pub html: String,
    /// Decisions of all runs shown in detail, and in all.
    pub detail_decisions: usize,
    pub decisions: usize,
}

/// How much per-decision detail a page carries: the evenly spaced sample and the cap
/// per interesting kind, per policy.
#[derive(Debug, Clone, Copy)]
struct Detail {
    sample: usize,
    per_kind: usize,
}

/// Renders the page within [`REPORT_BYTES_MAX`] bytes.
pub fn render_within_budget(
    lab: &Lab,
    shadow: (Policy, Policy),
    sample: usize,
) -> Result<Rendered, minijinja::Error> {
    render_within(lab, shadow, sample, REPORT_BYTES_MAX)
}

/// Halves the sample of per-decision detail, then the cap per kind, until the page's
/// bytes fit `budget_bytes`. With neither left, the page is written anyway: its size is
/// then the tables', which the trace's own ids and worker count set.
fn render_within(
    lab: &Lab,
    shadow: (Policy, Policy),
    sample: usize,
    budget_bytes: usize,
) -> Result<Rendered, minijinja::Error> {
    let mut detail = Detail {
        sample,
        per_kind: select::PER_KIND_MAX,
    };
    loop {
        let rendered = render(lab, shadow, detail)?;
        if rendered.html.len() <= budget_bytes || detail.per_kind == 0 {
            return Ok(rendered);
        }
        if detail.sample > 0 {
            detail.sample /= 2;
        } else {
            detail.per_kind /= 2;
        }
    }
}

fn metric_bars(lab: &Lab) -> Vec<Chart> {
    type Pick = fn(&Metrics) -> u64;
    let metrics: [(&str, Pick); 9] = [
        ("recomputed tokens", |m| m.recomputed_tokens),
        ("cache hits", |m| m.cache_hits),
        ("load skew (milli)", |m| m.load_skew_milli),
        ("latency mean (milli-ticks)", |m| m.latency_proxy_mean_milli),
        ("latency p95 (milli-ticks)", |m| m.latency_proxy_p95_milli),
        ("stale events", |m| m.stale_event_rejections),
        ("boundary rejections", |m| m.boundary_rejections),
        ("overload escapes", |m| m.overload_escapes),
        ("dominated choices", |m| m.dominated_choices),
    ];
    metrics
        .iter()
        .map(|(title, pick)| Chart {
            title: title.to_string(),
            svg: charts::bar_svg(
                title,
                &lab.runs
                    .iter()
                    .map(|r| pick(&r.metrics))
                    .collect::<Vec<_>>(),
            ),
        })
        .collect()
}

fn cohorts(lab: &Lab) -> Option<Vec<CohortRow>> {
    let facts = lab.facts.as_ref()?;
    if lab.requests_unmatched() {
        return None;
    }
    let mut rows: BTreeMap<(String, String, usize), CohortRow> = BTreeMap::new();
    let mut latency_sums: BTreeMap<(String, String, usize), u128> = BTreeMap::new();
    for (slot, run) in lab.runs.iter().enumerate() {
        for d in &run.decisions {
            let (model, adapter) = facts
                .cohort_of_request
                .get(&d.request)
                .cloned()
                .unwrap_or_default();
            let key = (model.clone(), adapter.clone(), slot);
            let row = rows.entry(key.clone()).or_insert_with(|| CohortRow {
                model,
                adapter,
                policy: run.policy.clone(),
                ..CohortRow::default()
            });
            row.requests += 1;
            if let Some(chosen) = d.chosen_row() {
                row.routed += 1;
                row.hits += u64::from(chosen.reuse > 0);
                row.reused += chosen.reuse;
                row.recomputed += chosen.recomputed;
                *latency_sums.entry(key).or_default() +=
                    facts.latency_proxy_milli(d).unwrap_or(0) as u128;
            }
        }
    }
    Some(
        rows.into_iter()
            .map(|(key, mut row)| {
                let sum = latency_sums.get(&key).copied().unwrap_or(0);
                row.latency_mean_milli = sum.checked_div(row.routed as u128).unwrap_or(0) as u64;
                row
            })
            .collect(),
    )
}

/// The decisions shown in detail, per run (a selection of `detail.sample` plus up to
/// `detail.per_kind` of each interesting kind), and what each run's selection kept.
fn detail_views<'a>(lab: &'a Lab, detail: &Detail) -> (Vec<PolicyDetail<'a>>, Vec<DetailView<'a>>) {
    let mut details = Vec::new();
    let mut detail_decisions = Vec::new();
    for run in &lab.runs {
        let selection = select::select(run, detail.sample, detail.per_kind);
        for &i in &selection.kept {
            let decision = &run.decisions[i];
            let kinds = select::kinds_of(&run.policy, decision);
            detail_decisions.push(DetailView {
                policy: &run.policy,
                decision,
                request: shown_request_id(&decision.request),
                kinds: kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(" "),
                kind_labels: kinds
                    .iter()
                    .map(|k| k.label())
                    .collect::<Vec<_>>()
                    .join(", "),
                svg: charts::pareto_svg(decision),
            });
        }
        details.push(PolicyDetail {
            policy: &run.policy,
            total: run.decisions.len(),
            kept: selection.kept.len(),
            complete: selection.complete,
            counts: selection
                .counts
                .iter()
                .map(|c| KindCountView {
                    name: c.kind.name(),
                    label: c.kind.label(),
                    total: c.total,
                    kept: c.kept,
                })
                .collect(),
        });
    }

    (details, detail_decisions)
}

/// The stale-evidence rows (both logs) and the boundary rows, each cut to
/// `LOG_ROWS_MAX`, with how many there were.
fn log_rows(lab: &Lab) -> (Vec<StaleRow<'_>>, usize, Vec<BoundaryRow<'_>>, usize) {
    // Both logs, and every row's evidence, are the same in every run (routing touches
    // neither the cache events nor the observations), so the first run lists them.
    let first = lab.runs.first();
    let mut stale_rows: Vec<StaleRow> = Vec::new();
    let mut boundary_rows: Vec<BoundaryRow> = Vec::new();
    if let Some(run) = first {
        for e in run.cache_log.iter().filter(|e| e.outcome != "applied") {
            stale_rows.push(StaleRow {
                log: "cache",
                seq: e.seq,
                tick: e.tick,
                worker: &e.worker,
                evidence: format!("{} at epoch {}: {}", e.op, e.epoch, e.outcome),
            });
        }
        for e in run
            .observation_log
            .iter()
            .filter(|e| e.outcome != "applied")
        {
            stale_rows.push(StaleRow {
                log: "load",
                seq: e.seq,
                tick: e.tick,
                worker: &e.worker,
                evidence: format!("observed at tick {}: {}", e.observed_tick, e.outcome),
            });
        }
        stale_rows.sort_by_key(|r| (r.tick, r.seq));
        for d in &run.decisions {
            for row in d.candidates.iter().filter(|r| r.has_boundary_reason()) {
                boundary_rows.push(BoundaryRow {
                    seq: d.seq,
                    tick: d.tick,
                    request: shown_request_id(&d.request),
                    worker: &row.worker,
                    reasons: boundary_reasons(row),
                });
            }
        }
    }
    let (stale_total, boundary_total) = (stale_rows.len(), boundary_rows.len());
    stale_rows.truncate(LOG_ROWS_MAX);
    boundary_rows.truncate(LOG_ROWS_MAX);

    (stale_rows, stale_total, boundary_rows, boundary_total)
}

/// The shadow diff of `candidate` against `baseline` for the page, or why there is none.
fn shadow_view(lab: &Lab, shadow: (Policy, Policy)) -> (Option<Shadow<'_>>, Option<String>) {
    let (baseline, candidate) = (shadow.0.name(), shadow.1.name());
    let shadow_diff = match (lab.run(baseline), lab.run(candidate)) {
        (Some(b), Some(c)) => diff::diff((baseline, b), (candidate, c), lab.facts.as_ref()),
        _ => Err(format!(
            "the receipt has no {baseline} or no {candidate} run"
        )),
    };
    let (shadow_view, shadow_error) = match &shadow_diff {
        Ok(d) => (
            Some(Shadow {
                baseline,
                candidate,
                summary: d.summary_line(),
                entries: d.entries[..d.entries.len().min(SHADOW_ROWS_MAX)]
                    .iter()
                    .map(|e| DiffEntry {
                        request: shown_request_id(&e.request),
                        ..e.clone()
                    })
                    .collect(),
                differing: d.entries.len(),
            }),
            None,
        ),
        Err(e) => (None, Some(e.clone())),
    };

    (shadow_view, shadow_error)
}

fn render(
    lab: &Lab,
    shadow: (Policy, Policy),
    detail: Detail,
) -> Result<Rendered, minijinja::Error> {
    let worker_ids = lab.worker_ids();
    let (details, detail_decisions) = detail_views(lab, &detail);
    let (stale_rows, stale_total, boundary_rows, boundary_total) = log_rows(lab);
    let (shadow_view, shadow_error) = shadow_view(lab, shadow);
    let candidate = shadow.1.name();
    let view = PageView {
        source: &lab.source,
        trace_digest: &lab.trace_digest,
        receipt_digest: &lab.receipt_digest,
        workers: worker_ids.len(),
        decisions: lab.runs.first().map_or(0, |r| r.decisions.len()),
        budget_mb: REPORT_BYTES_MAX / 1_000_000,
        sample: detail.sample,
        per_kind_max: detail.per_kind,
        request_ids_cut: lab.runs.first().map_or(0, |r| {
            r.decisions
                .iter()
                .filter(|d| d.request.len() > REQUEST_ID_SHOWN_MAX_BYTES)
                .count()
        }),
        request_id_shown_max_bytes: REQUEST_ID_SHOWN_MAX_BYTES,
        close_call_margin_milli: select::CLOSE_CALL_MARGIN_MILLI,
        default_policy: candidate,
        policies: lab
            .runs
            .iter()
            .enumerate()
            .map(|(slot, r)| PolicyView {
                name: &r.policy,
                slot,
                metrics: &r.metrics,
            })
            .collect(),
        bars: metric_bars(lab),
        work: lab
            .runs
            .iter()
            .map(|r| Chart {
                title: r.policy.clone(),
                svg: charts::assigned_work_svg(r, &worker_ids),
            })
            .collect(),
        work_lines_max: charts::WORK_LINES_MAX,
        kinds: KINDS
            .iter()
            .map(|k| KindView {
                name: k.name(),
                label: k.label(),
            })
            .collect(),
        details,
        detail_decisions,
        stale_rows,
        stale_total,
        boundary_rows,
        boundary_total,
        log_rows_max: LOG_ROWS_MAX,
        cohorts: cohorts(lab),
        cohorts_unmatched: lab.requests_unmatched(),
        shadow: shadow_view,
        shadow_error,
        completions: lab.completions.as_ref(),
    };
    let detail_count = view.detail_decisions.len();
    let decisions = lab.runs.iter().map(|r| r.decisions.len()).sum();
    let mut env = Environment::new();
    env.add_template("report.html", TEMPLATE_HTML)?;
    env.add_template("report.css", TEMPLATE_CSS)?;
    env.add_template("report.js", TEMPLATE_JS)?;
    let html = env
        .get_template("report.html")?
        .render(minijinja::value::Serde(&view))?;
    Ok(Rendered {
        html,
        detail_decisions: detail_count,
        decisions,
    })
}

fn boundary_reasons(row: &RowDoc) -> String {
    row.reasons
        .iter()
        .filter(|r| super::model::BOUNDARY_REASONS.contains(&r.as_str()))
        .cloned()
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        let trace = kvroute_core::parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes())
            .expect("the lab trace parses");
        super::super::lab_of_trace("lab".into(), &trace)
    }

    /// With no sample left, the cap per kind is halved too, until the bytes fit: the
    /// budget is bytes, whatever makes a decision's detail large.
    #[test]
    fn a_page_over_budget_with_no_sample_keeps_fewer_of_each_kind() {
        let lab = lab();
        let shadow = (Policy::LeastLoad, Policy::CachePlusLoad);
        let detail = |per_kind| Detail {
            sample: 0,
            per_kind,
        };
        let small = render(&lab, shadow, detail(3)).unwrap();
        let full = render(&lab, shadow, detail(select::PER_KIND_MAX)).unwrap();
        assert!(small.html.len() < full.html.len());
        let fitted = render_within(&lab, shadow, 60, small.html.len()).unwrap();
        assert!(fitted.html.len() <= small.html.len());
        assert!(fitted.detail_decisions > 0, "some detail is left");
        let words = fitted.html.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains("up to 3 decisions of each interesting kind"));
    }
}
