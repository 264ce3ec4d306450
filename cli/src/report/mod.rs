//! `kvroute report` and `kvroute diff`: the lab as a person looks at it.
//!
//! Both read a trace (replayed with core) or a receipt file with core's streaming
//! receipt reader. `diff` keeps the runs whole ([`model::Lab`]); `report` keeps only
//! what its page shows ([`gather`]: the aggregates and the decisions it can detail) and
//! renders a self-contained HTML page ([`page`]: a minijinja template under
//! `cli/templates/` with plotters SVG charts from [`charts`]) that opens offline; `diff`
//! lists the decisions where two runs choose differently ([`diff`]), the shadow mode of
//! a new policy against the serving one.

pub mod charts;
pub mod completions;
pub mod diff;
pub mod gather;
pub mod missed;
pub mod missed_charts;
pub mod model;
pub mod page;
pub mod select;
pub mod shown;

use super::{emit, read_input};
use crate::failure::Failure;
use gather::{Census, Gather, ReportModel};
pub use kvroute_cli::args::DiffFormat;
use kvroute_core::input::{self as receipt_reader, Layout, ReceiptOutline, ReceiptSink};
use kvroute_core::join::TraceCohorts;
use kvroute_core::output;
use kvroute_core::output::CsvIds;
use kvroute_core::replay;
use kvroute_core::route::Compiled;
use kvroute_core::{parse_trace, Policy, Trace};
use model::{Lab, TraceFacts, RECEIPT_FORMAT, STREAM_FORMAT};
use serde::Deserialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Only the `format` member, to tell a receipt from a trace before parsing either.
#[derive(Deserialize)]
struct FormatProbe {
    format: Option<serde_json::Value>,
}

/// Whether `bytes` are a JSON Lines receipt: their first line that is not empty is an
/// object whose `format` is [`STREAM_FORMAT`]. Anything else is read as JSON.
fn is_stream(bytes: &[u8]) -> bool {
    let Some(head) = bytes.split(|&b| b == b'\n').find(|l| !l.is_empty()) else {
        return false;
    };
    serde_json::from_slice::<FormatProbe>(head)
        .ok()
        .and_then(|probe| probe.format)
        .is_some_and(|format| format == STREAM_FORMAT)
}

fn load_trace_bytes(bytes: &[u8]) -> Result<Trace, Failure> {
    parse_trace(bytes).map_err(|errors| Failure::invalid(errors.lines()))
}

/// A receipt to read: a file that starts as a canonical or a JSON Lines receipt does,
/// read as it streams in (and read again for each pass), or bytes read whole.
enum ReceiptInput<'a> {
    File(&'a Path, Layout),
    Bytes(Vec<u8>, Layout),
}

impl ReceiptInput<'_> {
    fn layout(&self) -> Layout {
        match self {
            ReceiptInput::File(_, layout) | ReceiptInput::Bytes(_, layout) => *layout,
        }
    }

    /// One pass of core's reader into `sink`; problems name `source`.
    fn read<S: ReceiptSink>(&self, source: &str, sink: &mut S) -> Result<ReceiptOutline, Failure> {
        let read = match self {
            ReceiptInput::File(path, layout) => {
                let file = std::fs::File::open(path).map_err(|e| {
                    Failure::invalid(vec![format!("{}: cannot read input: {e}", path.display())])
                })?;
                let reader = std::io::BufReader::with_capacity(1 << 20, file);
                receipt_reader::read_receipt_layout(reader, *layout, sink)
            }
            ReceiptInput::Bytes(bytes, layout) => {
                receipt_reader::read_receipt_layout(&bytes[..], *layout, sink)
            }
        };
        read.map_err(|problem| {
            Failure::invalid(vec![format!(
                "{source}: not a valid {}: {problem}",
                model::layout_name(self.layout())
            )])
        })
    }

    /// The receipt again, for `--completions`.
    fn reopen(&self) -> Result<Box<dyn BufRead + '_>, Failure> {
        Ok(match self {
            ReceiptInput::File(path, _) => Box::new(std::io::BufReader::new(
                std::fs::File::open(path).map_err(|e| {
                    Failure::invalid(vec![format!("{}: cannot read input: {e}", path.display())])
                })?,
            )),
            ReceiptInput::Bytes(bytes, _) => Box::new(&bytes[..]),
        })
    }
}

