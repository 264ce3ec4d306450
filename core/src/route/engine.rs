//! The replay engine: one clean run of the trace per policy (SPEC.md §3, §5, §4.8).
//!
//! A [`Runner`] holds one policy's run: its own fresh [`RouterState`], the round-robin
//! cursor, the metrics so far and the scratch rows. [`Runner::step`] takes one event in
//! `(tick, seq)` order: cache events and load observations go through
//! [`crate::route::state`]; a request gets its rows ([`crate::route::candidate`]), the
//! policy's price and choice ([`crate::route::policy`]) and its placement.
//! What the run produces goes to a [`RunSink`] as it is produced, so the same loop
//! collects a full receipt in memory, streams one to a file, or keeps metrics only.
//! Nothing is shared between runs, so they may execute in any order or in parallel.

use crate::input::trace::StaleRule;
use crate::route::candidate::Rows;
use crate::route::compiled::{CEvent, Compiled, Req, Step};
use crate::route::metrics::{Metrics, MetricsRecorder};
use crate::route::policy::{choose, price, Choice, Policy, RouteKind};
use crate::route::record::{CacheLogEntry, Decision, ObservationLogEntry, Run};
use crate::route::state::RouterState;
use crate::route::tenant::{NamespaceRule, Sharing};

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
    /// dominance: O(workers) rows, O(workers²) comparisons.
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

/// Where a run's output goes. Every method defaults to ignoring its input, so a sink
/// that keeps metrics only is `()`.
pub trait RunSink {
    fn cache_logged(&mut self, _entry: &CacheLogEntry) {}
    fn observation_logged(&mut self, _entry: &ObservationLogEntry) {}
    fn decided(&mut self, _decision: &DecisionRef) {}
}

/// The sink of a run that writes no receipt: the metrics are all it keeps.
impl RunSink for () {}

/// Collects a run's decisions and logs in memory, for the in-memory [`Receipt`].
#[derive(Default)]
pub struct CollectSink {
    pub decisions: Vec<Decision>,
    pub cache_log: Vec<CacheLogEntry>,
    pub observation_log: Vec<ObservationLogEntry>,
}

impl RunSink for CollectSink {
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        self.cache_log.push(entry.clone());
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        self.observation_log.push(entry.clone());
    }
    fn decided(&mut self, decision: &DecisionRef) {
        self.decisions.push(decision.to_decision());
    }
}

/// Where a routed request went, for callers that drive a run event by event (the
/// closed-loop simulator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub worker: usize,
    pub reuse_tokens: u64,
    pub recomputed_tokens: u64,
}

/// One policy's run in progress.
pub struct Runner<'c, 't> {
    compiled: &'c Compiled<'t>,
    policy: Policy,
    state: RouterState,
    rows: Rows,
    rule: NamespaceRule<'t>,
    cursor: usize,
    metrics: MetricsRecorder,
    /// The worker whose evidence gap the last step opened, if it did (the closed loop
    /// re-queries that worker, SPEC.md §11).
    last_gap_opened: Option<u32>,
}

impl<'c, 't> Runner<'c, 't> {
    /// A run from the trace's initial state.
    pub fn new(compiled: &'c Compiled<'t>, policy: Policy) -> Self {
        Self::with_state(compiled, policy, RouterState::initial(compiled))
    }

    /// A run from `state` (normally [`RouterState::initial`]).
    pub fn with_state(compiled: &'c Compiled<'t>, policy: Policy, state: RouterState) -> Self {
        Runner {
            compiled,
            policy,
            state,
            rows: Rows::new(compiled.worker_count()),
            rule: NamespaceRule::new(Sharing::new(compiled.sharing)),
            cursor: 0,
            last_gap_opened: None,
            metrics: MetricsRecorder::new(compiled.worker_count(), &compiled.trace.policy),
        }
    }

    /// The worker whose evidence gap the last [`Runner::step`] opened, if any.
    pub fn gap_opened(&self) -> Option<u32> {
        self.last_gap_opened
    }

