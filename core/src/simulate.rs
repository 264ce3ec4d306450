//! The closed-loop engine model (SPEC.md §11): where cache events come from when a
//! trace carries only requests.
//!
//! The router never invents residency, so replaying a bare request stream would route
//! every request cold. `simulate` closes the loop: each policy's run routes a request,
//! and a deterministic model of the chosen engine prefills it (FIFO, at the worker's
//! `prefill_rate`), stores its prefix blocks in a per-worker LRU cache of fixed capacity
//! when the prefill completes, evicts the least recently used blocks to make room, and
//! publishes the `store` and `evict` events, each with the next epoch of that worker,
//! after a publication lag plus an optional seeded jitter. Jitter can deliver a later
//! epoch first, so the router sees stale events exactly as it would from a real fleet.
//!
//! Every policy runs its own loop from a clean state. The events a loop generated,
//! merged with the requests, form an ordinary `kvroute-trace/1` trace; replaying it
//! open-loop reproduces that policy's run exactly, because generated events are given
//! seqs above every request's and ticks never in the past, so `(tick, seq)` order
//! places them where the loop processed them.

use crate::compiled::{CEvent, Compiled, KeyId, NsId, Op, Req, Seg, Step};
use crate::engine::{RunSink, Runner};
use crate::metrics::Metrics;
use crate::policy::Policy;
use crate::trace::{
    CacheOp, Event, EventKind, LimitsProfile, Namespace, Segment, Trace, WorkerSpec,
};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};

/// How a worker's KV cache capacity is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// Resident tokens, summed over blocks (a partial block counts its tokens).
    Tokens(u64),
    /// Resident blocks, whatever their size.
    Blocks(u64),
}

/// The engine model's parameters. Defaults are documented in SPEC.md §11.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateOptions {
    pub capacity: Capacity,
    /// Ticks between a prefill completing and its cache events reaching the router.
    pub publication_lag_ticks: u64,
    /// Up to this many extra ticks per event, drawn from `jitter_seed`; 0 disables it.
    pub jitter_ticks: u64,
    pub jitter_seed: u64,
}

/// 262,144 tokens: 512 blocks of 512 tokens, about 40 GiB of KV cache at 160 KiB per
/// token (a 70B-class model with grouped-query attention in 16-bit).
pub const DEFAULT_CACHE_TOKENS: u64 = 262_144;
/// 10 ticks (10 ms at the import's 1 tick = 1 ms): an event bus hop plus batching.
pub const DEFAULT_PUBLICATION_LAG_TICKS: u64 = 10;

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            capacity: Capacity::Tokens(DEFAULT_CACHE_TOKENS),
            publication_lag_ticks: DEFAULT_PUBLICATION_LAG_TICKS,
            jitter_ticks: 0,
            jitter_seed: 0,
        }
    }
}

/// Why a trace cannot be simulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateError(pub String);

impl std::fmt::Display for SimulateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The trace a simulation runs on: the input's requests, and either its workers or
/// `workers` identical copies of its first worker (ids `w0`…, zero-padded), each with
/// an empty cache and no load. The input's own cache and load events are dropped (the
/// engine model generates them); the count dropped is returned.
pub fn simulation_trace(
    trace: &Trace,
    workers: Option<u32>,
) -> Result<(Trace, usize), SimulateError> {
    let mut sim = trace.clone();
    sim.limits = LimitsProfile::Scale;
    let before = sim.events.len();
    sim.events
        .retain(|e| matches!(e.kind, EventKind::Request(_)));
    let dropped = before - sim.events.len();
    if let Some(count) = workers {
        if count == 0 || count as u64 > LimitsProfile::Scale.workers_max() {
            return Err(SimulateError(format!(
                "--workers {count}: expected 1 to {}",
                LimitsProfile::Scale.workers_max()
            )));
        }
        let mut first: WorkerSpec = trace
            .workers
            .iter()
            .min_by(|a, b| a.id.cmp(&b.id))
            .cloned()
            .ok_or_else(|| SimulateError("the trace has no workers to copy".into()))?;
        first.queued_prefill = 0;
        first.active_decode = 0;
        first.cache.clear();
        sim.workers = (0..count)
            .map(|i| WorkerSpec {
                id: crate::import::worker_id(i, count),
                ..first.clone()
            })
            .collect();
    }
    Ok((sim, dropped))
}

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
    pub store_events: u64,
    pub evict_events: u64,
    /// Tokens the router counted as reused that the chosen engine no longer held.
    pub phantom_reuse_tokens: u64,
}