/// The layout of the receipt file at `path` when it starts as a canonical or a JSON
/// Lines receipt does; `None` for anything else (stdin, a trace, a receipt written some
/// other way, a file that cannot be read), which is read whole.
fn streamed_layout(path: &Path) -> Option<Layout> {
    if path.as_os_str() == "-" {
        return None;
    }
    let file = std::fs::File::open(path).ok()?;
    let mut reader = std::io::BufReader::new(file);
    let head = reader.fill_buf().ok()?;
    if head.starts_with(model::STREAM_HEAD) {
        Some(Layout::JsonLines)
    } else if head.starts_with(model::RECEIPT_HEAD) {
        Some(Layout::Json)
    } else {
        None
    }
}

/// What `report` and `diff` were given: a receipt, or a trace (None: the built-in lab
/// trace) replayed in memory. Each with where it came from, as messages name it.
enum Input<'a> {
    Receipt(String, ReceiptInput<'a>),
    Trace(String, Box<Trace>),
}

/// Tells a receipt from a trace: a receipt file by its first bytes ([`streamed_layout`]),
/// anything else read whole, a JSON Lines receipt by its first line ([`is_stream`]), a
/// JSON receipt by its `format`. `trace` is the `--trace` given, which only a receipt
/// takes; `id_key` needs it ([`check_id_key`]).
fn load_input<'a>(
    input: Option<&'a Path>,
    trace: Option<&Path>,
    id_key: Option<&Path>,
) -> Result<Input<'a>, Failure> {
    if let Some(path) = input {
        if let Some(layout) = streamed_layout(path) {
            check_id_key(id_key, trace)?;
            let source = path.display().to_string();
            return Ok(Input::Receipt(source, ReceiptInput::File(path, layout)));
        }
    }
    let (source, bytes) = match input {
        None => (
            "the built-in lab trace (fixtures/lab/trace.json)".to_owned(),
            kvroute_core::LAB_TRACE_JSON.as_bytes().to_vec(),
        ),
        Some(path) => (path.display().to_string(), read_input(path, "input")?),
    };
    check_id_key(id_key, trace)?;
    if is_stream(&bytes) {
        return Ok(Input::Receipt(
            source,
            ReceiptInput::Bytes(bytes, Layout::JsonLines),
        ));
    }
    let is_receipt = serde_json::from_slice::<FormatProbe>(&bytes)
        .ok()
        .and_then(|probe| probe.format)
        .is_some_and(|format| format == RECEIPT_FORMAT);
    if is_receipt {
        return Ok(Input::Receipt(
            source,
            ReceiptInput::Bytes(bytes, Layout::Json),
        ));
    }
    if trace.is_some() {
        return Err(Failure::invalid(vec![format!(
            "{source}: --trace is for a receipt input, and this is a trace"
        )]));
    }
    let parsed = load_trace_bytes(&bytes);
    let parsed = match input {
        Some(path) => parsed.map_err(|f| f.in_file(path))?,
        None => parsed?,
    };
    Ok(Input::Trace(source, Box::new(parsed)))
}

/// Replays a trace (None: the built-in lab trace) or reads a receipt file into whole
/// runs, for `diff`. With a receipt, `trace` may name its trace, for cohorts and
/// latency; its digest must match the receipt's `trace_digest`. `id_key` is the key the
/// receipt's request ids were written under (`replay --id-key`, SPEC.md §6.5): the
/// trace's ids are keyed the same way, after its digest is checked, so its requests
/// match the receipt's.
pub fn load_lab(
    input: Option<&Path>,
    trace: Option<&Path>,
    id_key: Option<&Path>,
) -> Result<Lab, Failure> {
    match load_input(input, trace, id_key)? {
        Input::Trace(source, parsed) => Ok(lab_of_trace(source, &parsed)),
        Input::Receipt(source, receipt) => {
            let mut runs = model::CollectRuns::default();
            let outline = receipt.read(&source, &mut runs)?;
            check_policies(&source, &outline.policies)?;
            let facts = trace_facts(trace, &outline.trace_digest, id_key)?;
            Ok(Lab {
                source,
                trace_digest: outline.trace_digest,
                receipt_digest: outline.receipt_digest,
                runs: runs.into_runs(),
                facts,
            })
        }
    }
}

/// `--id-key` keys the ids of a receipt's `--trace`: without one it is bad usage.
fn check_id_key(id_key: Option<&Path>, trace: Option<&Path>) -> Result<(), Failure> {
    match (id_key, trace) {
        (Some(key), None) => Err(Failure::invalid(vec![format!(
            "{}: --id-key keys the ids of the --trace TRACE of a receipt, and there is none",
            key.display()
        )])),
        _ => Ok(()),
    }
}

/// Every run of a receipt is one of the policies kvroute knows.
fn check_policies(source: &str, policies: &[String]) -> Result<(), Failure> {
    let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
    match policies.iter().find(|p| !known.contains(&p.as_str())) {
        Some(unknown) => Err(Failure::invalid(vec![format!(
            "{source}: runs: unknown policy {unknown:?}"
        )])),
        None => Ok(()),
    }
}