    /// Processes one event. Events must come in `(tick, seq)` order.
    pub fn step(&mut self, event: &CEvent, sink: &mut impl RunSink) -> Option<Placement> {
        self.last_gap_opened = None;
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                let outcome = self
                    .state
                    .apply_cache_event(*worker, event.tick, *epoch, op);
                self.metrics.record_cache_outcome(&outcome);
                let key_rule = self.state.stale_rule == StaleRule::KeyEpoch;
                sink.cache_logged(&CacheLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: *worker as usize,
                    epoch: *epoch,
                    op: op.kind(),
                    outcome: outcome.outcome,
                    stale_mutations: key_rule.then_some(outcome.stale_mutations),
                });
                self.last_gap_opened = outcome.gap_opened.then_some(*worker);
                None
            }
            Step::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => {
                let outcome = self.state.workers[*worker as usize].apply_observation(
                    event.tick,
                    *observed_tick,
                    *queued_prefill,
                    *active_decode,
                );
                self.metrics.record_outcome(outcome);
                sink.observation_logged(&ObservationLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: *worker as usize,
                    observed_tick: *observed_tick,
                    outcome,
                });
                None
            }
            Step::Request(request) => self.route(event, request, sink),
        }
    }

    fn route(
        &mut self,
        event: &CEvent,
        request: &Req,
        sink: &mut impl RunSink,
    ) -> Option<Placement> {
        let params = &self.compiled.trace.policy;
        self.rows.fill(
            event.tick,
            request,
            self.compiled,
            &mut self.state,
            params,
            &mut self.rule,
        );
        price(self.policy, &mut self.rows, params);
        let choice = choose(self.policy, &mut self.rows, params, &mut self.cursor);
        let rows = &self.rows;
        let route_kind = RouteKind::of(&choice, rows);
        self.metrics
            .record_decision(&choice, rows, request, &self.state.workers);
        let placement = choice.chosen.map(|c| {
            self.state.workers[c].place(rows.recomputed[c], request.decode_tokens);
            Placement {
                worker: c,
                reuse_tokens: rows.reuse[c],
                recomputed_tokens: rows.recomputed[c],
            }
        });
        sink.decided(&DecisionRef {
            seq: event.seq,
            tick: event.tick,
            request: request.id,
            choice,
            route_kind,
            rows,
        });
        placement
    }

    /// The run's metrics, and the state it ended with.
    pub fn finish(self) -> (Metrics, RouterState) {
        (self.metrics.finish(), self.state)
    }
}

/// Every policy's run, each from the trace's initial state (SPEC.md §3.5: nothing is
/// shared between runs), in receipt order.
pub fn run_all(compiled: &Compiled) -> Vec<Run> {
    if crate::mutant::active("mutant-shared-state") {
        // The mutant hands each policy the state the previous one left behind.
        let mut state = RouterState::initial(compiled);
        return Policy::runs_for(&compiled.trace.policy)
            .iter()
            .map(|&policy| {
                let (run, left) = run_policy_returning_state(compiled, policy, state.clone());
                state = left;
                run
            })
            .collect();
    }
    Policy::runs_for(&compiled.trace.policy)
        .iter()
        .map(|&policy| run_policy(compiled, policy, RouterState::initial(compiled)))
        .collect()
}

/// One policy's run with every decision and log entry kept, starting from `state`.
pub fn run_policy(compiled: &Compiled, policy: Policy, state: RouterState) -> Run {
    run_policy_returning_state(compiled, policy, state).0
}

fn run_policy_returning_state(
    compiled: &Compiled,
    policy: Policy,
    state: RouterState,
) -> (Run, RouterState) {
    let mut sink = CollectSink::default();
    let (metrics, state) = run_with_sink(compiled, policy, state, &mut sink);
    let run = Run {
        policy,
        decisions: sink.decisions,
        cache_log: sink.cache_log,
        observation_log: sink.observation_log,
        metrics,
    };
    (run, state)
}

/// One policy's run, everything it produces going to `sink`.
pub fn run_with_sink(
    compiled: &Compiled,
    policy: Policy,
    state: RouterState,
    sink: &mut impl RunSink,
) -> (Metrics, RouterState) {
    let mut runner = Runner::with_state(compiled, policy, state);
    for event in &compiled.events {
        runner.step(event, sink);
    }
    runner.finish()
}

/// One policy's metrics with no receipt kept: no candidate row is ever materialised, so
/// memory is the cache index and the workers, whatever the trace's length.
pub fn run_metrics(compiled: &Compiled, policy: Policy) -> Metrics {
    run_with_sink(compiled, policy, RouterState::initial(compiled), &mut ()).0
}
