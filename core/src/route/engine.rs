//! The replay engine: one clean run of the trace per policy (SPEC.md §3, §5, §4.8).
//!
//! A [`Runner`] holds one policy's run: its own fresh [`RouterState`], the round-robin
//! cursor, the metrics so far and the scratch rows. [`Runner::step`] takes one event in
//! `(tick, seq)` order: cache events and load observations go through
//! [`crate::route::state`]; a request gets its rows ([`crate::route::candidate`]), the
//! policy's price and choice ([`crate::route::policy`]) and its placement.
//! What the run produces goes to a [`RunSink`] as it is produced, so the same loop
//! collects a full receipt in memory, streams one to a file, or keeps metrics only.
//! Which runs a trace has, and that each starts from a fresh state, is the replay
//! driver's business ([`crate::replay`]); nothing here is shared between runs.

use crate::input::trace::StaleRule;
use crate::route::candidate::Rows;
use crate::route::compiled::{CEvent, Compiled, Req, Step};
use crate::route::metrics::{Metrics, MetricsRecorder};
use crate::route::policy::{decide, Policy, RouteKind};
use crate::route::record::{
    CacheLogEntry, CollectSink, DecisionRef, ObservationLogEntry, Run, RunSink,
};
use crate::route::state::RouterState;
use crate::route::tenant::{NamespaceRule, Sharing};

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
    /// Whether cache log entries carry `stale_mutations`: under `key_epoch` only
    /// (SPEC.md §3.2), decided once per run rather than per event.
    logs_stale_mutations: bool,
}

impl<'c, 't> Runner<'c, 't> {
    /// A run from the trace's initial state.
    pub fn new(compiled: &'c Compiled<'t>, policy: Policy) -> Self {
        Self::with_state(compiled, policy, RouterState::initial(compiled))
    }

    /// A run from `state` (normally [`RouterState::initial`]).
    pub fn with_state(compiled: &'c Compiled<'t>, policy: Policy, state: RouterState) -> Self {
        let logs_stale_mutations = state.stale_rule == StaleRule::KeyEpoch;
        Runner {
            compiled,
            policy,
            state,
            rows: Rows::new(compiled.worker_count()),
            rule: NamespaceRule::new(Sharing::new(compiled.sharing)),
            cursor: 0,
            last_gap_opened: None,
            logs_stale_mutations,
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
                sink.cache_logged(&CacheLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: *worker as usize,
                    epoch: *epoch,
                    op: op.kind(),
                    outcome: outcome.outcome,
                    stale_mutations: self.logs_stale_mutations.then_some(outcome.stale_mutations),
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
        // Without a reader of the rows, a cost that no choice uses is not computed.
        let choice = decide(
            self.policy,
            &mut self.rows,
            params,
            &mut self.cursor,
            sink.reads_rows(),
        );
        // After the choice: the cap and the reserve it applied decide the front set.
        if sink.reads_rows() {
            self.rows.compute_dominance();
        }
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
        self.compiled.decisions_routed.add_one();
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

/// One policy's run with every decision and log entry kept, starting from `state`.
pub fn run_policy(compiled: &Compiled, policy: Policy, state: RouterState) -> Run {
    let mut sink = CollectSink::default();
    let (metrics, _) = run_with_sink(compiled, policy, state, &mut sink);
    Run {
        policy,
        decisions: sink.decisions,
        cache_log: sink.cache_log,
        observation_log: sink.observation_log,
        metrics,
    }
}

/// One policy's run, everything it produces going to `sink`.
pub fn run_with_sink(
    compiled: &Compiled,
    policy: Policy,
    state: RouterState,
    sink: &mut impl RunSink,
) -> (Metrics, RouterState) {
    run_events(compiled, policy, state, sink, |_| true)
}

/// One policy's run over only the events `keep` selects (the replay driver's log
/// passes), everything it produces going to `sink`.
pub fn run_events(
    compiled: &Compiled,
    policy: Policy,
    state: RouterState,
    sink: &mut impl RunSink,
    keep: impl Fn(&Step) -> bool,
) -> (Metrics, RouterState) {
    let mut runner = Runner::with_state(compiled, policy, state);
    compiled.each_event(|event| {
        if keep(&event.step) {
            runner.step(event, sink);
        }
    });
    runner.finish()
}

/// One policy's metrics with no receipt kept: no candidate row is ever materialised, so
/// memory is the cache index and the workers, whatever the trace's length.
pub fn run_metrics(compiled: &Compiled, policy: Policy) -> Metrics {
    run_with_sink(compiled, policy, RouterState::initial(compiled), &mut ()).0
}
