//! `kvroute join` (SPEC.md §14): a receipt's run against the completion records a
//! benchmark client or a server wrote. [`receipt`] reads the run's decisions,
//! [`aiperf`] the records, [`figures`] computes the join, [`attribution`] why requests
//! missed the cache, [`output`] writes it as a
//! table, canonical JSON or CSV. Both inputs are streamed; what is kept is one summary
//! per decision of the run and one per distinct completion id.

pub(crate) mod aiperf;
pub(crate) mod attribution;
pub(crate) mod attribution_sums;
pub(crate) mod dynamo;
pub(crate) mod figures;
pub(crate) mod output;
pub(crate) mod receipt;
pub(crate) mod records;
pub(crate) mod vllm_bench;

// The public part of the join, beside what this file defines (`join`, its options, the
// formats and the errors): the figures, the attribution, and the join's writers.
pub use attribution::{Attribution, WorkerDrift};
pub use attribution_sums::{AttributedRecord, RecordParts};
pub use figures::{Counts, Goodput, JoinFigures, Slo, WorkerFigures};
pub use output::{csv_bytes, gate_lines, json_bytes, table, Gates, JOIN_FORMAT};
pub use receipt::ReceiptError;

use crate::input::json_lines::{for_each_line, Line, LineError, LineErrors, LINE_BYTES_MAX};
use crate::output::ids::keyed_id;
use crate::route::policy::Policy;
use aiperf::Completion;
use figures::{CohortFigures, Records};
use receipt::{DecisionSummary, ReceiptRun};
use std::collections::BTreeMap;
use std::io::{BufRead, Read};

/// The layouts `join` reads (SPEC.md §14.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionsFormat {
    Aiperf,
    Dynamo,
    VllmBench,
}

impl CompletionsFormat {
    pub const ALL: [CompletionsFormat; 3] = [Self::Aiperf, Self::Dynamo, Self::VllmBench];

    pub fn name(self) -> &'static str {
        match self {
            Self::Aiperf => "aiperf",
            Self::Dynamo => "dynamo",
            Self::VllmBench => "vllm-bench",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A request's cohort: `(tenant, model, adapter)`.
pub type Cohort = (String, String, String);

/// What `--trace` gives the join (SPEC.md §14.1): the trace's digest and each request's
/// cohort by id (keyed under `--id-key`), or the lines of the trace's own errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceCohorts {
    pub trace_digest: String,
    pub cohort_of_request: BTreeMap<String, Cohort>,
}

impl TraceCohorts {
    /// The cohorts of `trace`'s requests; ids keyed with `id_key` when given.
    pub fn of(trace: &crate::input::trace::Trace, id_key: Option<&[u8]>) -> TraceCohorts {
        let mut cohort_of_request = BTreeMap::new();
        for event in &trace.events {
            if let crate::input::trace::EventKind::Request(request) = &event.kind {
                let id = match id_key {
                    Some(key) => keyed_id(key, &request.id),
                    None => request.id.to_string(),
                };
                let namespace = &request.namespace;
                let cohort = (
                    namespace.tenant.to_string(),
                    namespace.model.to_string(),
                    namespace.adapter.to_string(),
                );
                cohort_of_request.insert(id, cohort);
            }
        }
        TraceCohorts {
            trace_digest: crate::output::canonical::trace_digest(trace),
            cohort_of_request,
        }
    }
}

/// What a join was asked for.
#[derive(Debug, Clone, Default)]
pub struct JoinOptions {
    /// The run that served the traffic; `cache_plus_load` when unset.
    pub run: Option<Policy>,
    pub slo: Option<Slo>,
    /// The `--id-key` the receipt's request ids were keyed with (SPEC.md §6.5).
    pub id_key: Option<Vec<u8>>,
    /// The layout of the completions; detected from their first line when unset.
    pub format: Option<CompletionsFormat>,
    /// `--trace`: its cohorts, or the lines of its errors (reported after the
    /// receipt's, SPEC.md §14.5).
    pub trace: Option<Result<TraceCohorts, Vec<String>>>,
}

/// A finished join: what was read and what it gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    pub receipt_digest: String,
    pub run: Policy,
    pub slo: Option<Slo>,
    /// The layout read, as given or detected.
    pub format: CompletionsFormat,
    pub figures: JoinFigures,
}

