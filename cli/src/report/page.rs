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
use super::diff::DiffEntry;
use super::gather::{BoundaryRow, CohortRow, ReportModel, StaleRow, LOG_ROWS_MAX};
use super::model::DecisionDoc;
use super::select::{self, Ordinals, KINDS};
use super::shown::{shown_request_id, REQUEST_ID_SHOWN_MAX_BYTES};
use kvroute_core::route::Metrics;
use kvroute_core::Policy;
use minijinja::Environment;
use serde::Serialize;

/// The report's size budget: a page this size opens in a second in a browser.
pub const REPORT_BYTES_MAX: usize = 10_000_000;
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
    stale_rows: &'a [StaleRow],
    stale_total: usize,
    boundary_rows: &'a [BoundaryRow],
    boundary_total: usize,
    log_rows_max: usize,
    cohorts: Option<&'a [CohortRow]>,
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
    model: &ReportModel,
    shadow: (Policy, Policy),
    sample: usize,
) -> Result<Rendered, minijinja::Error> {
    render_within(model, shadow, sample, REPORT_BYTES_MAX)
}

/// Halves the sample of per-decision detail, then the cap per kind, until the page's
/// bytes fit `budget_bytes`. With neither left, the page is written anyway: its size is
/// then the tables', which the trace's own ids and worker count set. The levels tried
/// are [`select::levels`], whose decisions the model holds.
fn render_within(
    model: &ReportModel,
    shadow: (Policy, Policy),
    sample: usize,
    budget_bytes: usize,
) -> Result<Rendered, minijinja::Error> {
    let levels = select::levels(sample);
    let mut level = 0;
    loop {
        let (sample, per_kind) = levels[level];
        let rendered = render(model, shadow, Detail { sample, per_kind })?;
        if rendered.html.len() <= budget_bytes || level + 1 == levels.len() {
            return Ok(rendered);
        }
        level += 1;
    }
}

fn metric_bars(model: &ReportModel) -> Vec<Chart> {
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
                &model
                    .runs
                    .iter()
                    .map(|r| pick(&r.metrics))
                    .collect::<Vec<_>>(),
            ),
        })
        .collect()
}

/// The decisions shown in detail, per run (a selection of `detail.sample` plus up to
/// `detail.per_kind` of each interesting kind, from those the model holds), and what
/// each run's selection kept.
fn detail_views<'a>(
    model: &'a ReportModel,
    detail: &Detail,
) -> (Vec<PolicyDetail<'a>>, Vec<DetailView<'a>>) {
    let mut details = Vec::new();
    let mut detail_decisions = Vec::new();
    for run in &model.runs {
        let ordinals: Vec<Ordinals> = run.held.iter().map(|held| held.at).collect();
        let selection = select::select_from(&run.counts, &ordinals, detail.sample, detail.per_kind);
        for &i in &selection.kept {
            let decision = &run.held[i].decision;
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
            total: run.counts.decisions,
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

/// The shadow diff of `candidate` against `baseline` for the page, or why there is none.
fn shadow_view(
    model: &ReportModel,
    shadow: (Policy, Policy),
) -> (Option<Shadow<'_>>, Option<String>) {
    let (baseline, candidate) = (shadow.0.name(), shadow.1.name());
    match &model.shadow {
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
    }
}

fn render(
    model: &ReportModel,
    shadow: (Policy, Policy),
    detail: Detail,
) -> Result<Rendered, minijinja::Error> {
    let (details, detail_decisions) = detail_views(model, &detail);
    let (shadow_view, shadow_error) = shadow_view(model, shadow);
    let candidate = shadow.1.name();
    let view = PageView {
        source: &model.source,
        trace_digest: &model.trace_digest,
        receipt_digest: &model.receipt_digest,
        workers: model.worker_ids.len(),
        decisions: model.runs.first().map_or(0, |r| r.counts.decisions),
        budget_mb: REPORT_BYTES_MAX / 1_000_000,
        sample: detail.sample,
        per_kind_max: detail.per_kind,
        request_ids_cut: model.request_ids_cut,
        request_id_shown_max_bytes: REQUEST_ID_SHOWN_MAX_BYTES,
        close_call_margin_milli: select::CLOSE_CALL_MARGIN_MILLI,
        default_policy: candidate,
        policies: model
            .runs
            .iter()
            .enumerate()
            .map(|(slot, r)| PolicyView {
                name: &r.policy,
                slot,
                metrics: &r.metrics,
            })
            .collect(),
        bars: metric_bars(model),
        work: model
            .runs
            .iter()
            .map(|r| Chart {
                title: r.policy.clone(),
                svg: r.work_svg.clone(),
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
        stale_rows: &model.stale_rows,
        stale_total: model.stale_total,
        boundary_rows: &model.boundary_rows,
        boundary_total: model.boundary_total,
        log_rows_max: LOG_ROWS_MAX,
        cohorts: model.cohorts.as_deref(),
        cohorts_unmatched: model.cohorts_unmatched,
        shadow: shadow_view,
        shadow_error,
        completions: model.completions.as_ref(),
    };
    let detail_count = view.detail_decisions.len();
    let decisions = model.runs.iter().map(|r| r.counts.decisions).sum();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The lab trace's page model, holding the decisions of every level from a sample
    /// of 60.
    fn lab(shadow: (Policy, Policy)) -> ReportModel {
        let trace = kvroute_core::parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes())
            .expect("the lab trace parses");
        let lab = super::super::lab_of_trace("lab".into(), &trace);
        super::super::model_of_lab(&lab, shadow, 60).expect("the lab's runs are whole")
    }

    /// With no sample left, the cap per kind is halved too, until the bytes fit: the
    /// budget is bytes, whatever makes a decision's detail large.
    #[test]
    fn a_page_over_budget_with_no_sample_keeps_fewer_of_each_kind() {
        let shadow = (Policy::LeastLoad, Policy::CachePlusLoad);
        let lab = lab(shadow);
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
