//! `kvroute report` and `kvroute diff`: the lab as a person looks at it.
//!
//! Both read a trace (replayed with core) or a receipt file into one [`model::Lab`].
//! `report` renders a self-contained HTML page ([`page`]: a minijinja template under
//! `cli/templates/` with plotters SVG charts from [`charts`]) that opens offline; `diff`
//! lists the decisions where two runs choose differently ([`diff`]), the shadow mode of
//! a new policy against the serving one.

pub mod charts;
pub mod completions;
pub mod diff;
pub mod model;
pub mod page;
pub mod select;
pub mod shown;

use super::{emit, read_input};
use crate::failure::Failure;
pub use kvroute_cli::args::DiffFormat;
use kvroute_core::output::canonical;
use kvroute_core::output::csv::CsvIds;
use kvroute_core::replay;
use kvroute_core::route::compiled::Compiled;
use kvroute_core::{parse_trace, Policy, Trace};
use model::{Lab, ReceiptDoc, TraceFacts, RECEIPT_FORMAT};
use serde::Deserialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Only the `format` member, to tell a receipt from a trace before parsing either.
#[derive(Deserialize)]
struct FormatProbe {
    format: Option<serde_json::Value>,
}

/// The format of a receipt's JSON Lines form (SPEC.md §6.4).
const STREAM_FORMAT: &str = "kvroute-receipt-stream/1";

/// When `bytes` are a JSON Lines receipt (its first line names [`STREAM_FORMAT`]), the
/// JSON receipt its lines make: the runs in the order the lines first name them, each
/// member's elements in line order, `receipt_digest` from the last line. `None` for
/// anything else, which is read as JSON.
fn receipt_of_lines(bytes: &[u8]) -> Option<Result<Vec<u8>, String>> {
    use serde_json::{Map, Value};
    let mut lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let head: Value = serde_json::from_slice(lines.next()?).ok()?;
    if head.get("format").and_then(Value::as_str) != Some(STREAM_FORMAT) {
        return None;
    }
    let join = || -> Result<Vec<u8>, String> {
        let mut runs: Vec<(String, Map<String, Value>)> = Vec::new();
        let mut receipt_digest = None;
        for (i, line) in lines.enumerate() {
            let line_number = i + 2;
            let Value::Object(mut line) =
                serde_json::from_slice(line).map_err(|e| format!("line {line_number}: {e}"))?
            else {
                return Err(format!("line {line_number}: not a JSON object"));
            };
            if let Some(digest) = line.remove("receipt_digest") {
                receipt_digest = Some(digest);
                continue;
            }
            let Some(Value::String(policy)) = line.remove("policy") else {
                return Err(format!("line {line_number}: no policy"));
            };
            let (Some((member, element)), None) = (line.iter().next(), line.iter().nth(1)) else {
                return Err(format!("line {line_number}: not one member beside policy"));
            };
            if runs.last().is_none_or(|(p, _)| *p != policy) {
                runs.push((policy.clone(), Map::new()));
            }
            let run = &mut runs.last_mut().expect("pushed").1;
            if member == "metrics" {
                run.insert(member.clone(), element.clone());
            } else if let Value::Array(items) = run
                .entry(member.clone())
                .or_insert_with(|| Value::Array(Vec::new()))
            {
                items.push(element.clone());
            }
        }
        let runs: Vec<Value> = runs
            .into_iter()
            .map(|(policy, mut run)| {
                for member in ["cache_log", "decisions", "observation_log"] {
                    run.entry(member)
                        .or_insert_with(|| Value::Array(Vec::new()));
                }
                run.insert("policy".into(), Value::String(policy));
                Value::Object(run)
            })
            .collect();
        let receipt = serde_json::json!({
            "format": head.get("receipt_format").cloned().unwrap_or(Value::Null),
            "trace_digest": head.get("trace_digest").cloned().unwrap_or(Value::Null),
            "runs": runs,
            "receipt_digest": receipt_digest.ok_or("no last line with the receipt_digest")?,
        });
        Ok(receipt.to_string().into_bytes())
    };
    Some(join())
}

fn load_trace_bytes(bytes: &[u8]) -> Result<Trace, Failure> {
    parse_trace(bytes).map_err(|errors| Failure::invalid(errors.lines()))
}

/// A receipt file read as it streams in, when `path` is a file that starts as a
/// canonical or a JSON Lines receipt does; `None` for anything else (stdin, a trace, a
/// receipt written some other way, a file that cannot be read), which is read whole.
fn stream_receipt(path: &Path) -> Result<Option<ReceiptDoc>, Failure> {
    if path.as_os_str() == "-" {
        return Ok(None);
    }
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(None);
    };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let Ok(head) = reader.fill_buf() else {
        return Ok(None);
    };
    let invalid = |what: &str, problem: String| {
        Failure::invalid(vec![format!(
            "{}: not a valid {what}: {problem}",
            path.display()
        )])
    };
    if head.starts_with(model::STREAM_HEAD) {
        let receipt = model::read_lines(reader)
            .map_err(|problem| invalid(&format!("{STREAM_FORMAT} receipt"), problem))?;
        Ok(Some(receipt))
    } else if head.starts_with(model::RECEIPT_HEAD) {
        let receipt =
            model::read_canonical(reader).map_err(|e| invalid(RECEIPT_FORMAT, e.to_string()))?;
        Ok(Some(receipt))
    } else {
        Ok(None)
    }
}