/// Why a join gave nothing (each is exit 2, SPEC.md §14.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// The layout cannot be told from this line (1-based).
    Undetected {
        line: usize,
    },
    Receipt(ReceiptError),
    /// Lines of the completions that are not the layout.
    Completions(Vec<LineError>),
    /// A `vllm-bench` document that is not the layout: `PATH: reason` each, and how
    /// many more were not kept.
    Document {
        reasons: Vec<String>,
        more: usize,
    },
    /// The completions hold no record at all.
    NoRecords,
    /// `--trace`: the trace's own error lines.
    Trace(Vec<String>),
    /// `--trace`: its digest is not the receipt's `trace_digest`.
    TraceDigest {
        trace: String,
        receipt: String,
    },
    /// `--trace`: a decision's request that is not in the trace.
    UnknownRequest(String),
    /// Both sides have ids and none matches: the first of each.
    NothingMatched {
        completion_id: String,
        request_id: String,
    },
}

/// The records read, before the receipt is: by id, or by position.
enum Evidence {
    Keyed(Records),
    Positional(vllm_bench::BenchResult),
}

/// Joins `receipt`'s run with the completion records of `completions`.
pub fn join(
    receipt: impl BufRead,
    completions: impl BufRead,
    options: &JoinOptions,
) -> Result<Join, JoinError> {
    join_keeping(receipt, completions, options, false).map(|(join, _)| join)
}

/// [`join`], with every attributed record of the run in decision order, for a view of
/// them over time (the report's, SPEC.md §14.6); none when there is no attribution.
pub fn join_with_records(
    receipt: impl BufRead,
    completions: impl BufRead,
    options: &JoinOptions,
) -> Result<(Join, Vec<AttributedRecord>), JoinError> {
    join_keeping(receipt, completions, options, true)
}

