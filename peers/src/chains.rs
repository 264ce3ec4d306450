//! The mapping from kvroute's keyed cache to Dynamo's hash chains.
//!
//! kvroute names a block by `(namespace, key)` and knows nothing of its position;
//! Dynamo names it by a *sequence hash* that folds in every block before it. The two
//! agree only on traces whose keys form chains: every key has one parent (the key
//! before it in every request prefix that names it), so each key has one sequence hash.
//! [`ChainMap`] takes the parents [`ChainShape`] learns from the trace's requests (first
//! occurrence wins, later disagreements are counted as forks), hashes each key the way Dynamo hashes a
//! block (`compute_block_hash` over the key's bytes, with the namespace folded into the
//! seed as Dynamo folds a LoRA name) and chains the hashes with
//! `compute_next_seq_hash`.

use dynamo_kv_router::protocols::{
    compute_next_seq_hash, ExternalSequenceBlockHash, LocalBlockHash,
};
use kvroute_core::input::Namespace;
use kvroute_core::route::{Compiled, KeyId, NsId};
pub use kvroute_peer_core::chains::ChainShape;
use std::collections::HashMap;

/// One key of one namespace as Dynamo sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBlock {
    /// The key before this one in the chain; `None` at the root.
    pub parent: Option<KeyId>,
    pub local_hash: LocalBlockHash,
    pub sequence_hash: ExternalSequenceBlockHash,
}

/// Every `(namespace, key)` of a trace with its chain position ([`ChainShape`]) and
/// Dynamo's hashes of it. Lookups only: the map is never iterated, so its order cannot
/// reach a result.
#[derive(Debug, Clone, Default)]
pub struct ChainMap {
    shape: ChainShape,
    blocks: HashMap<(NsId, KeyId), ChainBlock>,
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

/// Dynamo's sequence hash of a block after `parent` (the first block's is its own
/// block hash).
pub fn sequence_hash(
    parent: Option<ExternalSequenceBlockHash>,
    local: LocalBlockHash,
) -> ExternalSequenceBlockHash {
    ExternalSequenceBlockHash(match parent {
        None => local.0,
        Some(p) => compute_next_seq_hash(p.0, local),
    })
}

impl ChainMap {
    /// The chain shape of `compiled` ([`ChainShape::new`]), each key hashed after its
    /// parent the way Dynamo hashes a block.
    pub fn new(compiled: &Compiled) -> Self {
        let seeds: Vec<u64> = compiled
            .tables
            .namespaces
            .iter()
            .map(namespace_seed)
            .collect();
        let shape = ChainShape::new(compiled);
        let mut blocks = HashMap::new();
        for &(ns, key) in shape.in_order() {
            let parent = shape.parent(ns, key);
            let local_hash = local_block_hash(compiled.tables.keys.name(key), seeds[ns as usize]);
            let parent_hash = parent
                .map(|p: KeyId| blocks[&(ns, p)])
                .map(|b: ChainBlock| b.sequence_hash);
            blocks.insert(
                (ns, key),
                ChainBlock {
                    parent,
                    local_hash,
                    sequence_hash: sequence_hash(parent_hash, local_hash),
                },
            );
        }
        ChainMap { shape, blocks }
    }

    /// The chain block of `(ns, key)`; every key the trace names has one.
    pub fn block(&self, ns: NsId, key: KeyId) -> ChainBlock {
        self.blocks[&(ns, key)]
    }

    /// The chain positions, without hashes.
    pub fn shape(&self) -> &ChainShape {
        &self.shape
    }
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
