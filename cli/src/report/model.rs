//! The receipt as the report and the diff read it: one owned document, built either by
//! replaying a trace with core or by parsing a `kvroute-receipt/1` file.
//!
//! Both commands work from this shape (the receipt's own field names, SPEC.md §6), so a
//! report of a receipt file and a report of its trace are the same page. What a receipt
//! does not carry (a request's model and adapter, a worker's prefill rate) comes from
//! the trace when there is one, in [`TraceFacts`].

use kvroute_core::input::trace::EventKind;
use kvroute_core::route::candidate::CandidateRow;
use kvroute_core::route::metrics::Metrics;
use kvroute_core::route::record::{CacheLogEntry, Decision, ObservationLogEntry, Run};
use kvroute_core::{Receipt, Trace};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::BufRead;

/// The `format` member of a receipt file.
pub const RECEIPT_FORMAT: &str = "kvroute-receipt/1";

/// How a canonical receipt file starts (its members are sorted, `format` first).
pub const RECEIPT_HEAD: &[u8] = br#"{"format":"kvroute-receipt/1""#;
/// How a JSON Lines receipt file starts (SPEC.md §6.4).
pub const STREAM_HEAD: &[u8] = br#"{"format":"kvroute-receipt-stream/1""#;

/// Reads a canonical receipt from `reader` into its runs, one element at a time: the
/// file's bytes are never held, only the documents they make.
pub fn read_canonical(reader: impl BufRead) -> Result<ReceiptDoc, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let receipt = ReceiptDoc::deserialize(&mut de)?;
    de.end()?;
    Ok(receipt)
}

/// The members of one JSON Lines receipt line (SPEC.md §6.4): the head's, one
/// element's beside its `policy`, or the last line's `receipt_digest`.
#[derive(Deserialize)]
struct StreamLine {
    receipt_format: Option<String>,
    trace_digest: Option<String>,
    policy: Option<String>,
    decisions: Option<DecisionDoc>,
    cache_log: Option<CacheLogDoc>,
    observation_log: Option<ObservationLogDoc>,
    metrics: Option<Metrics>,
    receipt_digest: Option<String>,
}

impl StreamLine {
    fn elements(&self) -> usize {
        usize::from(self.decisions.is_some())
            + usize::from(self.cache_log.is_some())
            + usize::from(self.observation_log.is_some())
            + usize::from(self.metrics.is_some())
    }
}

/// Reads a JSON Lines receipt from `reader` a line at a time into the runs its lines
/// make: the runs in the order the lines first name them, each member's elements in
/// line order, `receipt_digest` from the last line. Problems name their line.
pub fn read_lines(reader: impl BufRead) -> Result<ReceiptDoc, String> {
    let mut runs: Vec<(RunDoc, bool)> = Vec::new();
    let mut trace_digest = None;
    let mut receipt_digest = None;
    for (index, line) in reader.split(b'\n').enumerate() {
        let line_number = index + 1;
        let line = line.map_err(|e| format!("line {line_number}: cannot read it: {e}"))?;
        if line.is_empty() {
            continue;
        }
        let line: StreamLine = serde_json::from_slice(&line)
            .map_err(|e| format!("line {line_number}: {}", line_problem(&line, &e)))?;
        if index == 0 {
            if line.receipt_format.as_deref() != Some(RECEIPT_FORMAT) {
                return Err(format!(
                    "line 1: its receipt_format is not {RECEIPT_FORMAT:?}"
                ));
            }
            trace_digest = line.trace_digest;
            continue;
        }
        if line.receipt_digest.is_some() {
            receipt_digest = line.receipt_digest;
            continue;
        }
        let Some(policy) = line.policy.as_deref() else {
            return Err(format!("line {line_number}: no policy"));
        };
        if line.elements() != 1 {
            return Err(format!("line {line_number}: not one member beside policy"));
        }
        if runs.last().is_none_or(|(run, _)| run.policy != policy) {
            runs.push((RunDoc::empty(policy), false));
        }
        let (run, has_metrics) = runs.last_mut().expect("pushed");
        if let Some(metrics) = line.metrics {
            run.metrics = metrics;
            *has_metrics = true;
        }
        run.decisions.extend(line.decisions);
        run.cache_log.extend(line.cache_log);
        run.observation_log.extend(line.observation_log);
    }
    if let Some((run, _)) = runs.iter().find(|(_, has_metrics)| !has_metrics) {
        return Err(format!("the {} run has no metrics line", run.policy));
    }
    Ok(ReceiptDoc {
        trace_digest: trace_digest.ok_or("line 1: no trace_digest")?,
        runs: runs.into_iter().map(|(run, _)| run).collect(),
        receipt_digest: receipt_digest.ok_or("no last line with the receipt_digest")?,
    })
}

