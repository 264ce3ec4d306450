//! `kvroute join` (SPEC.md §14): a receipt's run against the completion records a
//! benchmark client or a server wrote. [`receipt`] reads the run's decisions,
//! [`aiperf`] the records, [`figures`] computes the join, [`output`] writes it as a
//! table, canonical JSON or CSV. Both inputs are streamed; what is kept is one summary
//! per decision of the run and one per distinct completion id.

pub mod aiperf;
pub mod figures;
pub mod output;
pub mod receipt;

use crate::input::json_lines::{for_each_line, Line, LineError, LineErrors, LINE_BYTES_MAX};
use crate::output::ids::keyed_id;
use crate::route::policy::Policy;
use figures::{JoinFigures, Records, Slo};
use receipt::{ReceiptError, ReceiptRun};
use std::io::BufRead;

/// What a join was asked for.
#[derive(Debug, Clone, Default)]
pub struct JoinOptions {
    /// The run that served the traffic; `cache_plus_load` when unset.
    pub run: Option<Policy>,
    pub slo: Option<Slo>,
    /// The `--id-key` the receipt's request ids were keyed with (SPEC.md §6.5).
    pub id_key: Option<Vec<u8>>,
}

/// A finished join: what was read and what it gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    pub receipt_digest: String,
    pub run: Policy,
    pub slo: Option<Slo>,
    pub figures: JoinFigures,
}

/// Why a join gave nothing (each is exit 2, SPEC.md §14.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    Receipt(ReceiptError),
    /// Lines of the completions that are not the layout.
    Completions(Vec<LineError>),
    /// The completions hold no record at all.
    NoRecords,
    /// Both sides have ids and none matches: the first of each.
    NothingMatched {
        completion_id: String,
        request_id: String,
    },
}

/// Joins `receipt`'s run with the AIPerf records of `completions`.
pub fn join(
    receipt: impl BufRead,
    completions: impl BufRead,
    options: &JoinOptions,
) -> Result<Join, JoinError> {
    let run = options.run.unwrap_or(Policy::CachePlusLoad);
    // Both are read before either is judged: a bad completion line comes first, then
    // no records, then the receipt's problems (SPEC.md §14.5).
    let receipt_run = receipt::read_run(receipt, run);
    let records = read_records(completions, options.id_key.as_deref())?;
    if records.first_id().is_none() {
        return Err(JoinError::NoRecords);
    }
    let ReceiptRun {
        receipt_digest,
        decisions,
        ..
    } = receipt_run.map_err(JoinError::Receipt)?;
    let figures = figures::join(&decisions, &records, options.slo);
    if figures.counts.matched + figures.counts.rejected_served == 0 {
        if let (Some(completion_id), Some(decision)) = (records.first_id(), decisions.first()) {
            return Err(JoinError::NothingMatched {
                completion_id: completion_id.to_owned(),
                request_id: decision.request.clone(),
            });
        }
    }
    Ok(Join {
        receipt_digest,
        run,
        slo: options.slo,
        figures,
    })
}

/// Every record of the completions, ids keyed when asked; or the first lines in error.
fn read_records(completions: impl BufRead, id_key: Option<&[u8]>) -> Result<Records, JoinError> {
    let mut records = Records::default();
    let mut errors = LineErrors::default();
    let read = for_each_line(completions, LINE_BYTES_MAX, |number, line| {
        let line = match line {
            Line::Bytes(bytes) => bytes,
            Line::TooLong => {
                errors.push(number, format!("line longer than {LINE_BYTES_MAX} bytes"));
                return;
            }
        };
        // Blank: JSON's own whitespace only (a form feed is not, SPEC.md §14.5).
        if line
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            return;
        }
        match aiperf::parse_completion(line) {
            Ok(mut completion) => {
                if let Some(key) = id_key {
                    completion.request_id = keyed_id(key, &completion.request_id);
                }
                // Once the input is known to be rejected, keeping records only costs memory.
                if errors.is_empty() {
                    records.add(completion);
                }
            }
            Err(reasons) => {
                for reason in reasons {
                    errors.push(number, reason);
                }
            }
        }
    });
    if let Err((number, e)) = read {
        errors.push(number, format!("cannot read the input: {e}"));
    }
    if errors.is_empty() {
        Ok(records)
    } else {
        Err(JoinError::Completions(errors.finish()))
    }
}
