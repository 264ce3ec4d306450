//! Every worker's engine in the closed loop (SPEC.md §11, *Prefill* and *Store and
//! evict*): what it really reuses for a request, when its FIFO prefill completes, and
//! the cache operations a completion performs, in the order it performs them.

use crate::input::trace::Namespace;
use crate::route::compiled::{Compiled, KeyId, NsId, Op, Req, Seg};
use crate::simulate::lru::Lru;
use crate::simulate::options::Capacity;
use std::collections::BTreeMap;

/// A prefill in flight: completes at its tick, then stores its prefix.
#[derive(Debug, Clone)]
pub struct Prefill {
    pub worker: u32,
    pub ns: NsId,
    pub prefix: Vec<Seg>,
}

/// The engine model of every worker.
pub struct Engines {
    pub capacity: Capacity,
    pub caches: Vec<Lru>,
    /// When each worker's prefill queue empties (FIFO prefill).
    busy_until_tick: Vec<u64>,
    prefill_rate: Vec<u64>,
    /// The last epoch each worker published.
    pub epoch: Vec<u64>,
    stamp: u64,
}

impl Engines {
    pub fn new(compiled: &Compiled, capacity: Capacity) -> Self {
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
            // An entry of 0 tokens is no entry (SPEC.md §3): it takes no room.
            let mut entries: Vec<_> = spec
                .cache
                .iter()
                .filter(|&&(_, _, tokens)| tokens > 0)
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
    pub fn true_reuse(&self, worker: usize, request: &Req) -> u64 {
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
    pub fn admit(&mut self, worker: usize, tick: u64, recomputed_tokens: u64) -> u64 {
        let start = tick.max(self.busy_until_tick[worker]);
        let duration = recomputed_tokens.div_ceil(self.prefill_rate[worker]);
        let done = start.saturating_add(duration);
        self.busy_until_tick[worker] = done;
        done
    }

    /// Stores a completed prefill's prefix and evicts to fit: the cache operations to
    /// publish, in the order the engine performed them.
    pub fn complete(&mut self, prefill: &Prefill, compiled: &Compiled) -> Vec<Op> {
        let cache = &mut self.caches[prefill.worker as usize];
        self.stamp += 1;
        let stamp_floor = self.stamp;
        let fitting: Vec<&Seg> = prefix_that_fits(&prefill.prefix, self.capacity).collect();
        // Stored in segment order, as the router applies the published store: a key
        // repeated in one prefix ends with its last segment's tokens, and each segment
        // that was new or changed size when stored is published.
        let mut stored = Vec::new();
        for segment in &fitting {
            self.stamp += 1;
            let entry = (prefill.ns, segment.key);
            if cache.put(self.capacity, entry, segment.tokens, self.stamp) {
                stored.push(**segment);
            }
        }
        // Then stamped tail first, so the head of a prefix is the most recently used:
        // like vLLM's prefix cache, eviction takes a chain's last blocks before its
        // first, and a shared head outlives the conversations that hang off it.
        for segment in fitting.iter().rev() {
            self.stamp += 1;
            let entry = (prefill.ns, segment.key);
            let tokens = cache.tokens(entry);
            cache.put(self.capacity, entry, tokens, self.stamp);
        }
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

impl Engines {
    /// The worker's answer to a re-query (SPEC.md §11, *Re-query*): a clear, then one
    /// store per namespace holding resident entries, in namespace order by name, the
    /// segments in key byte order. Reading the cache does not touch its LRU order.
    pub fn snapshot(&self, worker: usize, compiled: &Compiled) -> Vec<Op> {
        let tables = &compiled.tables;
        // Namespace (by name) -> its id and its resident segments with their key names.
        type Resident<'a> = (NsId, Vec<(&'a str, Seg)>);
        let mut by_ns: BTreeMap<&Namespace, Resident> = BTreeMap::new();
        let resident = self.caches[worker].resident_entries();
        for ((ns, key), tokens) in resident.into_iter().filter(|&(_, tokens)| tokens > 0) {
            by_ns
                .entry(&tables.namespaces[ns as usize])
                .or_insert_with(|| (ns, Vec::new()))
                .1
                .push((tables.keys.name(key), Seg { key, tokens }));
        }
        let mut ops = vec![Op::Clear];
        ops.extend(by_ns.into_values().map(|(ns, mut segments)| {
            segments.sort_by(|a, b| a.0.cmp(b.0));
            Op::Store {
                ns,
                segments: segments.into_iter().map(|(_, s)| s).collect(),
            }
        }));
        ops
    }
}

/// The leading segments of a prefix that fit in an empty cache (a prefix longer than
/// the whole cache keeps its head), skipping segments of 0 tokens, which hold nothing.
fn prefix_that_fits(prefix: &[Seg], capacity: Capacity) -> impl Iterator<Item = &Seg> {
    let limit = Lru::limit(capacity);
    let mut total = 0u64;
    // Segments of 0 tokens hold nothing, so they take no room either, not even a block.
    prefix.iter().filter(|s| s.tokens > 0).take_while(move |s| {
        total = total.saturating_add(Lru::weight(capacity, s.tokens));
        total <= limit
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::route::compiled::Step;

    /// One worker (`prefill_rate` 16) and two requests: acme's prefix a, b, c (512, 512,
    /// 100 tokens) and another tenant's prefix a.
    pub(crate) const TRACE: &str = r#"{
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

    /// Three readings SPEC.md §11 now pins, each found by the oracle's independent
    /// engine model: 0-token entries and segments take no room, and a key repeated in
    /// one prefix ends with its last segment's tokens in the engine as in the router.
    #[test]
    fn zero_tokens_take_no_room_and_a_repeated_key_ends_with_its_last_size() {
        let with_zero_entry = TRACE.replace(
            r#""epoch": 0, "cache": []"#,
            r#""epoch": 0, "cache": [ { "tenant": "acme", "model": "m", "adapter": "base", "key": "z", "tokens": 0 } ]"#,
        );
        let trace = crate::parse_trace(with_zero_entry.as_bytes()).unwrap();
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
        // One block of room: the 0-token initial entry is no entry, so storing a
        // evicts nothing (before, z took the block and was evicted by name).
        let mut engines = Engines::new(&compiled, Capacity::Blocks(1));
        let ops = engines.complete(&prefill(vec![seg("a", 512)]), &compiled);
        assert_eq!(ops, [store(vec![seg("a", 512)])]);
        // Two blocks: a 0-token segment takes none of them, so a and b both fit
        // (before, it counted as a block and b was left out).
        let mut engines = Engines::new(&compiled, Capacity::Blocks(2));
        let ops = engines.complete(
            &prefill(vec![seg("c", 0), seg("a", 512), seg("b", 512)]),
            &compiled,
        );
        assert_eq!(ops, [store(vec![seg("a", 512), seg("b", 512)])]);
        // a twice: stored in segment order, both sizes published, 300 held, which is
        // what the router believes once it applies the store.
        let mut engines = Engines::new(&compiled, Capacity::Tokens(10_000));
        let ops = engines.complete(&prefill(vec![seg("a", 100), seg("a", 300)]), &compiled);
        assert_eq!(ops, [store(vec![seg("a", 100), seg("a", 300)])]);
        assert_eq!(engines.caches[0].tokens((r1.ns, key("a"))), 300);
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
}
