//! The receipt as the report and the diff read it, in the receipt's own shape: whole
//! runs ([`Lab`]), built either by replaying a trace with core or by reading a
//! `kvroute-receipt/1` file with core's streaming reader
//! ([`kvroute_core::input::receipt`]) into [`CollectRuns`]. `kvroute report` does not
//! hold a receipt's runs: it reads them through [`super::gather`], element by element
//! in these types.
//!
//! Both commands work from this shape (the receipt's own field names, SPEC.md §6), so a
//! report of a receipt file and a report of its trace are the same page. What a receipt
//! does not carry (a request's model and adapter, a worker's prefill rate) comes from
//! the trace when there is one, in [`TraceFacts`].

use kvroute_core::input::EventKind;
use kvroute_core::input::{Layout, Member, Place, ReceiptSink};
use kvroute_core::route::CandidateRow;
use kvroute_core::route::Metrics;
use kvroute_core::route::{CacheLogEntry, Decision, ObservationLogEntry, Run};
use kvroute_core::{Receipt, Trace};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use kvroute_core::input::{RECEIPT_FORMAT, RECEIPT_HEAD, STREAM_FORMAT, STREAM_HEAD};

/// Every element of every run, kept: the runs whole, for `kvroute diff`.
#[derive(Default)]
pub struct CollectRuns {
    runs: Vec<RunDoc>,
}

impl CollectRuns {
    /// The runs read, in receipt order.
    pub fn into_runs(self) -> Vec<RunDoc> {
        self.runs
    }

    /// The run `run`, made when its first element is read.
    fn run(&mut self, run: usize) -> &mut RunDoc {
        while self.runs.len() <= run {
            self.runs.push(RunDoc::empty(""));
        }
        &mut self.runs[run]
    }
}

impl ReceiptSink for CollectRuns {
    type Decision = DecisionDoc;
    type CacheLogEntry = CacheLogDoc;
    type ObservationLogEntry = ObservationLogDoc;
    type Metrics = Metrics;

    fn wants(&self, _: Member, _: usize, _: Option<&str>) -> bool {
        true
    }
    fn decision(&mut self, at: Place, decision: DecisionDoc) -> Result<(), String> {
        self.run(at.run).decisions.push(decision);
        Ok(())
    }
    fn cache_log(&mut self, at: Place, entry: CacheLogDoc) -> Result<(), String> {
        self.run(at.run).cache_log.push(entry);
        Ok(())
    }
    fn observation_log(&mut self, at: Place, entry: ObservationLogDoc) -> Result<(), String> {
        self.run(at.run).observation_log.push(entry);
        Ok(())
    }
    fn metrics(&mut self, run: usize, metrics: Metrics) -> Result<(), String> {
        self.run(run).metrics = metrics;
        Ok(())
    }
    fn run_end(&mut self, run: usize, policy: &str) -> Result<(), String> {
        policy.clone_into(&mut self.run(run).policy);
        Ok(())
    }
}

/// How a receipt's layout is named in a message about it.
pub fn layout_name(layout: Layout) -> String {
    match layout {
        Layout::Json => RECEIPT_FORMAT.to_owned(),
        Layout::JsonLines => format!("{STREAM_FORMAT} receipt"),
    }
}

#[derive(Debug, Clone)]
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
    pub fn empty(policy: &str) -> RunDoc {
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
        self.latency_proxy_of_row(decision.chosen_row()?)
    }

    /// [`Self::latency_proxy_milli`] of a decision whose chosen row is `row`.
    pub fn latency_proxy_of_row(&self, row: &RowDoc) -> Option<u64> {
        let rate = *self.prefill_rate_of_worker.get(&row.worker)?;
        let queued_and_recomputed = row.queued_prefill as u128 + row.recomputed as u128;
        Some((1000 * queued_and_recomputed / rate.max(1) as u128) as u64)
    }
}

/// A receipt's runs, whole, with what is known about where they came from: what
/// `kvroute diff` compares, and a replayed trace's runs before the report reads them.
#[derive(Debug, Clone)]
pub struct Lab {
    /// Where the receipt came from, as the page names it.
    pub source: String,
    pub trace_digest: String,
    pub receipt_digest: String,
    pub runs: Vec<RunDoc>,
    pub facts: Option<TraceFacts>,
}

impl Lab {
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