fn join_keeping(
    receipt: impl BufRead,
    completions: impl BufRead,
    options: &JoinOptions,
    keep_records: bool,
) -> Result<(Join, Vec<AttributedRecord>), JoinError> {
    let run = options.run.unwrap_or(Policy::CachePlusLoad);
    let (format, completions) = match options.format {
        Some(format) => (format, Box::new(completions) as Box<dyn BufRead + '_>),
        None => detect(completions)?,
    };
    // Both are read before either is judged: a bad completion line comes first, then
    // no records, then the receipt's problems (SPEC.md §14.5).
    let receipt_run = receipt::read_run(receipt, run);
    let evidence = read_evidence(format, completions, options.id_key.as_deref())?;
    let ReceiptRun {
        receipt_digest,
        trace_digest,
        decisions,
        workers,
        ..
    } = receipt_run.map_err(JoinError::Receipt)?;
    let cohort_of_decision = match &options.trace {
        None => None,
        Some(Err(lines)) => return Err(JoinError::Trace(lines.clone())),
        Some(Ok(trace)) => Some(cohorts_of_decisions(trace, &trace_digest, &decisions)?),
    };
    let records = match evidence {
        Evidence::Keyed(records) => records,
        Evidence::Positional(result) => positional_records(result, &decisions),
    };
    let mut figures = figures::join(&decisions, &records, options.slo);
    // Decided by the run, so the run and every cohort carry the member alike (§14.3).
    let attributed = attribution::any_figure(&decisions, &records);
    let mut attributed_records = Vec::new();
    if attributed {
        let kept = keep_records.then_some(&mut attributed_records);
        figures.attribution = Some(attribute_run(&decisions, &records, &workers, kept));
    }
    if figures.counts.matched + figures.counts.rejected_served == 0 {
        if let (Some(completion_id), Some(decision)) = (records.first_id(), decisions.first()) {
            return Err(JoinError::NothingMatched {
                completion_id: completion_id.to_owned(),
                request_id: decision.request.clone(),
            });
        }
    }
    if let Some(cohort_of_decision) = cohort_of_decision {
        let workers = attributed.then_some(&workers);
        figures.cohorts = Some(cohort_figures(
            &decisions,
            &cohort_of_decision,
            &records,
            options.slo,
            workers,
        ));
    }
    let join = Join {
        receipt_digest,
        run,
        slo: options.slo,
        format,
        figures,
    };
    Ok((join, attributed_records))
}

/// The completion records in `format`, their ids keyed under `id_key` if given; an
/// error if a line is bad or there are no records at all.
fn read_evidence(
    format: CompletionsFormat,
    completions: Box<dyn BufRead + '_>,
    id_key: Option<&[u8]>,
) -> Result<Evidence, JoinError> {
    let evidence = match format {
        CompletionsFormat::Aiperf => Evidence::Keyed(read_records(completions, id_key, |line| {
            aiperf::parse_completion(line).map(Some)
        })?),
        CompletionsFormat::Dynamo => {
            Evidence::Keyed(read_records(completions, id_key, dynamo::parse_line)?)
        }
        CompletionsFormat::VllmBench => Evidence::Positional(read_document(completions)?),
    };
    let no_records = match &evidence {
        Evidence::Keyed(records) => records.first_id().is_none(),
        Evidence::Positional(result) => result.entries.is_empty(),
    };
    if no_records {
        return Err(JoinError::NoRecords);
    }
    Ok(evidence)
}

/// The run's attribution, each attributed record pushed onto `kept` when given.
fn attribute_run(
    decisions: &[DecisionSummary],
    records: &Records,
    workers: &receipt::WorkerIndex,
    mut kept: Option<&mut Vec<AttributedRecord>>,
) -> attribution::Attribution {
    let keep = |decision: &DecisionSummary, worker: Option<&str>, parts: &RecordParts| {
        if let Some(kept) = kept.as_mut() {
            kept.push(AttributedRecord {
                tick: decision.tick,
                serving_worker: worker.map(str::to_owned),
                parts: *parts,
            });
        }
    };
    attribution::attribute_each(decisions, records, workers, keep)
}

/// A `vllm-bench` document's entries as records, entry `i` taking the id of decision
/// `i` (SPEC.md §14.1.2).
fn positional_records(result: vllm_bench::BenchResult, decisions: &[DecisionSummary]) -> Records {
    Records::by_position(
        result.entries.into_iter().map(|entry| Completion {
            request_id: String::new(),
            start_ns: None,
            end_ns: None,
            cancelled: false,
            failed: entry.failed,
            ttft_us: Some(entry.ttft_us),
            tpot_us: Some(entry.tpot_us),
            cached_tokens: None,
            serving_worker: None,
        }),
        &decisions
            .iter()
            .map(|d| d.request.as_str())
            .collect::<Vec<_>>(),
        u128::from(result.duration_ns),
    )
}

/// Each decision's cohort, after the trace's digest is checked (SPEC.md §14.5, 5–6).
fn cohorts_of_decisions<'t>(
    trace: &'t TraceCohorts,
    receipt_trace_digest: &str,
    decisions: &[DecisionSummary],
) -> Result<Vec<&'t Cohort>, JoinError> {
    if trace.trace_digest != receipt_trace_digest {
        return Err(JoinError::TraceDigest {
            trace: trace.trace_digest.clone(),
            receipt: receipt_trace_digest.to_owned(),
        });
    }
    decisions
        .iter()
        .map(|decision| {
            trace
                .cohort_of_request
                .get(&decision.request)
                .ok_or_else(|| JoinError::UnknownRequest(decision.request.clone()))
        })
        .collect()
}

/// The figures of every cohort with a routed decision, in byte order of the triple.
fn cohort_figures(
    decisions: &[DecisionSummary],
    cohort_of_decision: &[&Cohort],
    records: &Records,
    slo: Option<Slo>,
    attribution_workers: Option<&receipt::WorkerIndex>,
) -> Vec<CohortFigures> {
    let mut members: BTreeMap<&Cohort, Vec<usize>> = BTreeMap::new();
    for (i, cohort) in cohort_of_decision.iter().enumerate() {
        members.entry(*cohort).or_default().push(i);
    }
    members
        .into_iter()
        .filter(|(_, indexes)| indexes.iter().any(|&i| decisions[i].chosen.is_some()))
        .map(|((tenant, model, adapter), indexes)| {
            let own: Vec<DecisionSummary> = indexes.iter().map(|&i| decisions[i].clone()).collect();
            let ids: Vec<&str> = own.iter().map(|d| d.request.as_str()).collect();
            let own_records = records.restricted_to(&ids);
            let mut figures = figures::join(&own, &own_records, slo);
            figures.attribution = attribution_workers
                .map(|workers| attribution::attribute(&own, &own_records, workers));
            CohortFigures {
                tenant: tenant.clone(),
                model: model.clone(),
                adapter: adapter.clone(),
                figures,
            }
        })
        .collect()
}