/// Replays a trace (None: the built-in lab trace) or reads a receipt file. With a
/// receipt, `trace` may name its trace, for cohorts and latency; its digest must match
/// the receipt's `trace_digest`. `id_key` is the key the receipt's request ids were
/// written under (`replay --id-key`, SPEC.md §6.5): the trace's ids are keyed the same
/// way, after its digest is checked, so its requests match the receipt's. A receipt
/// file is streamed ([`stream_receipt`]); anything else is read whole.
pub fn load_lab(
    input: Option<&Path>,
    trace: Option<&Path>,
    id_key: Option<&Path>,
) -> Result<Lab, Failure> {
    if let Some(path) = input {
        if let Some(receipt) = stream_receipt(path)? {
            check_id_key(id_key, trace)?;
            let mut lab = lab_of_receipt(path.display().to_string(), receipt, trace, id_key)?;
            lab.receipt_path = Some(path.to_owned());
            return Ok(lab);
        }
    }
    let (source, bytes) = match input {
        None => (
            "the built-in lab trace (fixtures/lab/trace.json)".to_owned(),
            kvroute_core::LAB_TRACE_JSON.as_bytes().to_vec(),
        ),
        Some(path) => (path.display().to_string(), read_input(path, "input")?),
    };
    // A JSON Lines receipt (SPEC.md §6.4) is read as the JSON receipt its lines make.
    let bytes = match receipt_of_lines(&bytes) {
        Some(Ok(joined)) => joined,
        Some(Err(problem)) => {
            return Err(Failure::invalid(vec![format!(
                "{source}: not a valid {STREAM_FORMAT} receipt: {problem}"
            )]))
        }
        None => bytes,
    };
    let is_receipt = serde_json::from_slice::<FormatProbe>(&bytes)
        .ok()
        .and_then(|probe| probe.format)
        .is_some_and(|format| format == RECEIPT_FORMAT);
    check_id_key(id_key, trace)?;
    if !is_receipt {
        if trace.is_some() {
            return Err(Failure::invalid(vec![format!(
                "{source}: --trace is for a receipt input, and this is a trace"
            )]));
        }
        let trace = load_trace_bytes(&bytes);
        let trace = match input {
            Some(path) => trace.map_err(|f| f.in_file(path))?,
            None => trace?,
        };
        return Ok(lab_of_trace(source, &trace));
    }
    let receipt: ReceiptDoc = serde_json::from_slice(&bytes).map_err(|e| {
        Failure::invalid(vec![format!("{source}: not a valid {RECEIPT_FORMAT}: {e}")])
    })?;
    let mut lab = lab_of_receipt(source, receipt, trace, id_key)?;
    lab.receipt_json = Some(bytes);
    Ok(lab)
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

/// The lab of a receipt read from `source`, with its trace's facts when `trace` names
/// it (its digest checked, its ids keyed with `id_key`).
fn lab_of_receipt(
    source: String,
    receipt: ReceiptDoc,
    trace: Option<&Path>,
    id_key: Option<&Path>,
) -> Result<Lab, Failure> {
    let known: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
    if let Some(run) = receipt
        .runs
        .iter()
        .find(|r| !known.contains(&r.policy.as_str()))
    {
        return Err(Failure::invalid(vec![format!(
            "{source}: runs: unknown policy {:?}",
            run.policy
        )]));
    }
    let facts = match trace {
        None => None,
        Some(path) => {
            let mut trace =
                load_trace_bytes(&read_input(path, "trace")?).map_err(|f| f.in_file(path))?;
            let digest = canonical::trace_digest(&trace);
            if digest != receipt.trace_digest {
                return Err(Failure::invalid(vec![format!(
                    "{}: this trace's digest {digest} is not the receipt's trace_digest {}",
                    path.display(),
                    receipt.trace_digest
                )]));
            }
            if let Some(key) = id_key {
                kvroute_core::output::ids::key_request_ids(&mut trace, &super::read_id_key(key)?);
            }
            Some(TraceFacts::of(&trace))
        }
    };
    Ok(Lab {
        source,
        trace_digest: receipt.trace_digest,
        receipt_digest: receipt.receipt_digest,
        runs: receipt.runs,
        facts,
        receipt_json: None,
        receipt_path: None,
        completions: None,
    })
}

fn lab_of_trace(source: String, trace: &Trace) -> Lab {
    let trace_digest = canonical::trace_digest(trace);
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
        receipt_json: None,
        receipt_path: None,
        completions: None,
    }
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
    let mut lab = load_lab(input, trace, id_key)?;
    if let Some(args) = completions {
        let receipt: Box<dyn BufRead> = match (lab.receipt_json.take(), &lab.receipt_path) {
            (Some(receipt), _) => Box::new(std::io::Cursor::new(receipt)),
            (None, Some(path)) => Box::new(std::io::BufReader::new(
                std::fs::File::open(path).map_err(|e| {
                    Failure::invalid(vec![format!("{}: cannot read input: {e}", path.display())])
                })?,
            )),
            (None, None) => Box::new(std::io::Cursor::new(completions::receipt_of_trace(input)?)),
        };
        let id_key = id_key.map(super::read_id_key).transpose()?;
        let name = input.unwrap_or(Path::new("the built-in lab trace"));
        lab.completions = Some(completions::panel(name, receipt, args, id_key)?);
    }
    if lab.requests_unmatched() {
        let how = match id_key {
            None => "if it was written with `replay --id-key FILE`, give the same --id-key FILE",
            Some(_) => "this --id-key is not the key it was written with",
        };
        note!(
            "report: {}: no request id of the receipt is in the trace, so cohorts cannot be \
             matched ({how})",
            lab.source
        );
    }
    let rendered = page::render_within_budget(&lab, shadow, sample)
        .map_err(|e| Failure::other(format!("kvroute report: {e}")))?;
    emit(rendered.html.as_bytes(), Some(out))?;
    note!(
        "report: {} -> {} ({} bytes; {} of {} decisions in detail)",
        lab.source,
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
    // The runs are compared where they lie: a copy would add half the receipt again.
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
