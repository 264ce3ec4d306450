//! The closed loop of one policy's run (SPEC.md §11, *Order*): routing, prefill
//! completions and deliveries of published events, interleaved by tick.
//!
//! At each tick prefill completions come first, then router events (requests and
//! delivered cache events) in `(tick, seq)` order. Generated events get seqs above every
//! request's and are never delivered in the past, so replaying the requests plus the
//! generated events open-loop processes every event at the same point. Lost events
//! (`--loss`) never reach the router and are left out of the generated trace; the
//! answers to re-queries (sequential epochs, a gap opened) are in it.

use crate::input::trace::{Event, Trace};
use crate::mutant::{active, Mutant};
use crate::route::compiled::{CEvent, Compiled, Op, Step};
use crate::route::engine::Runner;
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;
use crate::route::record::RunSink;
use crate::simulate::engine_model::{Engines, Prefill};
use crate::simulate::options::SimulateOptions;
use crate::simulate::publication::{delivery_tick, is_lost};
use crate::simulate::trace_out::to_trace_event;
use std::collections::BTreeMap;

/// What one policy's closed loop produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRun {
    pub policy: Policy,
    pub metrics: Metrics,
    pub stats: EngineStats,
    /// The generated cache events, when asked for, in generation (seq) order.
    pub generated: Vec<Event>,
}

/// What the engine model did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Stores and evicts completions published, lost ones included.
    pub store_events: u64,
    pub evict_events: u64,
    /// Published events the bus lost.
    pub lost_events: u64,
    /// Re-queries: gaps the router detected, each answered by a clear and stores.
    pub resyncs: u64,
    /// Tokens the router counted as reused that the chosen engine no longer held.
    pub phantom_reuse_tokens: u64,
    /// Tokens the chosen engine held that the router did not count as reused.
    pub missed_reuse_tokens: u64,
}

/// Scheduled work, ordered by tick; at one tick, prefill completions (class 0) come
/// before router events (class 1), and router events keep `seq` order. Keys are
/// unique: completions are numbered, router events have unique seqs.
type Key = (u64, u8, u64);

/// What is scheduled: a prefill to complete, or a cache event to deliver.
enum Scheduled<'t> {
    Completion(Prefill),
    Delivery(CEvent<'t>),
}

/// Runs one policy's closed loop over a compiled request-only trace. Memory is the
/// router state, the engines' caches and the work in flight (plus the generated events
/// when `keep_events` asks for them), not the length of the trace.
pub fn simulate_policy(
    compiled: &Compiled,
    policy: Policy,
    options: &SimulateOptions,
    keep_events: bool,
    sink: &mut impl RunSink,
) -> SimRun {
    let mut runner = Runner::new(compiled, policy);
    let mut engines = Engines::new(compiled, options.capacity);
    let mut stats = EngineStats::default();
    let mut next_seq = compiled.events.iter().map(|e| e.seq).max().unwrap_or(0) + 1;
    let mut completions_scheduled = 0u64;
    let mut scheduled: BTreeMap<Key, Scheduled> = BTreeMap::new();
    let mut generated = Vec::new();
    let mut input = compiled.events.iter().peekable();
    loop {
        let next_input = input.peek().map(|e| (e.tick, 1u8, e.seq));
        let next_scheduled = scheduled.first_key_value().map(|(key, _)| *key);
        let take_input = match (next_input, next_scheduled) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a < b,
        };
        if take_input {
            let event = input.next().expect("peeked");
            let Step::Request(request) = &event.step else {
                continue;
            };
            if let Some(placement) = runner.step(event, sink) {
                let engine_reuse = engines.true_reuse(placement.worker, request);
                // The mutant subtracts the wrong way round: held minus believed.
                stats.phantom_reuse_tokens += if active(Mutant::PhantomReversed) {
                    engine_reuse.saturating_sub(placement.reuse_tokens)
                } else {
                    placement.reuse_tokens.saturating_sub(engine_reuse)
                };
                // The mutant counts missed tokens only where the router believed some
                // reuse, leaving out the cold rows evidence in flight or a gap made.
                if placement.reuse_tokens > 0 || !active(Mutant::MissedOnlyOnHits) {
                    stats.missed_reuse_tokens +=
                        engine_reuse.saturating_sub(placement.reuse_tokens);
                }
                let done = engines.admit(
                    placement.worker,
                    event.tick,
                    request.prompt_tokens - engine_reuse,
                );
                completions_scheduled += 1;
                let prefill = Prefill {
                    worker: placement.worker as u32,
                    ns: request.ns,
                    prefix: request.prefix.clone(),
                };
                scheduled.insert(
                    (done, 0, completions_scheduled),
                    Scheduled::Completion(prefill),
                );
            }
            continue;
        }
        let ((tick, _, _), item) = scheduled.pop_first().expect("peeked");
        let prefill = match item {
            Scheduled::Delivery(event) => {
                runner.step(&event, sink);
                if let Some(worker) = runner.gap_opened() {
                    // The router re-queries the worker; its engine answers at once from
                    // its cache, over a channel that neither jitters nor loses.
                    stats.resyncs += 1;
                    let answer_tick = tick.saturating_add(options.publication_lag_ticks);
                    for op in engines.snapshot(worker as usize, compiled) {
                        engines.epoch[worker as usize] += 1;
                        let epoch = engines.epoch[worker as usize];
                        let event = CEvent {
                            seq: next_seq,
                            tick: answer_tick,
                            step: Step::Cache { worker, epoch, op },
                        };
                        next_seq += 1;
                        if keep_events {
                            generated.push(to_trace_event(compiled, &event));
                        }
                        scheduled.insert((answer_tick, 1, event.seq), Scheduled::Delivery(event));
                    }
                }
                continue;
            }
            Scheduled::Completion(prefill) => prefill,
        };
        for op in engines.complete(&prefill, compiled) {
            let worker = prefill.worker;
            engines.epoch[worker as usize] += 1;
            let epoch = engines.epoch[worker as usize];
            match &op {
                Op::Store { .. } => stats.store_events += 1,
                Op::Evict { .. } => stats.evict_events += 1,
                Op::Clear => {}
            }
            let publish_tick = delivery_tick(options, tick, worker, epoch);
            let event = CEvent {
                seq: next_seq,
                tick: publish_tick,
                step: Step::Cache { worker, epoch, op },
            };
            // A lost event took its epoch and seq, and goes no further: it is dropped on
            // the bus, before delivery. The mutant delivers it and only then drops it,
            // from the generated trace alone.
            next_seq += 1;
            let lost = is_lost(options, worker, epoch);
            stats.lost_events += lost as u64;
            if lost && !active(Mutant::LossAfterDelivery) {
                continue;
            }
            if keep_events && !lost {
                generated.push(to_trace_event(compiled, &event));
            }
            scheduled.insert((publish_tick, 1, event.seq), Scheduled::Delivery(event));
        }
    }
    let (metrics, _) = runner.finish();
    SimRun {
        policy,
        metrics,
        stats,
        generated,
    }
}

/// The open-loop trace of one policy's loop: the simulated trace plus the events it
/// generated.
pub fn generated_trace(sim_trace: &Trace, run: &SimRun) -> Trace {
    let mut trace = sim_trace.clone();
    trace.events.extend(run.generated.iter().cloned());
    trace
}