/// Why a JSON Lines receipt line did not parse: two element members beside `policy` is
/// said as such, since which of them failed first is an accident of their order.
fn line_problem(line: &[u8], error: &serde_json::Error) -> String {
    let members: Result<HashMap<String, serde::de::IgnoredAny>, _> = serde_json::from_slice(line);
    let elements = ["decisions", "cache_log", "observation_log", "metrics"];
    match members {
        Ok(members)
            if members.contains_key("policy")
                && elements
                    .iter()
                    .filter(|m| members.contains_key(**m))
                    .count()
                    > 1 =>
        {
            "not one member beside policy".to_owned()
        }
        _ => error.to_string(),
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReceiptDoc {
    pub trace_digest: String,
    pub runs: Vec<RunDoc>,
    pub receipt_digest: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RunDoc {
    pub policy: String,
    pub decisions: Vec<DecisionDoc>,
    pub cache_log: Vec<CacheLogDoc>,
    pub observation_log: Vec<ObservationLogDoc>,
    /// Core's own type: its fields are the receipt's member names.
    pub metrics: Metrics,
}

impl RunDoc {
    /// A run of `policy` with nothing read yet.
    fn empty(policy: &str) -> RunDoc {
        RunDoc {
            policy: policy.to_owned(),
            decisions: Vec::new(),
            cache_log: Vec::new(),
            observation_log: Vec::new(),
            metrics: Metrics::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionDoc {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<String>,
    pub route_kind: String,
    pub tie_count: u64,
    pub margin_milli: u64,
    pub candidates: Vec<RowDoc>,
}

impl DecisionDoc {
    /// The chosen worker's row, when the request was routed.
    pub fn chosen_row(&self) -> Option<&RowDoc> {
        let chosen = self.chosen.as_deref()?;
        self.candidates.iter().find(|row| row.worker == chosen)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RowDoc {
    pub worker: String,
    pub eligible: bool,
    pub reasons: Vec<String>,
    pub reuse: u64,
    pub recomputed: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub work_milli: u64,
    pub after_milli: u64,
    pub cost_milli: u64,
    /// The smallest-id front-set row that dominates this one (SPEC.md §4.6).
    pub dominated_by: Option<String>,
    /// How many front-set rows dominate this one.
    pub dominated_count: u64,
}

/// The three reasons that mark evidence another tenant, model or adapter owns.
pub const BOUNDARY_REASONS: [&str; 3] = ["tenant_mismatch", "model_mismatch", "adapter_mismatch"];

impl RowDoc {
    /// Whether the row's cache evidence failed rather than merely cost more: the worker
    /// cannot serve the request, its view is stale or has an evidence gap, or the
    /// overload cap or the cold reserve excluded it. The Pareto view draws these as
    /// dotted points.
    pub fn is_failure(&self) -> bool {
        !self.eligible
            || ["stale_view", "evidence_gap", "overloaded", "cold_reserve"]
                .iter()
                .any(|r| self.has_reason(r))
    }

    /// In the front set of SPEC.md §4.6: eligible, cut neither by the cap nor the reserve.
    pub fn in_front_set(&self) -> bool {
        self.eligible && !self.has_reason("overloaded") && !self.has_reason("cold_reserve")
    }

    pub fn has_reason(&self, reason: &str) -> bool {
        self.reasons.iter().any(|r| r == reason)
    }

    pub fn has_boundary_reason(&self) -> bool {
        self.reasons
            .iter()
            .any(|r| BOUNDARY_REASONS.contains(&r.as_str()))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheLogDoc {
    pub seq: u64,
    pub tick: u64,
    pub worker: String,
    pub epoch: u64,
    pub op: String,
    pub outcome: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObservationLogDoc {
    pub seq: u64,
    pub tick: u64,
    pub worker: String,
    pub observed_tick: u64,
    pub outcome: String,
}

/// What the trace knows and the receipt does not.
#[derive(Debug, Clone, Default)]
pub struct TraceFacts {
    /// `(model, adapter)` of each request, by request id.
    pub cohort_of_request: HashMap<String, (String, String)>,
    /// Each worker's prefill rate (tokens per tick), by worker id.
    pub prefill_rate_of_worker: HashMap<String, u64>,
}

impl TraceFacts {
    pub fn of(trace: &Trace) -> Self {
        let cohort_of_request = trace
            .events
            .iter()
            .filter_map(|event| match &event.kind {
                EventKind::Request(request) => Some((
                    request.id.to_string(),
                    (
                        request.namespace.model.to_string(),
                        request.namespace.adapter.to_string(),
                    ),
                )),
                _ => None,
            })
            .collect();
        let prefill_rate_of_worker = trace
            .workers
            .iter()
            .map(|w| (w.id.to_string(), w.prefill_rate))
            .collect();
        TraceFacts {
            cohort_of_request,
            prefill_rate_of_worker,
        }
    }

    /// SPEC.md §6.2's latency proxy of a routed decision: milli-ticks of prefill queued
    /// ahead plus the request's own recompute, on the chosen worker.
    pub fn latency_proxy_milli(&self, decision: &DecisionDoc) -> Option<u64> {
        let row = decision.chosen_row()?;
        let rate = *self.prefill_rate_of_worker.get(&row.worker)?;
        let queued_and_recomputed = row.queued_prefill as u128 + row.recomputed as u128;
        Some((1000 * queued_and_recomputed / rate.max(1) as u128) as u64)
    }
}

/// A receipt with what the report knows about where it came from.
#[derive(Debug, Clone)]
pub struct Lab {
    /// Where the receipt came from, as the page names it.
    pub source: String,
    pub trace_digest: String,
    pub receipt_digest: String,
    pub runs: Vec<RunDoc>,
    pub facts: Option<TraceFacts>,
    /// The receipt's JSON as read, when the input was a receipt read whole (for
    /// `--completions`).
    pub receipt_json: Option<Vec<u8>>,
    /// The receipt file, when the input was a receipt streamed from it (for
    /// `--completions`, which reads it again).
    pub receipt_path: Option<std::path::PathBuf>,
    /// The Completions panel (SPEC.md §14.6), when `--completions` was given.
    pub completions: Option<super::completions::CompletionsView>,
}

impl Lab {
    /// Worker ids in id order, from the rows (every decision has one row per worker).
    pub fn worker_ids(&self) -> Vec<String> {
        self.runs
            .iter()
            .flat_map(|run| run.decisions.first())
            .map(|d| d.candidates.iter().map(|r| r.worker.clone()).collect())
            .next()
            .unwrap_or_default()
    }

    /// Whether there is a trace but none of the receipt's request ids is in it: a
    /// receipt written with `--id-key` read without the key (or with another one).
    pub fn requests_unmatched(&self) -> bool {
        let Some(facts) = &self.facts else {
            return false;
        };
        let mut requests = self.runs.iter().flat_map(|r| &r.decisions).peekable();
        requests.peek().is_some()
            && requests.all(|d| !facts.cohort_of_request.contains_key(&d.request))
    }

    pub fn run(&self, policy: &str) -> Option<&RunDoc> {
        self.runs.iter().find(|run| run.policy == policy)
    }
}

/// The in-memory receipt in the receipt file's shape, without building its JSON.
pub fn runs_of_receipt(receipt: &Receipt) -> Vec<RunDoc> {
    let ids = &receipt.worker_ids;
    receipt.runs.iter().map(|run| run_doc(ids, run)).collect()
}

fn run_doc(ids: &[String], run: &Run) -> RunDoc {
    RunDoc {
        policy: run.policy.name().to_owned(),
        decisions: run.decisions.iter().map(|d| decision_doc(ids, d)).collect(),
        cache_log: run
            .cache_log
            .iter()
            .map(|e| cache_log_doc(ids, e))
            .collect(),
        observation_log: run
            .observation_log
            .iter()
            .map(|e| observation_log_doc(ids, e))
            .collect(),
        metrics: run.metrics.clone(),
    }
}

fn decision_doc(ids: &[String], d: &Decision) -> DecisionDoc {
    DecisionDoc {
        seq: d.seq,
        tick: d.tick,
        request: d.request.clone(),
        chosen: d.chosen.map(|c| ids[c].clone()),
        route_kind: d.route_kind.name().to_owned(),
        tie_count: d.tie_count,
        margin_milli: d.margin_milli,
        candidates: d.candidates.iter().map(|r| row_doc(ids, r)).collect(),
    }
}

fn row_doc(ids: &[String], r: &CandidateRow) -> RowDoc {
    RowDoc {
        worker: ids[r.worker].clone(),
        eligible: r.eligible,
        reasons: r.reasons.iter().map(|x| x.name().to_owned()).collect(),
        reuse: r.reuse,
        recomputed: r.recomputed,
        queued_prefill: r.queued_prefill,
        active_decode: r.active_decode,
        work_milli: r.work_milli,
        after_milli: r.after_milli,
        cost_milli: r.cost_milli,
        dominated_by: r.dominated_by.map(|w| ids[w].clone()),
        dominated_count: r.dominated_count,
    }
}

fn cache_log_doc(ids: &[String], e: &CacheLogEntry) -> CacheLogDoc {
    CacheLogDoc {
        seq: e.seq,
        tick: e.tick,
        worker: ids[e.worker].clone(),
        epoch: e.epoch,
        op: e.op.name().to_owned(),
        outcome: e.outcome.name().to_owned(),
    }
}

fn observation_log_doc(ids: &[String], e: &ObservationLogEntry) -> ObservationLogDoc {
    ObservationLogDoc {
        seq: e.seq,
        tick: e.tick,
        worker: ids[e.worker].clone(),
        observed_tick: e.observed_tick,
        outcome: e.outcome.name().to_owned(),
    }
}