/// One worker's true cache: an LRU over `(namespace, key)` entries.
#[derive(Debug, Default)]
struct Lru {
    /// Entry → (tokens, stamp of its last use). Lookups only.
    entries: HashMap<(NsId, KeyId), (u64, u64)>,
    /// Stamp → entry, oldest first: the eviction order.
    by_age: BTreeMap<u64, (NsId, KeyId)>,
    used: u64,
}

impl Lru {
    fn weight(capacity: Capacity, tokens: u64) -> u64 {
        match capacity {
            Capacity::Tokens(_) => tokens,
            Capacity::Blocks(_) => 1,
        }
    }

    fn limit(capacity: Capacity) -> u64 {
        match capacity {
            Capacity::Tokens(n) | Capacity::Blocks(n) => n,
        }
    }

    fn tokens(&self, entry: (NsId, KeyId)) -> u64 {
        self.entries.get(&entry).map_or(0, |e| e.0)
    }

    /// Inserts or refreshes an entry; true when its residency changed (new or resized).
    fn put(&mut self, capacity: Capacity, entry: (NsId, KeyId), tokens: u64, stamp: u64) -> bool {
        let weight = Self::weight(capacity, tokens);
        match self.entries.insert(entry, (tokens, stamp)) {
            Some((old_tokens, old_stamp)) => {
                self.by_age.remove(&old_stamp);
                self.by_age.insert(stamp, entry);
                self.used = self.used - Self::weight(capacity, old_tokens) + weight;
                old_tokens != tokens
            }
            None => {
                self.by_age.insert(stamp, entry);
                self.used += weight;
                true
            }
        }
    }

    /// Evicts the oldest entries not used at `stamp_floor` or later until within capacity.
    fn evict_to_fit(&mut self, capacity: Capacity, stamp_floor: u64) -> Vec<(NsId, KeyId)> {
        let mut evicted = Vec::new();
        while self.used > Self::limit(capacity) {
            let Some((&stamp, &entry)) = self.by_age.first_key_value() else {
                break;
            };
            if stamp >= stamp_floor {
                break;
            }
            self.by_age.remove(&stamp);
            if let Some((tokens, _)) = self.entries.remove(&entry) {
                self.used -= Self::weight(capacity, tokens);
            }
            evicted.push(entry);
        }
        evicted
    }
}

/// A prefill in flight: completes at its tick, then stores its prefix.
#[derive(Debug, Clone)]
struct Prefill {
    worker: u32,
    ns: NsId,
    prefix: Vec<Seg>,
}

/// The engine model of every worker.
struct Engines {
    capacity: Capacity,
    caches: Vec<Lru>,
    /// When each worker's prefill queue empties (FIFO prefill).
    busy_until_tick: Vec<u64>,
    prefill_rate: Vec<u64>,
    /// The last epoch each worker published.
    epoch: Vec<u64>,
    stamp: u64,
}

impl Engines {
    fn new(compiled: &Compiled, capacity: Capacity) -> Self {
        let mut engines = Engines {
            capacity,
            caches: compiled.workers.iter().map(|_| Lru::default()).collect(),
            busy_until_tick: vec![0; compiled.worker_count()],
            prefill_rate: compiled.workers.iter().map(|w| w.prefill_rate).collect(),
            epoch: compiled.workers.iter().map(|w| w.epoch).collect(),
            stamp: 0,
        };
        // The initial caches are the engines' caches too, oldest in canonical order.
        for (w, spec) in compiled.workers.iter().enumerate() {
            let mut entries: Vec<_> = spec
                .cache
                .iter()
                .map(|&(ns, key, tokens)| {
                    let n = &compiled.tables.namespaces[ns as usize];
                    let k = compiled.tables.keys.name(key);
                    ((&n.tenant, &n.model, &n.adapter, k), ns, key, tokens)
                })
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (_, ns, key, tokens) in entries {
                engines.stamp += 1;
                engines.caches[w].put(capacity, (ns, key), tokens, engines.stamp);
            }
        }
        engines
    }

    /// The prefix the engine really holds for `request`: leading fully resident blocks
    /// under the request's own namespace, plus a partially resident one.
    fn true_reuse(&self, worker: usize, request: &Req) -> u64 {
        let mut reuse = 0;
        for segment in &request.prefix {
            let resident = self.caches[worker].tokens((request.ns, segment.key));
            reuse += resident.min(segment.tokens);
            if resident < segment.tokens {
                break;
            }
        }
        reuse.min(request.prompt_tokens)
    }

