//! CSV export of candidate rows (SPEC.md §6.3): from in-memory runs, or streamed
//! while the runs replay ([`CsvSink`]).
//!
//! Fields go to the `csv` crate's writer one at a time as byte slices (integers through
//! a stack buffer), so a row allocates nothing; the crate does the RFC 4180 quoting.

use crate::output::json_text::u64_text;
use crate::output::typed::DecisionHead;
use crate::route::candidate::CandidateRow;
use crate::route::policy::Policy;
use crate::route::record::{DecisionRef, Run, RunSink};
use std::borrow::Cow;
use std::io::Write;

/// The CSV header, in column order.
pub const CSV_COLUMNS: [&str; 18] = [
    "policy",
    "seq",
    "tick",
    "request",
    "chosen",
    "route_kind",
    "worker",
    "eligible",
    "reasons",
    "reuse",
    "recomputed",
    "queued_prefill",
    "active_decode",
    "work_milli",
    "after_milli",
    "cost_milli",
    "dominated_by",
    "dominated_count",
];

fn csv_writer<W: Write>(out: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(out)
}

/// How the id columns (`request`, `chosen`, `worker`, `dominated_by`) are written
/// (SPEC.md §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvIds {
    /// The default: an id a spreadsheet would run as a formula gets a leading `'`.
    SpreadsheetSafe,
    /// Every id exactly as in the receipt (`--csv-plain`), for dataframes.
    Plain,
}

/// The first characters that make a spreadsheet read a cell as a formula (SPEC.md
/// §6.3): `=`, `+`, `-`, `@`, and tab and carriage return, which some strip first.
pub const FORMULA_TRIGGERS: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// An id as its CSV cell holds it (SPEC.md §6.3): with a leading `'` when spreadsheet
/// safety is asked for and the id starts with a formula trigger, else as it is. Every
/// CSV that kvroute writes (`replay`, `diff`) puts its ids through here.
pub fn id_cell(id: &str, mode: CsvIds) -> Cow<'_, str> {
    if mode == CsvIds::SpreadsheetSafe && id.starts_with(FORMULA_TRIGGERS) {
        Cow::Owned(format!("'{id}"))
    } else {
        Cow::Borrowed(id)
    }
}

/// Writes one id cell. Only ids are text from the trace, so only they are guarded;
/// numbers (which could start with `-`) never pass through here.
fn write_id<W: Write>(
    writer: &mut csv::Writer<W>,
    id: &str,
    mode: CsvIds,
) -> Result<(), csv::Error> {
    writer.write_field(id_cell(id, mode).as_bytes())
}

/// One line per (run, decision, candidate) of in-memory runs, header first. `ids`
/// maps worker indexes to ids (a receipt's `worker_ids`).
pub fn csv_bytes<S: AsRef<str>>(
    ids: &[S],
    runs: &[Run],
    mode: CsvIds,
) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv_writer(Vec::new());
    writer.write_record(CSV_COLUMNS)?;
    for run in runs {
        for d in &run.decisions {
            let head = DecisionHead::of_record(d);
            for r in &d.candidates {
                write_csv_row(&mut writer, run.policy, ids, &head, r, mode)?;
            }
        }
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// Writes one candidate row's fields, in [`CSV_COLUMNS`] order. `ids` maps worker
/// indexes to ids.
pub fn write_csv_row<W: Write, S: AsRef<str>>(
    writer: &mut csv::Writer<W>,
    policy: Policy,
    ids: &[S],
    d: &DecisionHead,
    r: &CandidateRow,
    mode: CsvIds,
) -> Result<(), csv::Error> {
    let mut number = [0u8; 20];
    let id = |w: Option<usize>| w.map_or("", |w| ids[w].as_ref());
    writer.write_field(policy.name())?;
    writer.write_field(u64_text(d.seq, &mut number))?;
    writer.write_field(u64_text(d.tick, &mut number))?;
    write_id(writer, d.request, mode)?;
    write_id(writer, id(d.chosen), mode)?;
    writer.write_field(d.route_kind.name())?;
    write_id(writer, id(Some(r.worker)), mode)?;
    writer.write_field(if r.eligible { "true" } else { "false" })?;
    // At most seven reason names, joined with `;`.
    let mut reasons = [0u8; 128];
    let mut length = 0;
    for (i, reason) in r.reasons.iter().enumerate() {
        let name = reason.name().as_bytes();
        if i > 0 {
            reasons[length] = b';';
            length += 1;
        }
        reasons[length..length + name.len()].copy_from_slice(name);
        length += name.len();
    }
    writer.write_field(&reasons[..length])?;
    for value in [
        r.reuse,
        r.recomputed,
        r.queued_prefill,
        r.active_decode,
        r.work_milli,
        r.after_milli,
        r.cost_milli,
    ] {
        writer.write_field(u64_text(value, &mut number))?;
    }
    write_id(writer, id(r.dominated_by), mode)?;
    writer.write_field(u64_text(r.dominated_count, &mut number))?;
    writer.write_record(None::<&[u8]>)
}

/// Writes the candidate rows as CSV (SPEC.md §6.3) while the runs replay, header
/// first. Keeps the first error, since a sink cannot return one mid-run, and writes
/// nothing after it.
pub struct CsvSink<'a, W: Write + ?Sized> {
    writer: csv::Writer<&'a mut W>,
    ids: &'a [&'a str],
    policy: Policy,
    mode: CsvIds,
    error: Option<csv::Error>,
}

impl<'a, W: Write + ?Sized> CsvSink<'a, W> {
    /// Writes the header.
    pub fn start(out: &'a mut W, ids: &'a [&'a str], mode: CsvIds) -> Result<Self, csv::Error> {
        let mut writer = csv_writer(out);
        writer.write_record(CSV_COLUMNS)?;
        Ok(CsvSink {
            writer,
            ids,
            policy: Policy::ALL[0],
            mode,
            error: None,
        })
    }

    /// The first error, or the writer flushed.
    pub fn finish(mut self) -> Result<(), csv::Error> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.writer.flush()?;
        Ok(())
    }
}

impl<W: Write + ?Sized> RunSink for CsvSink<'_, W> {
    fn run_started(&mut self, _index: usize, policy: Policy) {
        self.policy = policy;
    }
    fn decided(&mut self, decision: &DecisionRef) {
        if self.error.is_some() {
            return;
        }
        let head = DecisionHead::of_ref(decision);
        for w in 0..decision.rows.len() {
            let row = decision.rows.candidate_row(w);
            let written = write_csv_row(
                &mut self.writer,
                self.policy,
                self.ids,
                &head,
                &row,
                self.mode,
            );
            if let Err(e) = written {
                self.error = Some(e);
                return;
            }
        }
    }
}
