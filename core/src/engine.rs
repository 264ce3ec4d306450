//! The replay engine: one clean run of the trace per policy (SPEC.md §3, §5).
//!
//! Each run starts from its own fresh copy of the initial worker states, walks the
//! events in `(tick, seq)` order, drains every worker before each event, applies cache
//! events and load observations through [`crate::state`], and for each request builds
//! the candidate rows, lets the policy choose, and places the request. Nothing is
//! shared between runs, so the runs may execute in any order or in parallel.

use crate::candidate::{build_rows, mark_dominance};
use crate::canonical::trace_digest;
use crate::metrics::MetricsRecorder;
use crate::policy::{choose, Policy};
use crate::receipt::{CacheLogEntry, Decision, ObservationLogEntry, Receipt, RouteKind, Run};
use crate::state::WorkerState;
use crate::tenant::Sharing;
use crate::trace::{Event, EventKind, Trace, WorkerSpec};
use std::collections::BTreeMap;

/// A trace made ready to replay: workers in id order, events in `(tick, seq)` order.
pub struct Prepared<'t> {
    pub trace: &'t Trace,
    pub workers: Vec<&'t WorkerSpec>,
    pub events: Vec<&'t Event>,
    worker_index: BTreeMap<&'t str, usize>,
}

impl<'t> Prepared<'t> {
    pub fn new(trace: &'t Trace) -> Self {
        let mut workers: Vec<&WorkerSpec> = trace.workers.iter().collect();
        workers.sort_by(|a, b| a.id.cmp(&b.id));
        let mut events: Vec<&Event> = trace.events.iter().collect();
        events.sort_by_key(|e| (e.tick, e.seq));
        let worker_index = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (w.id.as_str(), i))
            .collect();
        Prepared {
            trace,
            workers,
            events,
            worker_index,
        }
    }

    /// The worker ids in id order (the index space of rows and logs).
    pub fn worker_ids(&self) -> Vec<String> {
        self.workers.iter().map(|w| w.id.clone()).collect()
    }

    /// The initial state of every worker, in id order: each run gets a fresh copy.
    pub fn initial_states(&self) -> Vec<WorkerState> {
        self.workers
            .iter()
            .map(|w| WorkerState::from_spec(w))
            .collect()
    }

    fn index_of(&self, worker: &str) -> usize {
        // Validation rejects events naming unknown workers.
        self.worker_index[worker]
    }
}

/// Replays the trace under every policy and assembles the receipt.
pub fn replay(trace: &Trace) -> Receipt {
    let prepared = Prepared::new(trace);
    #[cfg(feature = "mutant-shared-state")]
    let runs = {
        // The mutant hands each policy the state the previous one left behind.
        let mut states = prepared.initial_states();
        Policy::ALL
            .iter()
            .map(|&policy| {
                let (run, left) = run_policy_returning_state(&prepared, policy, states.clone());
                states = left;
                run
            })
            .collect()
    };
    #[cfg(not(feature = "mutant-shared-state"))]
    let runs = Policy::ALL
        .iter()
        .map(|&policy| run_policy(&prepared, policy, prepared.initial_states()))
        .collect();
    Receipt {
        trace_digest: trace_digest(trace),
        worker_ids: prepared.worker_ids(),
        runs,
    }
}

/// One policy's run, starting from `states` (normally [`Prepared::initial_states`]).
pub fn run_policy(prepared: &Prepared, policy: Policy, states: Vec<WorkerState>) -> Run {
    run_policy_returning_state(prepared, policy, states).0
}

/// [`run_policy`], also returning the worker states the run ended with.
fn run_policy_returning_state(
    prepared: &Prepared,
    policy: Policy,
    mut states: Vec<WorkerState>,
) -> (Run, Vec<WorkerState>) {
    let trace = prepared.trace;
    let sharing = Sharing::new(&trace.sharing);
    let mut cursor = 0usize;
    let mut ticks_previous = 0u64;
    let mut decisions = Vec::new();
    let mut cache_log = Vec::new();
    let mut observation_log = Vec::new();
    let mut metrics = MetricsRecorder::new(prepared.workers.len());
    for event in &prepared.events {
        let ticks_elapsed = event.tick - ticks_previous;
        if ticks_elapsed > 0 {
            states.iter_mut().for_each(|s| s.drain(ticks_elapsed));
        }
        ticks_previous = event.tick;
        match &event.kind {
            EventKind::Cache { worker, epoch, op } => {
                let w = prepared.index_of(worker);
                let outcome = states[w].apply_cache_event(event.tick, *epoch, op);
                cache_log.push(CacheLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: w,
                    epoch: *epoch,
                    op: op.name(),
                    outcome,
                });
            }
            EventKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => {
                let w = prepared.index_of(worker);
                let outcome =
                    states[w].apply_observation(*observed_tick, *queued_prefill, *active_decode);
                observation_log.push(ObservationLogEntry {
                    seq: event.seq,
                    tick: event.tick,
                    worker: w,
                    observed_tick: *observed_tick,
                    outcome,
                });
            }
            EventKind::Request(request) => {
                let mut rows = build_rows(
                    event.tick,
                    request,
                    &prepared.workers,
                    &states,
                    &trace.policy,
                    &sharing,
                );
                let choice = choose(policy, &mut rows, &trace.policy, &mut cursor);
                mark_dominance(&mut rows);
                let route_kind = match choice.chosen {
                    None => RouteKind::Rejected,
                    Some(_) if choice.overload_escape => RouteKind::OverloadEscape,
                    Some(c) if rows[c].reuse > 0 => RouteKind::Hit,
                    Some(_) => RouteKind::Cold,
                };
                if let Some(c) = choice.chosen {
                    states[c].place(rows[c].recomputed, request.decode_tokens);
                }
                let decision = Decision {
                    seq: event.seq,
                    tick: event.tick,
                    request: request.id.clone(),
                    chosen: choice.chosen,
                    route_kind,
                    tie_count: choice.tie_count,
                    margin_milli: choice.margin_milli,
                    candidates: rows,
                };
                metrics.record_decision(&decision, request, &states);
                decisions.push(decision);
            }
        }
    }
    let metrics = metrics.finish(&cache_log, &observation_log);
    let run = Run {
        policy,
        decisions,
        cache_log,
        observation_log,
        metrics,
    };
    (run, states)
}
