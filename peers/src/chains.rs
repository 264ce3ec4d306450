//! The mapping from kvroute's keyed cache to Dynamo's hash chains.
//!
//! kvroute names a block by `(namespace, key)` and knows nothing of its position;
//! Dynamo names it by a *sequence hash* that folds in every block before it. The two
//! agree only on traces whose keys form chains: every key has one parent (the key
//! before it in every request prefix that names it), so each key has one sequence hash.
//! [`ChainMap`] learns the parents from the trace's requests (first occurrence wins,
//! later disagreements are counted as forks), hashes each key the way Dynamo hashes a
//! block (`compute_block_hash` over the key's bytes, with the namespace folded into the
//! seed as Dynamo folds a LoRA name) and chains the hashes with
//! `compute_next_seq_hash`.

use dynamo_kv_router::protocols::{
    compute_next_seq_hash, ExternalSequenceBlockHash, LocalBlockHash,
};
use kvroute_core::input::trace::Namespace;
use kvroute_core::route::compiled::{Compiled, KeyId, NsId, Step};
use std::collections::HashMap;

/// One key of one namespace as Dynamo sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBlock {
    /// The key before this one in the chain; `None` at the root.
    pub parent: Option<KeyId>,
    pub local_hash: LocalBlockHash,
    pub sequence_hash: ExternalSequenceBlockHash,
}

/// Every `(namespace, key)` of a trace with its chain position and hashes. Lookups
/// only: the maps are never iterated, so their order cannot reach a result.
#[derive(Debug, Clone, Default)]
pub struct ChainMap {
    blocks: HashMap<(NsId, KeyId), ChainBlock>,
    children: HashMap<(NsId, KeyId), Vec<KeyId>>,
    /// Keys some request reaches from a parent other than the first one seen: the
    /// trace is not a set of chains there, and Dynamo sees one of the two positions.
    forked: HashMap<(NsId, KeyId), ()>,
}

/// The block-hash seed of a namespace, as Dynamo derives it for a LoRA adapter and a
/// cache namespace (`compute_salt_hash(cache_namespace, lora_name)`): the adapter is
/// the LoRA name (`"base"` is none), tenant and model together are the cache namespace,
/// length-prefixed so that no two `(tenant, model)` pairs share one.
pub fn namespace_seed(namespace: &Namespace) -> u64 {
    let lora = (&*namespace.adapter != "base").then_some(&*namespace.adapter);
    let cache_namespace = format!(
        "{}:{}{}",
        namespace.tenant.len(),
        namespace.tenant,
        namespace.model
    );
    dynamo_kv_hashing::compute_salt_hash(Some(&cache_namespace), lora)
        .expect("string salts always derive")
}

/// The local block hash of `key` under a namespace seed: Dynamo's
/// `compute_block_hash(key bytes)` when the seed is Dynamo's default.
pub fn local_block_hash(key: &str, seed: u64) -> LocalBlockHash {
    LocalBlockHash(dynamo_kv_hashing::compute_hash_v2(key.as_bytes(), seed))
}

impl ChainMap {
    /// Learns every key's parent from the requests of `compiled` (in replay order),
    /// then places keys that only cache events name at the root.
    pub fn new(compiled: &Compiled) -> Self {
        let seeds: Vec<u64> = compiled
            .tables
            .namespaces
            .iter()
            .map(namespace_seed)
            .collect();
        let mut map = ChainMap::default();
        // A key is hashed at its first occurrence, when its parent (the key before it
        // in that prefix) has already been hashed: first occurrences are in order.
        for event in &compiled.events {
            if let Step::Request(request) = &event.step {
                let mut parent: Option<KeyId> = None;
                for segment in &request.prefix {
                    map.learn(compiled, &seeds, request.ns, segment.key, parent);
                    parent = Some(segment.key);
                }
            }
        }
        for (ns, key) in cache_keys(compiled) {
            if !map.blocks.contains_key(&(ns, key)) {
                map.learn(compiled, &seeds, ns, key, None);
            }
        }
        map
    }