/// The layout told from the first line that is not blank (SPEC.md §14.1.4), and the
/// completions again from their start: the lines read are replayed ahead of the rest.
fn detect<'r>(
    mut completions: impl BufRead + 'r,
) -> Result<(CompletionsFormat, Box<dyn BufRead + 'r>), JoinError> {
    let mut read_ahead = Vec::new();
    let mut number = 0;
    loop {
        number += 1;
        let start = read_ahead.len();
        let mut line = Vec::new();
        let read = (&mut completions)
            .take(LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut line);
        match read {
            // The line reader reports a read error itself, with its line.
            Err(_) | Ok(0) => {
                read_ahead.extend_from_slice(&line);
                break;
            }
            Ok(_) => {}
        }
        read_ahead.extend_from_slice(&line);
        if is_blank(&line) {
            continue;
        }
        if let Some(reason) = not_json_text(&read_ahead[start..]) {
            return Err(JoinError::Completions(vec![LineError {
                line: number,
                reason,
            }]));
        }
        let format =
            format_of_line(&read_ahead[start..]).ok_or(JoinError::Undetected { line: number })?;
        let replay = std::io::Cursor::new(read_ahead).chain(completions);
        return Ok((format, Box::new(std::io::BufReader::new(replay))));
    }
    // Nothing but blank lines: the records reader finds none (SPEC.md §14.5, 2).
    let replay = std::io::Cursor::new(read_ahead).chain(completions);
    Ok((
        CompletionsFormat::Aiperf,
        Box::new(std::io::BufReader::new(replay)),
    ))
}

/// Why a line cannot be JSON text whatever its layout (SPEC.md §14.1.4): it starts
/// with a byte order mark, or is not UTF-8. Said as such, since no layout could be told
/// from it and "cannot tell the format" would hide what is wrong.
fn not_json_text(line: &[u8]) -> Option<String> {
    // An over-long line is cut where the cap falls, maybe within a character.
    if line.len() > LINE_BYTES_MAX {
        return None;
    }
    if line.starts_with(b"\xEF\xBB\xBF") {
        return Some(
            "invalid JSON: the line starts with a UTF-8 byte order mark (EF BB BF), which \
             JSON text must not carry"
                .to_owned(),
        );
    }
    std::str::from_utf8(line).err().map(|e| {
        format!(
            "invalid JSON: the line is not UTF-8 at column {}",
            e.valid_up_to() + 1
        )
    })
}