    /// Queues the prefill of what the engine must really recompute; returns its
    /// completion tick.
    fn admit(&mut self, worker: usize, tick: u64, recomputed_tokens: u64) -> u64 {
        let start = tick.max(self.busy_until_tick[worker]);
        let duration = recomputed_tokens.div_ceil(self.prefill_rate[worker]);
        let done = start.saturating_add(duration);
        self.busy_until_tick[worker] = done;
        done
    }

    /// Stores a completed prefill's prefix and evicts to fit: the cache operations to
    /// publish, in the order the engine performed them.
    fn complete(&mut self, prefill: &Prefill, compiled: &Compiled) -> Vec<Op> {
        let cache = &mut self.caches[prefill.worker as usize];
        self.stamp += 1;
        let stamp_floor = self.stamp;
        let mut stored = Vec::new();
        // Stamped tail first, so the head of a prefix is the most recently used: like
        // vLLM's prefix cache, eviction takes a chain's last blocks before its first,
        // and a shared head outlives the conversations that hang off it.
        let fitting: Vec<&Seg> = prefix_that_fits(&prefill.prefix, self.capacity).collect();
        for segment in fitting.into_iter().rev() {
            self.stamp += 1;
            if cache.put(
                self.capacity,
                (prefill.ns, segment.key),
                segment.tokens,
                self.stamp,
            ) {
                stored.push(*segment);
            }
        }
        stored.reverse();
        let evicted = cache.evict_to_fit(self.capacity, stamp_floor);
        let mut ops = Vec::new();
        if !stored.is_empty() {
            ops.push(Op::Store {
                ns: prefill.ns,
                segments: stored,
            });
        }
        // One evict per namespace, in namespace order (by name, not by interned id, so
        // shuffling the input's arrays cannot reorder the events and their epochs).
        let mut by_ns: BTreeMap<&Namespace, (NsId, Vec<KeyId>)> = BTreeMap::new();
        for (ns, key) in evicted {
            let name = &compiled.tables.namespaces[ns as usize];
            by_ns
                .entry(name)
                .or_insert_with(|| (ns, Vec::new()))
                .1
                .push(key);
        }
        ops.extend(by_ns.into_values().map(|(ns, keys)| Op::Evict { ns, keys }));
        ops
    }
}

/// The leading segments of a prefix that fit in an empty cache (a prefix longer than
/// the whole cache keeps its head), skipping segments of 0 tokens, which hold nothing.
fn prefix_that_fits(prefix: &[Seg], capacity: Capacity) -> impl Iterator<Item = &Seg> {
    let limit = Lru::limit(capacity);
    let mut total = 0u64;
    prefix
        .iter()
        .take_while(move |s| {
            total = total.saturating_add(Lru::weight(capacity, s.tokens));
            total <= limit
        })
        .filter(|s| s.tokens > 0)
}