    fn learn(
        &mut self,
        compiled: &Compiled,
        seeds: &[u64],
        ns: NsId,
        key: KeyId,
        parent: Option<KeyId>,
    ) {
        if let Some(known) = self.blocks.get(&(ns, key)) {
            if known.parent != parent {
                self.forked.insert((ns, key), ());
            }
            return;
        }
        let local_hash = local_block_hash(compiled.tables.keys.name(key), seeds[ns as usize]);
        // Dynamo's chain: the first block's sequence hash is its block hash, each
        // later one `compute_next_seq_hash(parent, block)`.
        let sequence_hash = match parent {
            None => local_hash.0,
            Some(p) => compute_next_seq_hash(self.blocks[&(ns, p)].sequence_hash.0, local_hash),
        };
        self.blocks.insert(
            (ns, key),
            ChainBlock {
                parent,
                local_hash,
                sequence_hash: ExternalSequenceBlockHash(sequence_hash),
            },
        );
        if let Some(p) = parent {
            self.children.entry((ns, p)).or_default().push(key);
        }
    }

    /// The chain block of `(ns, key)`; every key the trace names has one.
    pub fn block(&self, ns: NsId, key: KeyId) -> ChainBlock {
        self.blocks[&(ns, key)]
    }

    /// The keys that follow `(ns, key)` in some request.
    pub fn children(&self, ns: NsId, key: KeyId) -> &[KeyId] {
        self.children.get(&(ns, key)).map_or(&[], Vec::as_slice)
    }

    /// Whether some request reaches `(ns, key)` from a second parent.
    pub fn is_forked(&self, ns: NsId, key: KeyId) -> bool {
        self.forked.contains_key(&(ns, key))
    }

    /// How many keys have a second parent somewhere (0 for a trace of chains).
    pub fn forked_keys(&self) -> usize {
        self.forked.len()
    }
}

/// The `(namespace, key)` pairs of initial caches and cache events, in trace order.
fn cache_keys(compiled: &Compiled) -> Vec<(NsId, KeyId)> {
    let mut keys = Vec::new();
    for worker in &compiled.workers {
        keys.extend(worker.cache.iter().map(|&(ns, key, _)| (ns, key)));
    }
    for event in &compiled.events {
        if let Step::Cache { op, .. } = &event.step {
            match op {
                kvroute_core::route::compiled::Op::Store { ns, segments } => {
                    keys.extend(segments.iter().map(|s| (*ns, s.key)));
                }
                kvroute_core::route::compiled::Op::Evict { ns, keys: evicted } => {
                    keys.extend(evicted.iter().map(|&k| (*ns, k)));
                }
                kvroute_core::route::compiled::Op::Clear => {}
            }
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynamo_kv_router::protocols::{compute_block_hash, compute_seq_hash_for_block};

    fn ns(tenant: &str, model: &str, adapter: &str) -> Namespace {
        Namespace {
            tenant: tenant.into(),
            model: model.into(),
            adapter: adapter.into(),
        }
    }

    #[test]
    fn the_default_seed_is_dynamos_block_hash_and_namespaces_separate() {
        // With no namespace and no adapter the seed is Dynamo's own, so a key's hash is
        // `compute_block_hash` of its bytes.
        let default_seed = dynamo_kv_hashing::compute_salt_hash(None, None).unwrap();
        assert_eq!(
            local_block_hash("b7", default_seed),
            compute_block_hash(b"b7")
        );
        let seeds = [
            namespace_seed(&ns("acme", "m1", "base")),
            namespace_seed(&ns("acme", "m1", "lora-a")),
            namespace_seed(&ns("beta", "m1", "base")),
            namespace_seed(&ns("acme", "m2", "base")),
            // Without the length prefix these two would be one cache namespace.
            namespace_seed(&ns("ab", "c", "base")),
            namespace_seed(&ns("a", "bc", "base")),
        ];
        for (i, a) in seeds.iter().enumerate() {
            for b in &seeds[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn chained_hashes_are_dynamos_sequence_hashes() {
        let seed = 7;
        let locals: Vec<_> = ["b0", "b1", "b2"]
            .iter()
            .map(|k| local_block_hash(k, seed))
            .collect();
        let mut chained = vec![locals[0].0];
        for local in &locals[1..] {
            chained.push(compute_next_seq_hash(*chained.last().unwrap(), *local));
        }
        assert_eq!(chained, compute_seq_hash_for_block(&locals));
    }
}