/// The facts of the receipt's trace when `trace` names it: its digest checked against
/// the receipt's `trace_digest`, its ids keyed with `id_key`.
fn trace_facts(
    trace: Option<&Path>,
    trace_digest: &str,
    id_key: Option<&Path>,
) -> Result<Option<TraceFacts>, Failure> {
    let Some(path) = trace else {
        return Ok(None);
    };
    let mut trace = load_trace_bytes(&read_input(path, "trace")?).map_err(|f| f.in_file(path))?;
    let digest = output::trace_digest(&trace);
    if digest != trace_digest {
        return Err(Failure::invalid(vec![format!(
            "{}: this trace's digest {digest} is not the receipt's trace_digest {trace_digest}",
            path.display(),
        )]));
    }
    if let Some(key) = id_key {
        kvroute_core::output::key_request_ids(&mut trace, &super::read_id_key(key)?);
    }
    Ok(Some(TraceFacts::of(&trace)))
}

fn lab_of_trace(source: String, trace: &Trace) -> Lab {
    let trace_digest = output::trace_digest(trace);
    // The digest through the streaming writer: the in-memory receipt's own digest would
    // build the whole receipt as JSON first (hundreds of MB on the Mooncake trace).
    let receipt_digest =
        replay::write_jsonl(&Compiled::new(trace), &trace_digest, &mut std::io::sink())
            .map(|summary| summary.receipt_digest)
            .unwrap_or_default();
    let receipt = replay::receipt(trace);
    Lab {
        source,
        trace_digest,
        receipt_digest,
        runs: model::runs_of_receipt(&receipt),
        facts: Some(TraceFacts::of(trace)),
    }
}

/// The page model of runs held in memory (a replayed trace's): the same two passes as a
/// receipt's, over the runs.
pub fn model_of_lab(
    lab: &Lab,
    shadow: (Policy, Policy),
    sample: usize,
) -> Result<ReportModel, String> {
    let mut census = Census::default();
    gather::feed(&lab.runs, &mut census)?;
    let mut gathered = Gather::new(&census, lab.facts.as_ref(), sample, shadow);
    gather::feed(&lab.runs, &mut gathered)?;
    Ok(gathered.finish(
        lab.source.clone(),
        lab.trace_digest.clone(),
        lab.receipt_digest.clone(),
    ))
}

/// The page model of a receipt, read twice ([`gather`]): the census, then, once its
/// policies and its trace are checked, the aggregates and the decisions the page can
/// show.
fn model_of_receipt(
    source: String,
    receipt: &ReceiptInput<'_>,
    trace: Option<&Path>,
    id_key: Option<&Path>,
    shadow: (Policy, Policy),
    sample: usize,
) -> Result<ReportModel, Failure> {
    let mut census = Census::default();
    let outline = receipt.read(&source, &mut census)?;
    check_policies(&source, &outline.policies)?;
    let facts = trace_facts(trace, &outline.trace_digest, id_key)?;
    let mut gathered = Gather::new(&census, facts.as_ref(), sample, shadow);
    let outline = receipt.read(&source, &mut gathered)?;
    Ok(gathered.finish(source, outline.trace_digest, outline.receipt_digest))
}

