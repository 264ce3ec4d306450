//! `kvroute join RECEIPT COMPLETIONS` (SPEC.md §14): both inputs streamed from their
//! files (or one from stdin) into core's join, the result written as a table, JSON or
//! CSV by the usual output rules. Ids in the table are escaped for the terminal.

use crate::failure::Failure;
use crate::inputs::read_id_key;
use crate::out::emit;
use kvroute_cli::args::{DiffFormat, JoinArgs};
use kvroute_cli::terminal::printable;
use kvroute_core::join::receipt::ReceiptError;
use kvroute_core::join::{self, output, JoinError, JoinOptions};
use kvroute_core::output::csv::CsvIds;
use std::io::{BufRead, BufReader};
use std::path::Path;

fn open(path: &Path, what: &str) -> Result<Box<dyn BufRead>, Failure> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::new(std::io::stdin().lock())));
    }
    let file = std::fs::File::open(path).map_err(|e| {
        Failure::invalid(vec![format!("{}: cannot read {what}: {e}", path.display())])
    })?;
    Ok(Box::new(BufReader::with_capacity(256 * 1024, file)))
}

pub fn join_command(args: &JoinArgs) -> Result<(), Failure> {
    let id_key = args.id_key.as_deref().map(read_id_key).transpose()?;
    let options = JoinOptions {
        run: Some(args.run),
        slo: args.slo,
        id_key,
    };
    let receipt = open(&args.receipt, "receipt")?;
    let completions = open(&args.completions, "completions")?;
    let joined = join::join(receipt, completions, &options).map_err(|e| failure(args, e))?;
    let bytes = match args.format {
        DiffFormat::Table => output::table(&joined, &|id| printable(id).into_owned()).into_bytes(),
        DiffFormat::Json => {
            let mut bytes = output::json_bytes(&joined);
            bytes.push(b'\n');
            bytes
        }
        DiffFormat::Csv => {
            let ids = if args.csv_plain {
                CsvIds::Plain
            } else {
                CsvIds::SpreadsheetSafe
            };
            output::csv_bytes(&joined.figures.workers, ids)
                .map_err(|e| Failure::other(format!("kvroute join: cannot write the CSV: {e}")))?
        }
    };
    emit(&bytes, args.out.as_deref())
}

/// The lines of a failed join (SPEC.md §14.4), every id escaped for the terminal.
fn failure(args: &JoinArgs, error: JoinError) -> Failure {
    let receipt = args.receipt.display();
    let lines = match error {
        JoinError::Receipt(ReceiptError::NotAReceipt(reason)) => {
            vec![format!(
                "{receipt}: not a kvroute receipt: {}",
                printable(&reason)
            )]
        }
        JoinError::Receipt(ReceiptError::NoSuchRun(runs)) => vec![format!(
            "--run {}: the receipt has no run {} (it has {})",
            args.run.name(),
            args.run.name(),
            printable(&runs.join(", "))
        )],
        JoinError::Completions(errors) => errors
            .iter()
            .map(|e| match e.line {
                0 => printable(&e.reason).into_owned(),
                line => format!(
                    "{}:{line}: {}",
                    args.completions.display(),
                    printable(&e.reason)
                ),
            })
            .collect(),
        JoinError::NoRecords => vec![format!(
            "{}: no completion records",
            args.completions.display()
        )],
        JoinError::NothingMatched {
            completion_id,
            request_id,
        } => vec![format!(
            "kvroute join: no completion id matches a request id of the receipt (first \
             completion id {}, first request id {}); were the ids keyed (--id-key) or sent \
             under another header?",
            printable(&kvroute_core::input::json::quote_str(&completion_id)),
            printable(&kvroute_core::input::json::quote_str(&request_id))
        )],
    };
    Failure::invalid(lines)
}
