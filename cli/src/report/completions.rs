//! The report's Completions panel (SPEC.md §14.6): the report's receipt joined with a
//! completions file exactly as `kvroute join` joins them, shown as the join's counts,
//! prediction figures, goodput and per-worker calibration table, and, when the records
//! carry cached tokens or serving workers, why requests missed the cache
//! ([`super::missed`]).

use crate::failure::Failure;
use kvroute_core::join::Slo;
use kvroute_core::join::{self, CompletionsFormat, JoinOptions, TraceCohorts};
use kvroute_core::Policy;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `report --completions FILE [--completions-format F] [--slo ...] [--run P]`.
pub struct CompletionsArgs {
    pub file: PathBuf,
    pub format: Option<CompletionsFormat>,
    pub slo: Option<Slo>,
    pub run: Policy,
}

/// One figure as the panel lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub name: &'static str,
    pub value: String,
}

/// One worker's calibration row.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    pub worker: String,
    pub completed: u64,
    pub ttft_mean_us: u64,
    pub tpot_mean_us: u64,
    pub predicted_mean_milli: u64,
    pub us_per_predicted_token: String,
    /// Its `us_per_predicted_token` is above the run's: its predictions run low.
    pub runs_low: bool,
}

/// What the template shows.
#[derive(Debug, Clone, Serialize)]
pub struct CompletionsView {
    pub file: String,
    pub format: &'static str,
    pub run: &'static str,
    pub slo: String,
    pub counts: Vec<Figure>,
    pub prediction: Vec<Figure>,
    pub goodput: Option<Vec<Figure>>,
    pub workers: Vec<WorkerRow>,
    /// The Why it missed view, when the join has an attribution (SPEC.md §14.6).
    pub missed: Option<super::missed::MissedView>,
}

fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

/// The receipt `replay --format json` writes for the report's trace input (or the
/// built-in lab trace), for a join with it.
pub fn receipt_of_trace(input: Option<&Path>) -> Result<Vec<u8>, Failure> {
    let bytes = match input {
        None => kvroute_core::LAB_TRACE_JSON.as_bytes().to_vec(),
        Some(path) if path.as_os_str() == "-" => {
            return Err(Failure::invalid(vec![
                "report: --completions with a trace on stdin: give the trace as a file, or \
                 its receipt"
                    .to_owned(),
            ]))
        }
        Some(path) => super::read_input(path, "input")?,
    };
    kvroute_core::replay_bytes(&bytes).map_err(|errors| Failure::invalid(errors.lines()))
}

/// Joins `receipt` with the completions (every error is `join`'s, SPEC.md §14.5), with
/// the cohorts of the report's trace when it knows it.
pub fn panel(
    receipt_name: &Path,
    receipt: impl std::io::BufRead,
    args: &CompletionsArgs,
    id_key: Option<Vec<u8>>,
    cohorts: Option<TraceCohorts>,
) -> Result<CompletionsView, Failure> {
    let options = JoinOptions {
        run: Some(args.run),
        slo: args.slo,
        id_key,
        format: args.format,
        trace: cohorts.map(Ok),
    };
    let completions = crate::join::open(&args.file, "completions")?;
    let (joined, attributed) = join::join_with_records(receipt, completions, &options)
        .map_err(|e| crate::join::failure(receipt_name, &args.file, None, args.run, e))?;
    let f = &joined.figures;
    let counts = count_figures(&f.counts);
    let prediction = vec![
        Figure {
            name: "ttft_rank_gamma_pm",
            value: or_dash(f.ttft_rank_gamma_pm),
        },
        Figure {
            name: "us_per_predicted_token",
            value: or_dash(f.us_per_predicted_token),
        },
    ];
    let goodput = f.goodput.as_ref().map(goodput_figures);
    let workers = worker_rows(f);
    let slo = match args.slo {
        None => "none declared".to_owned(),
        // The table's rule (§14.3) with the page's sign: `ttft ≤ 0.5 ms, tpot ≤ 50 ms`.
        Some(slo) => slo.objectives_text("≤"),
    };
    Ok(CompletionsView {
        file: args.file.display().to_string(),
        format: joined.format.name(),
        run: args.run.name(),
        slo,
        counts,
        prediction,
        goodput,
        workers,
        missed: super::missed::view(f, &attributed),
    })
}

/// The join's counts, each as a figure named for its member.
fn count_figures(c: &join::Counts) -> Vec<Figure> {
    [
        ("decisions", c.decisions),
        ("routed", c.routed),
        ("rejected", c.rejected),
        ("completion_lines", c.completion_lines),
        ("matched", c.matched),
        ("dropped", c.dropped),
        ("rejected_served", c.rejected_served),
        ("unrouted", c.unrouted),
        ("retried", c.retried),
        ("cancelled", c.cancelled),
        ("errors", c.errors),
        ("completed", c.completed),
        ("error_rate_pm", c.error_rate_pm),
    ]
    .into_iter()
    .map(|(name, value)| Figure {
        name,
        value: value.to_string(),
    })
    .collect()
}

/// The goodput figures, each named for its member.
fn goodput_figures(g: &join::Goodput) -> Vec<Figure> {
    [
        ("good", g.good),
        ("good_pm", g.good_pm),
        ("span_ns", g.span_ns),
        ("good_per_second_milli", g.good_per_second_milli),
    ]
    .into_iter()
    .map(|(name, value)| Figure {
        name,
        value: value.to_string(),
    })
    .collect()
}

/// One row a worker; a worker runs low when its µs per predicted token is above the
/// fleet's.
fn worker_rows(f: &join::JoinFigures) -> Vec<WorkerRow> {
    let fleet = f.us_per_predicted_token;
    f.workers
        .iter()
        .map(|w| WorkerRow {
            worker: super::shown::shown_request_id(&w.worker),
            completed: w.completed,
            ttft_mean_us: w.ttft_mean_us,
            tpot_mean_us: w.tpot_mean_us,
            predicted_mean_milli: w.predicted_mean_milli,
            us_per_predicted_token: or_dash(w.us_per_predicted_token),
            runs_low: matches!((w.us_per_predicted_token, fleet), (Some(own), Some(all)) if own > all),
        })
        .collect()
}
