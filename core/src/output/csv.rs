//! CSV export of candidate rows (SPEC.md §6.3): from an in-memory receipt, or
//! streamed while the runs replay.

use crate::output::receipt::Receipt;
use crate::route::candidate::CandidateRow;
use crate::route::compiled::Compiled;
use crate::route::engine::{run_with_sink, DecisionRef, RunSink};
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;
use crate::route::record::Decision;
use crate::route::state::RouterState;
use std::io::Write;

/// The CSV header, in column order.
pub const CSV_COLUMNS: [&str; 17] = [
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
];

/// One line per (run, decision, candidate), header first.
pub fn csv_bytes(receipt: &Receipt) -> Result<Vec<u8>, csv::Error> {
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    writer.write_record(CSV_COLUMNS)?;
    for run in &receipt.runs {
        for d in &run.decisions {
            for r in &d.candidates {
                writer.write_record(csv_record(run.policy, &receipt.worker_ids, d, r))?;
            }
        }
    }
    writer
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// One candidate row's CSV fields, in [`CSV_COLUMNS`] order. `ids` maps worker indexes
/// to ids.
pub fn csv_record<S: AsRef<str>>(
    policy: Policy,
    ids: &[S],
    d: &Decision,
    r: &CandidateRow,
) -> [String; 17] {
    let id = |w: usize| ids[w].as_ref().to_owned();
    let reasons: Vec<&str> = r.reasons.iter().map(|x| x.name()).collect();
    let dominated_by: Vec<&str> = r.dominated_by.iter().map(|&w| ids[w].as_ref()).collect();
    [
        policy.name().to_owned(),
        d.seq.to_string(),
        d.tick.to_string(),
        d.request.clone(),
        d.chosen.map(id).unwrap_or_default(),
        d.route_kind.name().to_owned(),
        id(r.worker),
        r.eligible.to_string(),
        reasons.join(";"),
        r.reuse.to_string(),
        r.recomputed.to_string(),
        r.queued_prefill.to_string(),
        r.active_decode.to_string(),
        r.work_milli.to_string(),
        r.after_milli.to_string(),
        r.cost_milli.to_string(),
        dominated_by.join(";"),
    ]
}

/// Writes the candidate rows as CSV (SPEC.md §6.3) while the runs replay; returns each
/// run's metrics.
pub fn write_csv<W: Write + ?Sized>(
    compiled: &Compiled,
    out: &mut W,
) -> Result<Vec<(Policy, Metrics)>, csv::Error> {
    struct CsvSink<'a, W: Write + ?Sized> {
        writer: csv::Writer<&'a mut W>,
        ids: &'a [&'a str],
        policy: Policy,
        error: Option<csv::Error>,
    }
    impl<W: Write + ?Sized> RunSink for CsvSink<'_, W> {
        fn decided(&mut self, decision: &DecisionRef) {
            if self.error.is_some() {
                return;
            }
            let decision = decision.to_decision();
            for row in &decision.candidates {
                let record = csv_record(self.policy, self.ids, &decision, row);
                if let Err(e) = self.writer.write_record(record) {
                    self.error = Some(e);
                    return;
                }
            }
        }
    }
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(out);
    writer.write_record(CSV_COLUMNS)?;
    let mut runs = Vec::new();
    for &policy in &Policy::ALL {
        let mut sink = CsvSink {
            writer,
            ids: &compiled.worker_ids,
            policy,
            error: None,
        };
        let (metrics, _) =
            run_with_sink(compiled, policy, RouterState::initial(compiled), &mut sink);
        if let Some(e) = sink.error {
            return Err(e);
        }
        writer = sink.writer;
        runs.push((policy, metrics));
    }
    writer.flush()?;
    Ok(runs)
}