/// JSON's own whitespace only (a form feed is not, SPEC.md §14.5).
fn is_blank(line: &[u8]) -> bool {
    line.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// The one layout whose marker members the line's object has, if exactly one.
fn format_of_line(line: &[u8]) -> Option<CompletionsFormat> {
    if line.len() > LINE_BYTES_MAX {
        return None;
    }
    let crate::input::json::Node::Object(members) =
        crate::input::json_lines::line_json(line).ok()?
    else {
        return None;
    };
    let has = |name: &str| members.iter().any(|(k, _)| k == name);
    let matching: Vec<CompletionsFormat> = [
        (CompletionsFormat::Aiperf, has("metadata")),
        (CompletionsFormat::Dynamo, has("event") || has("event_type")),
        (CompletionsFormat::VllmBench, has("ttfts")),
    ]
    .into_iter()
    .filter_map(|(format, marked)| marked.then_some(format))
    .collect();
    match matching.as_slice() {
        [format] => Some(*format),
        _ => None,
    }
}

/// The whole `vllm-bench` document (at most the line cap), or its reasons.
fn read_document(completions: impl BufRead) -> Result<vllm_bench::BenchResult, JoinError> {
    let mut bytes = Vec::new();
    let document_error = |reason: String| JoinError::Document {
        reasons: vec![reason],
        more: 0,
    };
    completions
        .take(LINE_BYTES_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| document_error(format!("cannot read the input: {e}")))?;
    if bytes.len() > LINE_BYTES_MAX {
        return Err(document_error(format!(
            "document longer than {LINE_BYTES_MAX} bytes"
        )));
    }
    if is_blank(&bytes) {
        return Err(JoinError::NoRecords);
    }
    vllm_bench::parse_document(&bytes).map_err(|mut reasons| {
        let more = reasons.len().saturating_sub(ERRORS_SHOWN);
        reasons.truncate(ERRORS_SHOWN);
        JoinError::Document { reasons, more }
    })
}

/// How many errors are printed before the rest are only counted (SPEC.md §2.3).
const ERRORS_SHOWN: usize = crate::input::limits::ERROR_LINES_MAX;

/// Every record of the completions, ids keyed when asked; or the first lines in error.
fn read_records(
    completions: impl BufRead,
    id_key: Option<&[u8]>,
    parse: impl Fn(&[u8]) -> Result<Option<Completion>, Vec<String>>,
) -> Result<Records, JoinError> {
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
        if is_blank(line) {
            return;
        }
        match parse(line) {
            // A line of another kind (Dynamo's tool events) holds no record.
            Ok(None) => {}
            Ok(Some(mut completion)) => {
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

#[cfg(test)]
mod detection_tests {
    use super::*;

    fn detected_error(completions: &[u8]) -> Option<JoinError> {
        detect(completions).err()
    }

    #[test]
    fn a_byte_order_mark_or_bytes_that_are_not_utf8_are_named_not_undetected() {
        let record = br#"{"metadata":{"x_request_id":"a","request_start_ns":1}}"#;
        let bom = [b"\n\xEF\xBB\xBF".as_slice(), record].concat();
        assert_eq!(
            detected_error(&bom),
            Some(JoinError::Completions(vec![LineError {
                line: 2,
                reason: "invalid JSON: the line starts with a UTF-8 byte order mark (EF BB BF), \
                         which JSON text must not carry"
                    .to_owned(),
            }]))
        );
        let not_utf8 = [br#"{"metadata":{"x_request_id":""#.as_slice(), b"\xFF\"}}"].concat();
        assert_eq!(
            detected_error(&not_utf8),
            Some(JoinError::Completions(vec![LineError {
                line: 1,
                reason: "invalid JSON: the line is not UTF-8 at column 30".to_owned(),
            }]))
        );
        assert_eq!(
            detected_error(b"[1]\n"),
            Some(JoinError::Undetected { line: 1 })
        );
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    /// SPEC.md §14.7's worked example under `cache_plus_load`: the one record, at its
    /// decision's tick, served (as routed) on `w0`, with its 512 phantom tokens; the
    /// join itself is the same with or without the records.
    #[test]
    fn the_attributed_records_are_the_ones_summed() {
        let trace = include_str!("../../../fixtures/spec_example/trace.json");
        let receipt = crate::replay_bytes(trace.as_bytes()).unwrap();
        let line = br#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":10,"avg_itl_ms":1,"cached_tokens":512}}"#;
        let options = JoinOptions::default();
        let (joined, records) = join_with_records(&receipt[..], &line[..], &options).unwrap();
        assert_eq!(join(&receipt[..], &line[..], &options).unwrap(), joined);
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(
            (record.tick, record.serving_worker.as_deref()),
            (1, Some("w0"))
        );
        assert_eq!((record.parts.workload, record.parts.phantom), (176, 512));
        let a = joined.figures.attribution.unwrap();
        assert_eq!(u128::from(record.parts.phantom), a.phantom);
        // Without a cached figure or a worker, nothing is attributed and nothing kept.
        let bare = br#"{"event_type":"request_end","request":{"request_id":"c","x_request_id":"r1","ttft_ms":10,"avg_itl_ms":1}}"#;
        let (_, records) = join_with_records(&receipt[..], &bare[..], &options).unwrap();
        assert!(records.is_empty());
    }
}
