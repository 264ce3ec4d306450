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
use crate::route::compiled::{CEvent, Compiled, Op, Req, Step};
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

/// One routed request as the engine model served it, for its completion record
/// (SPEC.md §14.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCompletion {
    pub request_id: String,
    /// The tick it arrived at and the tick its prefill completed.
    pub arrival_tick: u64,
    pub prefill_done_tick: u64,
    /// The chosen worker's index in the simulated trace's worker ids.
    pub worker: u32,
    /// The chosen worker's decode rate, which its record's decode time is taken at.
    pub decode_rate: u64,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
    /// The prompt tokens the chosen engine really served from its cache: SPEC.md
    /// §11.1's `held`, which the record reports as its cached tokens (§14.4).
    pub cached_tokens: u64,
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
    run_closed_loop(compiled, policy, options, keep_events, None, sink)
}

/// [`simulate_policy`], also keeping each routed request's [`SimCompletion`], in the
/// order it was routed (memory then grows with the requests routed).
pub fn simulate_policy_with_completions(
    compiled: &Compiled,
    policy: Policy,
    options: &SimulateOptions,
    keep_events: bool,
    sink: &mut impl RunSink,
) -> (SimRun, Vec<SimCompletion>) {
    let mut served = Vec::new();
    let run = run_closed_loop(
        compiled,
        policy,
        options,
        keep_events,
        Some(&mut served),
        sink,
    );
    (run, served)
}

fn run_closed_loop(
    compiled: &Compiled,
    policy: Policy,
    options: &SimulateOptions,
    keep_events: bool,
    served: Option<&mut Vec<SimCompletion>>,
    sink: &mut impl RunSink,
) -> SimRun {
    let mut closed = ClosedLoop {
        served,
        compiled,
        options,
        keep_events,
        runner: Runner::new(compiled, policy),
        engines: Engines::new(compiled, options.capacity),
        stats: EngineStats::default(),
        next_seq: compiled.events.iter().map(|e| e.seq).max().unwrap_or(0) + 1,
        completions_scheduled: 0,
        scheduled: BTreeMap::new(),
        generated: Vec::new(),
    };
    let mut input = compiled.events.iter().peekable();
    loop {
        let next_input = input.peek().map(|e| (e.tick, 1u8, e.seq));
        let next_scheduled = closed.scheduled.first_key_value().map(|(key, _)| *key);
        let take_input = match (next_input, next_scheduled) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => a < b,
        };
        if take_input {
            let event = input.next().expect("peeked");
            if let Step::Request(request) = &event.step {
                closed.route(event, request, sink);
            }
            continue;
        }
        let ((tick, _, _), item) = closed.scheduled.pop_first().expect("peeked");
        match item {
            Scheduled::Delivery(event) => closed.deliver(tick, &event, sink),
            Scheduled::Completion(prefill) => closed.publish(tick, &prefill),
        }
    }
    let (metrics, _) = closed.runner.finish();
    SimRun {
        policy,
        metrics,
        stats: closed.stats,
        generated: closed.generated,
    }
}

/// One policy's closed loop in progress: the router, the engines, and what is in
/// flight between them.
struct ClosedLoop<'c, 't> {
    /// Where each routed request's completion is kept, when asked.
    served: Option<&'c mut Vec<SimCompletion>>,
    compiled: &'c Compiled<'t>,
    options: &'c SimulateOptions,
    keep_events: bool,
    runner: Runner<'c, 't>,
    engines: Engines,
    stats: EngineStats,
    /// The seq the next generated event gets.
    next_seq: u64,
    completions_scheduled: u64,
    scheduled: BTreeMap<Key, Scheduled<'t>>,
    generated: Vec<Event>,
}

