//! `kvroute join RECEIPT COMPLETIONS` (SPEC.md §14): both inputs streamed from their
//! files (or one from stdin) into core's join, the result written as a table, JSON or
//! CSV by the usual output rules. Ids in the table are escaped for the terminal. The
//! drift gates (SPEC.md §14.7) are judged after the output is written.

use crate::failure::Failure;
use crate::inputs::read_id_key;
use crate::out::emit;
use kvroute_cli::args::{DiffFormat, JoinArgs};
use kvroute_cli::terminal::printable;
use kvroute_core::join::ReceiptError;
use kvroute_core::join::{self, JoinError, JoinOptions, TraceCohorts};
use kvroute_core::join::{gate_lines, Gates};
use kvroute_core::output::CsvIds;
use kvroute_core::Policy;
use std::io::{BufRead, BufReader};
use std::path::Path;

pub(crate) fn open(path: &Path, what: &str) -> Result<Box<dyn BufRead>, Failure> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::new(std::io::stdin().lock())));
    }
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::invalid(vec![format!("{}: cannot read {what}: {e}", path.display())])
    })?;
    Ok(Box::new(BufReader::with_capacity(256 * 1024, file)))
}

/// `--trace`: the trace's cohorts (ids keyed under `id_key`), or its errors' lines,
/// which core reports after the receipt's (SPEC.md §14.5).
fn trace_cohorts(trace: &Path, id_key: Option<&[u8]>) -> Result<TraceCohorts, Vec<String>> {
    let trace = crate::load_trace(Some(trace)).map_err(|failure| failure.lines)?;
    Ok(TraceCohorts::of(&trace, id_key))
}

pub fn join_command(args: &JoinArgs) -> Result<(), Failure> {
    let id_key = args.id_key.as_deref().map(read_id_key).transpose()?;
    let options = JoinOptions {
        run: Some(args.run),
        slo: args.slo,
        trace: args
            .trace
            .as_deref()
            .map(|trace| trace_cohorts(trace, id_key.as_deref())),
        id_key,
        format: args.completions_format.map(|f| f.core()),
    };
    let receipt = open(&args.receipt, "receipt")?;
    let completions = open(&args.completions, "completions")?;
    let joined = join::join(receipt, completions, &options).map_err(|e| {
        failure(
            &args.receipt,
            &args.completions,
            args.trace.as_deref(),
            args.run,
            e,
        )
    })?;
    let bytes = match args.format {
        DiffFormat::Table => join::table(&joined, &|id| printable(id).into_owned()).into_bytes(),
        DiffFormat::Json => {
            let mut bytes = join::json_bytes(&joined);
            bytes.push(b'\n');
            bytes
        }
        DiffFormat::Csv => {
            let ids = if args.csv_plain {
                CsvIds::Plain
            } else {
                CsvIds::SpreadsheetSafe
            };
            join::csv_bytes(&joined.figures.workers, ids)
                .map_err(|e| Failure::other(format!("kvroute join: cannot write the CSV: {e}")))?
        }
    };
    emit(&bytes, args.out.as_deref())?;
    let gates = Gates {
        max_drift_pm: args.max_drift_pm,
        max_elsewhere_pm: args.max_elsewhere_pm,
    };
    let lines = gate_lines(&joined, gates);
    if lines.is_empty() {
        Ok(())
    } else {
        Err(Failure::gate(
            lines.iter().map(|l| printable(l).into_owned()).collect(),
        ))
    }
}

/// The lines of a failed join (SPEC.md §14.5), every id escaped for the terminal.
pub(crate) fn failure(
    receipt: &Path,
    completions: &Path,
    trace: Option<&Path>,
    run: Policy,
    error: JoinError,
) -> Failure {
    let receipt = receipt.display();
    let completions = completions.display();
    let trace = trace.map_or_else(String::new, |t| t.display().to_string());
    let quoted = |id: &str| printable(&kvroute_core::output::quote_str(id)).into_owned();
    let lines = match error {
        JoinError::Undetected { line } => vec![format!(
            "{completions}:{line}: cannot tell the completions format from this line (an \
             object with \"metadata\" is aiperf, with \"event\" or \"event_type\" dynamo, with \
             \"ttfts\" vllm-bench); give --completions-format"
        )],
        JoinError::Receipt(ReceiptError::NotAReceipt(reason)) => {
            vec![format!(
                "{receipt}: not a kvroute receipt: {}",
                printable(&reason)
            )]
        }
        JoinError::Receipt(ReceiptError::NoSuchRun(runs)) => vec![format!(
            "--run {}: the receipt has no run {} (it has {})",
            run.name(),
            run.name(),
            printable(&runs.join(", "))
        )],
        JoinError::Completions(errors) => errors
            .iter()
            .map(|e| match e.line {
                0 => printable(&e.reason).into_owned(),
                line => format!("{completions}:{line}: {}", printable(&e.reason)),
            })
            .collect(),
        JoinError::Document { reasons, more } => {
            let mut lines: Vec<String> = reasons
                .iter()
                .map(|reason| format!("{completions}: {}", printable(reason)))
                .collect();
            if more > 0 {
                lines.push(format!("... and {more} more errors"));
            }
            lines
        }
        JoinError::NoRecords => vec![format!("{completions}: no completion records")],
        JoinError::Trace(lines) => lines,
        JoinError::TraceDigest {
            trace: digest,
            receipt: receipt_digest,
        } => vec![format!(
            "{trace}: this trace's digest {digest} is not the receipt's trace_digest \
             {}",
            printable(&receipt_digest)
        )],
        JoinError::UnknownRequest(id) => vec![format!(
            "{trace}: the receipt's request {} is not a request of this trace (were the ids \
             keyed? give the same --id-key)",
            quoted(&id)
        )],
        JoinError::NothingMatched {
            completion_id,
            request_id,
        } => vec![format!(
            "kvroute join: no completion id matches a request id of the receipt (first \
             completion id {}, first request id {}); were the ids keyed (--id-key) or sent \
             under another header?",
            quoted(&completion_id),
            quoted(&request_id)
        )],
    };
    Failure::invalid(lines)
}
