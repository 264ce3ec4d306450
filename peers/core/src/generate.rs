//! A chain-structured trace generator: the traces a radix-tree indexer can represent,
//! with the events that stress one.
//!
//! Keys form a random tree (each key has one parent), so every request prefix is a
//! chain from the root, sometimes ending in a partial tail segment. Cache events follow
//! those chains: stores of runs along a chain (sometimes starting below a block the
//! worker never stored, or skipping one: holes), evictions of chain tails in LRU order
//! (tail first, sometimes naming blocks the worker does not hold, sometimes a block in
//! the middle), rare clears, and delivery jitter that lets a later epoch arrive first.
//! The existing generators of `kvroute-harness` are untouched: their output is pinned
//! by the sweep digests.
//!
//! Choices come from a [`Draw`], so the seed sweep (a seeded RNG) and the fuzz target
//! (the fuzzer's bytes) explore the same space.

use kvroute_core::input::LimitsProfile;
use kvroute_core::input::{
    CacheOp, Event, EventKind, Namespace, PolicyParams, Request, Segment, Trace, WorkerSpec,
};
use proptest::test_runner::{RngAlgorithm, TestRng};
use std::sync::Arc;

/// A source of bounded choices.
pub trait Draw {
    /// A value in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64;

    /// True with probability `percent` in 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

impl Draw for TestRng {
    fn below(&mut self, n: u64) -> u64 {
        use proptest::prelude::Rng;
        self.next_u64() % n
    }
}

/// The fuzzer's bytes as choices; once they run out every choice is 0.
pub struct Bytes<'a>(pub &'a [u8]);

impl Draw for Bytes<'_> {
    fn below(&mut self, n: u64) -> u64 {
        let (head, rest) = self.0.split_at(self.0.len().min(2));
        self.0 = rest;
        let v = head.iter().fold(0u64, |acc, &b| acc << 8 | b as u64);
        v % n
    }
}

/// A deterministic RNG for `seed` (the harness's construction).
pub fn seeded_rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Tokens of a whole block in generated traces (small, so prompts stay in lab limits).
pub const BLOCK_TOKENS: u64 = 16;
const KEYS_MAX: u64 = 14;
const WORKERS_MAX: u64 = 3;
const EVENTS_MAX: u64 = 70;

fn namespace(tenant: &str) -> Namespace {
    Namespace {
        tenant: tenant.into(),
        model: "m".into(),
        adapter: "base".into(),
    }
}

/// The key tree: `parent[i] < i`, or `None` at the root.
struct KeyTree {
    parent: Vec<Option<usize>>,
}

impl KeyTree {
    fn chain(&self, mut node: usize) -> Vec<usize> {
        let mut chain = vec![node];
        while let Some(p) = self.parent[node] {
            chain.push(p);
            node = p;
        }
        chain.reverse();
        chain
    }
}

fn key(node: usize) -> String {
    format!("k{node}")
}

/// Builds one valid lab-limits trace from `draw`.
pub fn chain_trace(draw: &mut impl Draw) -> Trace {
    let key_count = 2 + draw.below(KEYS_MAX - 1) as usize;
    let tree = key_tree(draw, key_count);
    let worker_count = 1 + draw.below(WORKERS_MAX) as usize;
    // Mostly one tenant, so blocks meet their requests; the second tests scoping.
    let tenants = ["acme", "acme", "acme", "beta"];
    let mut epochs = vec![0u64; worker_count];
    let mut events = Vec::new();
    let mut requests = 0;
    let event_count = 8 + draw.below(EVENTS_MAX - 8);
    let jitter = if draw.chance(50) { draw.below(6) } else { 0 };
    let mut tick = 0u64;
    for seq in 1..=event_count {
        tick += draw.below(3);
        let node = draw.below(key_count as u64) as usize;
        let chain = tree.chain(node);
        let ns = namespace(tenants[draw.below(4) as usize]);
        let w = draw.below(worker_count as u64) as usize;
        let roll = draw.below(100);
        if roll < 30 && requests < 64 {
            requests += 1;
            let kind = request_kind(draw, &chain, node, seq, ns);
            events.push(Event { seq, tick, kind });
            continue;
        }
        epochs[w] += 1;
        let op = cache_op(draw, roll, &chain, node, ns);
        // Jitter delivers this epoch up to `jitter` ticks late, so a later epoch of
        // the same worker can arrive first and make this one stale.
        let delivered = tick + draw.below(jitter + 1);
        events.push(Event {
            seq,
            tick: delivered,
            kind: EventKind::Cache {
                worker: format!("w{w}").into(),
                epoch: epochs[w],
                op,
            },
        });
    }
    Trace {
        limits: LimitsProfile::Lab,
        policy: PolicyParams::default(),
        sharing: vec![],
        workers: worker_specs(worker_count),
        events,
    }
}