impl<'t> ClosedLoop<'_, 't> {
    /// A request from the trace: routed, admitted on the chosen engine, and its prefill
    /// scheduled to complete.
    fn route(&mut self, event: &CEvent<'t>, request: &Req<'t>, sink: &mut impl RunSink) {
        let Some(placement) = self.runner.step(event, sink) else {
            return;
        };
        let engine_reuse = self.engines.true_reuse(placement.worker, request);
        // The mutant subtracts the wrong way round: held minus believed.
        self.stats.phantom_reuse_tokens += if active(Mutant::PhantomReversed) {
            engine_reuse.saturating_sub(placement.reuse_tokens)
        } else {
            placement.reuse_tokens.saturating_sub(engine_reuse)
        };
        // The mutant counts missed tokens only where the router believed some
        // reuse, leaving out the cold rows evidence in flight or a gap made.
        if placement.reuse_tokens > 0 || !active(Mutant::MissedOnlyOnHits) {
            self.stats.missed_reuse_tokens += engine_reuse.saturating_sub(placement.reuse_tokens);
        }
        let done = self.engines.admit(
            placement.worker,
            event.tick,
            request.prompt_tokens - engine_reuse,
        );
        if let Some(served) = self.served.as_mut() {
            served.push(SimCompletion {
                request_id: request.id.to_owned(),
                arrival_tick: event.tick,
                prefill_done_tick: done,
                worker: placement.worker as u32,
                decode_rate: self.compiled.workers[placement.worker].decode_rate,
                prompt_tokens: request.prompt_tokens,
                decode_tokens: request.decode_tokens,
                cached_tokens: engine_reuse,
            });
        }
        self.completions_scheduled += 1;
        let prefill = Prefill {
            worker: placement.worker as u32,
            ns: request.ns,
            prefix: request.prefix.clone(),
        };
        self.scheduled.insert(
            (done, 0, self.completions_scheduled),
            Scheduled::Completion(prefill),
        );
    }

    /// A published cache event reaches the router; a gap it opens is answered by a
    /// re-query of the worker.
    fn deliver(&mut self, tick: u64, event: &CEvent<'t>, sink: &mut impl RunSink) {
        self.runner.step(event, sink);
        let Some(worker) = self.runner.gap_opened() else {
            return;
        };
        // The router re-queries the worker; its engine answers at once from its cache,
        // over a channel that neither jitters nor loses.
        self.stats.resyncs += 1;
        let answer_tick = tick.saturating_add(self.options.publication_lag_ticks);
        for op in self.engines.snapshot(worker as usize, self.compiled) {
            let event = self.generate(answer_tick, worker, op);
            if self.keep_events {
                self.generated.push(to_trace_event(self.compiled, &event));
            }
            self.scheduled
                .insert((answer_tick, 1, event.seq), Scheduled::Delivery(event));
        }
    }

    /// A prefill completes: its engine's cache events are published on the bus, each
    /// delivered after the lag and its jitter unless the bus loses it.
    fn publish(&mut self, tick: u64, prefill: &Prefill) {
        let worker = prefill.worker;
        for op in self.engines.complete(prefill, self.compiled) {
            match &op {
                Op::Store { .. } => self.stats.store_events += 1,
                Op::Evict { .. } => self.stats.evict_events += 1,
                Op::Clear => {}
            }
            let epoch = self.engines.epoch[worker as usize] + 1;
            let publish_tick = delivery_tick(self.options, tick, worker, epoch);
            let event = self.generate(publish_tick, worker, op);
            // A lost event took its epoch and seq, and goes no further: it is dropped on
            // the bus, before delivery. The mutant delivers it and only then drops it,
            // from the generated trace alone.
            let lost = is_lost(self.options, worker, epoch);
            self.stats.lost_events += lost as u64;
            if lost && !active(Mutant::LossAfterDelivery) {
                continue;
            }
            if self.keep_events && !lost {
                self.generated.push(to_trace_event(self.compiled, &event));
            }
            self.scheduled
                .insert((publish_tick, 1, event.seq), Scheduled::Delivery(event));
        }
    }

    /// A new cache event of `worker` at `tick`: the engine's next epoch, the next seq.
    fn generate(&mut self, tick: u64, worker: u32, op: Op) -> CEvent<'t> {
        self.engines.epoch[worker as usize] += 1;
        let epoch = self.engines.epoch[worker as usize];
        let event = CEvent {
            seq: self.next_seq,
            tick,
            step: Step::Cache { worker, epoch, op },
        };
        self.next_seq += 1;
        event
    }
}

/// The open-loop trace of one policy's loop: the simulated trace plus the events it
/// generated.
pub fn generated_trace(sim_trace: &Trace, run: &SimRun) -> Trace {
    let mut trace = sim_trace.clone();
    trace.events.extend(run.generated.iter().cloned());
    trace
}