/// Extra publication ticks for one event: a pure function of the seed, the worker and
/// the epoch, so it does not depend on the order events are generated in.
fn jitter(options: &SimulateOptions, worker: u32, epoch: u64) -> u64 {
    if options.jitter_ticks == 0 {
        return 0;
    }
    let digest = Sha256::digest(format!("{}/{worker}/{epoch}", options.jitter_seed).as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    let value = u64::from_be_bytes(head);
    value % (options.jitter_ticks + 1)
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
                stats.phantom_reuse_tokens += placement.reuse_tokens.saturating_sub(engine_reuse);
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
            let publish_tick = tick
                .saturating_add(options.publication_lag_ticks)
                .saturating_add(jitter(options, worker, epoch));
            let event = CEvent {
                seq: next_seq,
                tick: publish_tick,
                step: Step::Cache { worker, epoch, op },
            };
            next_seq += 1;
            if keep_events {
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

/// A generated event in the trace's own terms.
fn to_trace_event(compiled: &Compiled, event: &CEvent) -> Event {
    let Step::Cache { worker, epoch, op } = &event.step else {
        unreachable!("the engine model generates cache events only");
    };
    let tables = &compiled.tables;
    let namespace = |ns: &NsId| tables.namespaces[*ns as usize].clone();
    let key = |k: &KeyId| tables.keys.name(*k).to_owned();
    let op = match op {
        Op::Store { ns, segments } => CacheOp::Store {
            namespace: namespace(ns),
            segments: segments
                .iter()
                .map(|s| Segment {
                    key: key(&s.key),
                    tokens: s.tokens,
                })
                .collect(),
        },
        Op::Evict { ns, keys } => CacheOp::Evict {
            namespace: namespace(ns),
            keys: keys.iter().map(key).collect(),
        },
        Op::Clear => CacheOp::Clear,
    };
    Event {
        seq: event.seq,
        tick: event.tick,
        kind: EventKind::Cache {
            worker: compiled.worker_ids[*worker as usize].to_owned(),
            epoch: *epoch,
            op,
        },
    }
}

/// The open-loop trace of one policy's loop: the simulated trace plus the events it
/// generated.
pub fn generated_trace(sim_trace: &Trace, run: &SimRun) -> Trace {
    let mut trace = sim_trace.clone();
    trace.events.extend(run.generated.iter().cloned());
    trace
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiled::Req;

    /// One worker (`prefill_rate` 16) and two requests: acme's prefix a, b, c (512, 512,
    /// 100 tokens) and another tenant's prefix a.
    const TRACE: &str = r#"{
      "format": "kvroute-trace/1", "limits": "scale",
      "workers": [ { "id": "w0", "model": "m", "adapters": [], "prefill_rate": 16,
        "decode_rate": 4, "queued_prefill": 0, "active_decode": 0, "observed_tick": 0,
        "epoch": 0, "cache": [] } ],
      "events": [
        { "seq": 1, "tick": 0, "type": "request", "id": "r1", "tenant": "acme", "model": "m",
          "adapter": "base", "prompt_tokens": 1124, "decode_tokens": 1,
          "prefix": [ { "key": "a", "tokens": 512 }, { "key": "b", "tokens": 512 },
                      { "key": "c", "tokens": 100 } ] },
        { "seq": 2, "tick": 0, "type": "request", "id": "r2", "tenant": "other", "model": "m",
          "adapter": "base", "prompt_tokens": 512, "decode_tokens": 1,
          "prefix": [ { "key": "a", "tokens": 512 } ] } ] }"#;

    fn requests<'c>(compiled: &'c Compiled) -> Vec<&'c Req<'c>> {
        compiled
            .events
            .iter()
            .filter_map(|e| match &e.step {
                Step::Request(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn lru_counts_tokens_refreshes_and_evicts_the_oldest_unprotected_entry() {
        let capacity = Capacity::Tokens(1000);
        let mut lru = Lru::default();
        assert!(lru.put(capacity, (0, 0), 600, 1));
        assert!(lru.put(capacity, (0, 1), 300, 2));
        // A refresh of the same size is not a change, but makes the entry the newest.
        assert!(!lru.put(capacity, (0, 0), 600, 3));
        assert!(lru.put(capacity, (0, 2), 200, 4));
        assert_eq!(lru.used, 1100);
        // Entries stamped at or after the floor are protected.
        assert!(lru.evict_to_fit(capacity, 2).is_empty());
        assert_eq!(lru.evict_to_fit(capacity, 4), [(0, 1)]);
        assert_eq!(
            (lru.used, lru.tokens((0, 1)), lru.tokens((0, 0))),
            (800, 0, 600)
        );
        // A resize is a change, and the used total follows it.
        assert!(lru.put(capacity, (0, 2), 250, 5));
        assert_eq!(lru.used, 850);

        let blocks = Capacity::Blocks(2);
        let mut lru = Lru::default();
        for (key, stamp) in [(7, 1), (8, 2), (9, 3)] {
            lru.put(blocks, (0, key), 512, stamp);
        }
        assert_eq!(lru.used, 3);
        assert_eq!(lru.evict_to_fit(blocks, 3), [(0, 7)]);
        assert_eq!(lru.used, 2);
    }

    #[test]
    fn the_engine_reuses_only_its_own_leading_blocks_and_prefills_fifo() {
        let trace = crate::parse_trace(TRACE.as_bytes()).unwrap();
        let compiled = Compiled::new(&trace);
        let [r1, r2] = requests(&compiled)[..] else {
            panic!("two requests")
        };
        let key = |k: &str| compiled.tables.keys.get(k).unwrap();
        let mut engines = Engines::new(&compiled, Capacity::Tokens(10_000));
        assert_eq!(engines.true_reuse(0, r1), 0);
        engines.caches[0].put(engines.capacity, (r1.ns, key("a")), 512, 1);
        engines.caches[0].put(engines.capacity, (r1.ns, key("b")), 300, 2);
        engines.caches[0].put(engines.capacity, (r1.ns, key("c")), 100, 3);
        // a in full, b partly, and the walk stops at b: c does not count.
        assert_eq!(engines.true_reuse(0, r1), 812);
        // Another tenant's request sees nothing of acme's blocks.
        assert_eq!(engines.true_reuse(0, r2), 0);

        // FIFO at 16 tokens per tick, rounding a partial tick up.
        assert_eq!(engines.admit(0, 10, 100), 17);
        assert_eq!(engines.admit(0, 12, 16), 18);
        assert_eq!(engines.admit(0, 30, 0), 30);
    }

    #[test]
    fn a_completion_stores_new_blocks_and_evicts_tails_before_heads() {
        let trace = crate::parse_trace(TRACE.as_bytes()).unwrap();
        let compiled = Compiled::new(&trace);
        let r1 = requests(&compiled)[0];
        let key = |k: &str| compiled.tables.keys.get(k).unwrap();
        let seg = |k: &str, tokens| Seg {
            key: key(k),
            tokens,
        };
        let prefill = |prefix: Vec<Seg>| Prefill {
            worker: 0,
            ns: r1.ns,
            prefix,
        };
        let store = |segments: Vec<Seg>| Op::Store {
            ns: r1.ns,
            segments,
        };
        let mut engines = Engines::new(&compiled, Capacity::Blocks(2));
        let ops = engines.complete(&prefill(vec![seg("a", 512), seg("b", 512)]), &compiled);
        assert_eq!(ops, [store(vec![seg("a", 512), seg("b", 512)])]);
        // c is new; a segment of 0 tokens holds nothing. b (the tail) was stamped before
        // a (the head), so b is the one evicted.
        let ops = engines.complete(&prefill(vec![seg("c", 100), seg("a", 0)]), &compiled);
        let evict_b = Op::Evict {
            ns: r1.ns,
            keys: vec![key("b")],
        };
        assert_eq!(ops, [store(vec![seg("c", 100)]), evict_b]);
        // Everything already resident at its size: a refresh, nothing to publish.
        let ops = engines.complete(&prefill(vec![seg("a", 512), seg("c", 100)]), &compiled);
        assert_eq!(ops, []);
        // A resized block is published again.
        let ops = engines.complete(&prefill(vec![seg("c", 50)]), &compiled);
        assert_eq!(ops, [store(vec![seg("c", 50)])]);

        // A one-block cache: each completion's block replaces the previous one, which
        // is not protected just because it was the last one stored.
        let mut engines = Engines::new(&compiled, Capacity::Blocks(1));
        engines.complete(&prefill(vec![seg("a", 512)]), &compiled);
        let ops = engines.complete(&prefill(vec![seg("b", 512)]), &compiled);
        let evict_a = Op::Evict {
            ns: r1.ns,
            keys: vec![key("a")],
        };
        assert_eq!(ops, [store(vec![seg("b", 512)]), evict_a]);

        // A prefix longer than the whole cache keeps its head.
        let mut engines = Engines::new(&compiled, Capacity::Blocks(2));
        let long = vec![seg("a", 512), seg("b", 512), seg("c", 100)];
        let ops = engines.complete(&prefill(long), &compiled);
        assert_eq!(ops, [store(vec![seg("a", 512), seg("b", 512)])]);
        // The same in tokens: 1,100 tokens hold a and b (1,024) but not c as well.
        let mut engines = Engines::new(&compiled, Capacity::Tokens(1_100));
        let long = vec![seg("a", 512), seg("b", 512), seg("c", 100)];
        let ops = engines.complete(&prefill(long), &compiled);
        assert_eq!(ops, [store(vec![seg("a", 512), seg("b", 512)])]);
    }

    #[test]
    fn jitter_is_the_specd_function_of_seed_worker_and_epoch() {
        let mut options = SimulateOptions::default();
        assert_eq!(jitter(&options, 3, 5), 0);
        options.jitter_ticks = 40;
        options.jitter_seed = 7;
        // SPEC.md §11: the first 8 bytes of SHA-256("7/3/5"), big-endian, modulo 41.
        let digest = Sha256::digest(b"7/3/5");
        let head = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(jitter(&options, 3, 5), head % 41);
        let spread: std::collections::BTreeSet<u64> =
            (0..200).map(|epoch| jitter(&options, 0, epoch)).collect();
        assert!(spread.iter().all(|&j| j <= 40) && spread.len() > 30);
    }

    #[test]
    fn replacing_workers_is_bounded_by_the_scale_profile() {
        let trace = crate::parse_trace(TRACE.as_bytes()).unwrap();
        assert_eq!(
            simulation_trace(&trace, Some(4096))
                .unwrap()
                .0
                .workers
                .len(),
            4096
        );
        for count in [0, 4097] {
            let error = simulation_trace(&trace, Some(count)).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("--workers {count}: expected 1 to 4096")
            );
        }
    }
}
