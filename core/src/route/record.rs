//! What a run produces: its decisions with their candidate rows, its cache and
//! observation logs, and its metrics (SPEC.md §6, as data rather than bytes), and the
//! [`RunSink`] they are handed to as they are produced, so the same run collects them
//! in memory, writes them as bytes, or keeps its metrics only.
//!
//! Rows and logs refer to workers by index into the id-sorted worker list; ids are put
//! back only when [`crate::output`] writes them.

use crate::input::trace::OpKind;
use crate::route::candidate::{CandidateRow, Choice, Rows};
use crate::route::metrics::Metrics;
use crate::route::policy::{Policy, RouteKind};
use crate::route::state::Outcome;

/// One routing decision and every candidate row behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<usize>,
    pub route_kind: RouteKind,
    pub tie_count: u64,
    pub margin_milli: u64,
    pub candidates: Vec<CandidateRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub epoch: u64,
    pub op: OpKind,
    pub outcome: Outcome,
    /// Rejected mutations, under the `key_epoch` rule only (SPEC.md §3.2).
    pub stale_mutations: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub observed_tick: u64,
    pub outcome: Outcome,
}

/// One policy's replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub policy: Policy,
    pub decisions: Vec<Decision>,
    pub cache_log: Vec<CacheLogEntry>,
    pub observation_log: Vec<ObservationLogEntry>,
    pub metrics: Metrics,
}

/// A run record's members that a sink receives one element at a time, in the order
/// the canonical receipt lists them (`metrics` is one object, not an array). They are
/// named once, beside the receipt's reader, which meets the same members.
pub use crate::input::receipt::Member;

/// The order in which a sink wants a run's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOrder {
    /// Interleaved, as the events replay: one pass per run.
    AsReplayed,
    /// Member by member, as the canonical receipt lists them: the cache log, the
    /// decisions, the metrics, then the observation log (three passes per run, since the
    /// logs' outcomes never depend on routing; SPEC.md §6.4).
    ReceiptMembers,
}

/// One decision as the engine hands it to a sink: the rows are the run's scratch rows,
/// valid only during the call.
pub struct DecisionRef<'a> {
    pub seq: u64,
    pub tick: u64,
    pub request: &'a str,
    pub choice: Choice,
    pub route_kind: RouteKind,
    pub rows: &'a Rows,
}

impl DecisionRef<'_> {
    /// The decision as the receipt lists it, with every candidate row and its
    /// dominance: O(workers).
    pub fn to_decision(&self) -> Decision {
        Decision {
            seq: self.seq,
            tick: self.tick,
            request: self.request.to_owned(),
            chosen: self.choice.chosen,
            route_kind: self.route_kind,
            tie_count: self.choice.tie_count,
            margin_milli: self.choice.margin_milli,
            candidates: self.rows.to_candidate_rows(),
        }
    }
}

/// Where runs' output goes: the replay driver (`crate::replay`) announces each run and,
/// in [`RunOrder::ReceiptMembers`], each member; the engine sends the records. Every
/// method defaults to ignoring its input, so a sink that keeps metrics only is `()`.
pub trait RunSink {
    /// How this sink wants a run's records.
    fn order(&self) -> RunOrder {
        RunOrder::AsReplayed
    }
    /// Run number `index` (receipt order) begins.
    fn run_started(&mut self, _index: usize, _policy: Policy) {}
    /// Under [`RunOrder::ReceiptMembers`]: the records that follow belong to `member`.
    fn member_started(&mut self, _member: Member) {}
    fn cache_logged(&mut self, _entry: &CacheLogEntry) {}
    fn observation_logged(&mut self, _entry: &ObservationLogEntry) {}
    fn decided(&mut self, _decision: &DecisionRef) {}
    /// Whether [`RunSink::decided`] reads the decision's rows. The engine finds every
    /// row's dominance (SPEC.md §4.6) only for a sink that does, so a sink that ignores
    /// its decisions should say so.
    fn reads_rows(&self) -> bool {
        true
    }
    /// The run's metrics: after its decisions, before its observation log.
    fn metrics_computed(&mut self, _metrics: &Metrics) {}
    /// The run is complete.
    fn run_finished(&mut self) {}
}

/// The sink of a run that writes no receipt: the metrics are all it keeps.
impl RunSink for () {
    fn reads_rows(&self) -> bool {
        false
    }
}

/// Collects runs' decisions and logs in memory as [`Run`] records.
#[derive(Default)]
pub struct CollectSink {
    pub decisions: Vec<Decision>,
    pub cache_log: Vec<CacheLogEntry>,
    pub observation_log: Vec<ObservationLogEntry>,
    /// The runs completed so far, when more than one run goes to this sink.
    pub runs: Vec<Run>,
    policy: Option<Policy>,
}

impl RunSink for CollectSink {
    fn run_started(&mut self, _index: usize, policy: Policy) {
        self.policy = Some(policy);
    }
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        self.cache_log.push(entry.clone());
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        self.observation_log.push(entry.clone());
    }
    fn decided(&mut self, decision: &DecisionRef) {
        self.decisions.push(decision.to_decision());
    }
    fn metrics_computed(&mut self, metrics: &Metrics) {
        let policy = self.policy.take().expect("a run was started");
        self.runs.push(Run {
            policy,
            decisions: std::mem::take(&mut self.decisions),
            cache_log: std::mem::take(&mut self.cache_log),
            observation_log: std::mem::take(&mut self.observation_log),
            metrics: metrics.clone(),
        });
    }
}