/// `kvroute report`: writes the page atomically to `out`.
pub fn report(
    input: Option<&Path>,
    trace: Option<&Path>,
    id_key: Option<&Path>,
    out: &Path,
    shadow: (Policy, Policy),
    sample: usize,
    completions: Option<&completions::CompletionsArgs>,
) -> Result<(), Failure> {
    let mut trace_cohorts = None;
    let (mut model, receipt) = match load_input(input, trace, id_key)? {
        Input::Trace(source, parsed) => {
            let model = model_of_lab(&lab_of_trace(source, &parsed), shadow, sample)
                .map_err(|e| Failure::other(format!("kvroute report: {e}")))?;
            if completions.is_some() {
                trace_cohorts = Some(TraceCohorts::of(&parsed, None));
            }
            (model, None)
        }
        Input::Receipt(source, receipt) => (
            model_of_receipt(source, &receipt, trace, id_key, shadow, sample)?,
            Some(receipt),
        ),
    };
    if let Some(args) = completions {
        let receipt: Box<dyn BufRead> = match &receipt {
            Some(receipt) => receipt.reopen()?,
            None => Box::new(std::io::Cursor::new(completions::receipt_of_trace(input)?)),
        };
        let id_key = id_key.map(super::read_id_key).transpose()?;
        // A receipt's --trace gives cohorts only when its ids match the receipt's.
        if let (Some(path), false) = (trace, model.cohorts_unmatched) {
            let parsed =
                load_trace_bytes(&read_input(path, "trace")?).map_err(|f| f.in_file(path))?;
            trace_cohorts = Some(TraceCohorts::of(&parsed, id_key.as_deref()));
        }
        let name = input.unwrap_or(Path::new("the built-in lab trace"));
        model.completions = Some(completions::panel(
            name,
            receipt,
            args,
            id_key,
            trace_cohorts,
        )?);
    }
    if model.cohorts_unmatched {
        let how = match id_key {
            None => "if it was written with `replay --id-key FILE`, give the same --id-key FILE",
            Some(_) => "this --id-key is not the key it was written with",
        };
        note!(
            "report: {}: no request id of the receipt is in the trace, so cohorts cannot be \
             matched ({how})",
            model.source
        );
    }
    let rendered = page::render_within_budget(&model, shadow, sample)
        .map_err(|e| Failure::other(format!("kvroute report: {e}")))?;
    emit(rendered.html.as_bytes(), Some(out))?;
    note!(
        "report: {} -> {} ({} bytes; {} of {} decisions in detail)",
        model.source,
        out.display(),
        rendered.html.len(),
        rendered.detail_decisions,
        rendered.decisions
    );
    Ok(())
}

/// The arguments of `kvroute diff`.
pub struct DiffArgs {
    pub first: PathBuf,
    pub second: Option<PathBuf>,
    pub baseline: Option<Policy>,
    pub candidate: Option<Policy>,
    pub trace: Option<PathBuf>,
    pub format: DiffFormat,
    pub out: Option<PathBuf>,
    /// `--csv-plain`: ids in the CSV exactly as in the receipt.
    pub csv_plain: bool,
}

/// `kvroute diff`: one input compares two of its runs; two inputs compare the first's
/// baseline run with the second's candidate run (both `cache_plus_load` unless named).
pub fn diff_command(args: &DiffArgs) -> Result<(), Failure> {
    let first = load_lab(Some(&args.first), args.trace.as_deref(), None)?;
    let (second, baseline, candidate) = match &args.second {
        None => {
            let (Some(baseline), Some(candidate)) = (args.baseline, args.candidate) else {
                return Err(Failure::invalid(vec![
                    "kvroute diff: with one input, name both --baseline and --candidate".into(),
                ]));
            };
            (None, baseline, candidate)
        }
        Some(path) => {
            // A --trace matches one of the two receipts; the other's facts are the same
            // workers, so the prefill rates carry over when the first has them.
            let second = match load_lab(Some(path), args.trace.as_deref(), None) {
                Ok(lab) => lab,
                Err(_) if args.trace.is_some() => {
                    let mut lab = load_lab(Some(path), None, None)?;
                    lab.facts = first.facts.clone();
                    lab
                }
                Err(failure) => return Err(failure),
            };
            let default = Policy::CachePlusLoad;
            (
                Some(second),
                args.baseline.unwrap_or(default),
                args.candidate.unwrap_or(default),
            )
        }
    };
    let second_lab = second.as_ref().unwrap_or(&first);
    // The runs are compared where they lie; the diff keeps only their chosen rows.
    fn run(lab: &Lab, policy: Policy) -> Result<&model::RunDoc, Failure> {
        lab.run(policy.name()).ok_or_else(|| {
            Failure::invalid(vec![format!("{}: no {} run", lab.source, policy.name())])
        })
    }
    let (base_run, cand_run) = (run(&first, baseline)?, run(second_lab, candidate)?);
    let name = |lab: &Lab, policy: Policy| match &second {
        None => policy.name().to_owned(),
        Some(_) => format!("{}:{}", lab.source, policy.name()),
    };
    let facts = first.facts.as_ref().or(second_lab.facts.as_ref());
    let result = diff::diff(
        (&name(&first, baseline), base_run),
        (&name(second_lab, candidate), cand_run),
        facts,
    )
    .map_err(|e| Failure::invalid(vec![format!("kvroute diff: {e}")]))?;
    let bytes = match args.format {
        DiffFormat::Table => result.table().into_bytes(),
        DiffFormat::Json => result.json(),
        DiffFormat::Csv => {
            note!("{}", result.summary_line());
            let ids = if args.csv_plain {
                CsvIds::Plain
            } else {
                CsvIds::SpreadsheetSafe
            };
            result
                .csv(ids)
                .map_err(|e| Failure::other(format!("kvroute diff: cannot write CSV: {e}")))?
        }
    };
    emit(&bytes, args.out.as_deref())
}