/// A random tree of `key_count` keys: key 0 and 15% of the others are roots.
fn key_tree(draw: &mut impl Draw, key_count: usize) -> KeyTree {
    let parent = (0..key_count)
        .map(|i| {
            if i == 0 || draw.chance(15) {
                None
            } else {
                Some(draw.below(i as u64) as usize)
            }
        })
        .collect();
    KeyTree { parent }
}

/// `worker_count` identical idle workers with empty caches, `w0`, `w1`, ...
fn worker_specs(worker_count: usize) -> Vec<WorkerSpec> {
    (0..worker_count)
        .map(|w| WorkerSpec {
            id: format!("w{w}").into(),
            model: "m".into(),
            adapters: vec![],
            prefill_rate: 16,
            decode_rate: 4,
            queued_prefill: 0,
            active_decode: 0,
            observed_tick: 0,
            epoch: 0,
            cache: vec![],
        })
        .collect()
}

/// Whole blocks of `chain`'s keys, in order.
fn chain_segments(chain: &[usize]) -> Vec<Segment> {
    chain
        .iter()
        .map(|&k| Segment {
            key: key(k).into(),
            tokens: BLOCK_TOKENS,
        })
        .collect()
}

/// A request whose prefix is `chain`, sometimes with a partial tail of `node`'s.
fn request_kind(
    draw: &mut impl Draw,
    chain: &[usize],
    node: usize,
    seq: u64,
    ns: Namespace,
) -> EventKind {
    let mut prefix = chain_segments(chain);
    if draw.chance(30) {
        // A partial tail: a block of its own, never whole.
        prefix.push(Segment {
            key: format!("t{node}").into(),
            tokens: 1 + draw.below(BLOCK_TOKENS - 1),
        });
    }
    let prefix_tokens: u64 = prefix.iter().map(|s| s.tokens).sum();
    EventKind::Request(Request {
        id: format!("r{seq}").into(),
        namespace: ns,
        prefix,
        prompt_tokens: prefix_tokens + draw.below(BLOCK_TOKENS),
        decode_tokens: draw.below(8),
    })
}

/// The cache operation `roll` (30 to 99) picks along `chain`: a store below 70, an
/// evict below 96, else a clear.
fn cache_op(
    draw: &mut impl Draw,
    roll: u64,
    chain: &[usize],
    node: usize,
    ns: Namespace,
) -> CacheOp {
    if roll < 70 {
        store_op(draw, chain, node, ns)
    } else if roll < 96 {
        evict_op(draw, chain, node, ns)
    } else {
        CacheOp::Clear
    }
}

/// A run along the chain; from the root most of the time, sometimes with a hole or a
/// partial tail.
fn store_op(draw: &mut impl Draw, chain: &[usize], node: usize, ns: Namespace) -> CacheOp {
    let start = if draw.chance(75) {
        0
    } else {
        draw.below(chain.len() as u64) as usize
    };
    let mut segments = chain_segments(&chain[start..]);
    if segments.len() > 2 && draw.chance(10) {
        segments.remove(1 + draw.below(segments.len() as u64 - 2) as usize);
    }
    if draw.chance(20) {
        segments.push(Segment {
            key: format!("t{node}").into(),
            tokens: 1 + draw.below(BLOCK_TOKENS - 1),
        });
    }
    CacheOp::Store {
        namespace: ns,
        segments,
    }
}

/// The tail of the chain, tail first as an LRU evicts it; sometimes with the partial
/// tail, sometimes only a block in the middle.
fn evict_op(draw: &mut impl Draw, chain: &[usize], node: usize, ns: Namespace) -> CacheOp {
    let from = draw.below(chain.len() as u64) as usize;
    let mut keys: Vec<Arc<str>> = chain[from..].iter().rev().map(|&k| key(k).into()).collect();
    if draw.chance(25) {
        keys.insert(0, format!("t{node}").into());
    }
    if draw.chance(10) {
        keys = vec![key(chain[from]).into()];
    }
    // An evict's keys are a set: the canonical trace (what `simulate --events-out`
    // writes, and what a reproduction is saved as) lists them in byte order, so they are
    // generated that way.
    keys.sort();
    CacheOp::Evict {
        namespace: ns,
        keys,
    }
}
