//! NVIDIA Dynamo's KV indexers (`dynamo-kv-router` 1.6.1) behind the [`Peer`] trait.
//!
//! The mapping (the issue's, and SPEC.md's "Peers" section): worker index `w` is
//! `WorkerId w` at `dp_rank 0`; a `(namespace, key)` is the block [`ChainMap`] hashes;
//! a `store` becomes one `Stored` event per run of segments that are consecutive in
//! their chain (`parent_hash` the sequence hash of the run's parent, `None` at the
//! root); an `evict` one `Removed` of the keys' sequence hashes; a `clear` `Cleared`.
//! A request asks `find_matches(blocks, early_exit = false)` with the request's leading
//! *full* blocks (Dynamo hashes only whole blocks of `block_tokens` tokens), and `m`
//! matched blocks are the request's first `m` segments' tokens. Dynamo has no epochs:
//! every event is applied in delivery order.

use crate::chains::ChainMap;
use dynamo_kv_router::indexer::positional::{LevelIndex, SearchMode};
use dynamo_kv_router::protocols::{
    KvCacheEvent, KvCacheEventData, KvCacheEventError, KvCacheRemoveData, KvCacheStoreData,
    KvCacheStoredBlockData, LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
};
use dynamo_kv_router::{PositionalIndexer, RadixTree, SyncIndexer};
use kvroute_core::route::{Compiled, KeyId, NsId, Op, Req, Seg};
use kvroute_peer_core::chains::{chain_ops, ChainOp};
pub use kvroute_peer_core::classify::full_block_count;
use kvroute_peer_core::{Applied, Peer};
use rustc_hash::FxHashMap;

/// Which of Dynamo's indexers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynamoKind {
    RadixTree,
    Positional,
}

impl DynamoKind {
    pub fn name(self) -> &'static str {
        match self {
            DynamoKind::RadixTree => "radix_tree",
            DynamoKind::Positional => "positional",
        }
    }
}

enum Backend {
    Radix(RadixTree),
    /// The indexer and the per-worker reverse map its event loop normally owns.
    Positional(PositionalIndexer, FxHashMap<WorkerWithDpRank, LevelIndex>),
}

/// One of Dynamo's indexers with nothing of kvroute's mapping: Dynamo events in,
/// overlap scores out. [`DynamoIndex`] drives it from a trace known in full, the
/// `kvroute-peer-dynamo` adapter ([`crate::stream`]) from events arriving one at a time.
pub struct DynamoBackend {
    backend: Backend,
    next_event_id: u64,
}

impl DynamoBackend {
    pub fn new(kind: DynamoKind) -> Self {
        let backend = match kind {
            DynamoKind::RadixTree => Backend::Radix(RadixTree::new()),
            DynamoKind::Positional => Backend::Positional(
                PositionalIndexer::new_with_mode(POSITIONAL_JUMP_SIZE, SearchMode::Strided),
                FxHashMap::default(),
            ),
        };
        DynamoBackend {
            backend,
            next_event_id: 0,
        }
    }

    /// Applies one event of worker `worker` (`WorkerId worker`, `dp_rank` 0).
    pub fn apply(&mut self, worker: u32, data: KvCacheEventData) -> Result<(), KvCacheEventError> {
        let event = RouterEvent::new(
            worker as u64,
            KvCacheEvent {
                event_id: self.next_event_id,
                data,
                dp_rank: 0,
            },
        );
        self.next_event_id += 1;
        match &mut self.backend {
            Backend::Radix(tree) => tree.apply_event(event),
            Backend::Positional(indexer, worker_blocks) => {
                indexer.apply_event(worker_blocks, event, None)
            }
        }
    }

    /// `find_matches(query, early_exit = false)`.
    pub fn find_matches(&self, query: &[LocalBlockHash]) -> OverlapScores {
        match &self.backend {
            Backend::Radix(tree) => tree.find_matches(query.to_vec(), false),
            Backend::Positional(indexer, _) => indexer.find_matches(query, false),
        }
    }
}

/// The jump size Dynamo's own positional tests and benchmarks use.
const POSITIONAL_JUMP_SIZE: usize = 8;

/// A Dynamo indexer fed kvroute's cache events through a [`ChainMap`].
pub struct DynamoIndex {
    kind: DynamoKind,
    backend: DynamoBackend,
    chains: ChainMap,
    block_tokens: u64,
    query: Vec<LocalBlockHash>,
}

impl DynamoKind {
    /// Every Dynamo indexer this crate drives.
    pub const ALL: [DynamoKind; 2] = [DynamoKind::RadixTree, DynamoKind::Positional];
}

impl DynamoIndex {
    /// An empty indexer of `kind` for `compiled`, then the workers' initial caches as
    /// stores (each entry after its parent, so chains that are resident are accepted).
    pub fn new(kind: DynamoKind, compiled: &Compiled, chains: ChainMap, block_tokens: u64) -> Self {
        let mut index = DynamoIndex {
            kind,
            backend: DynamoBackend::new(kind),
            chains,
            block_tokens,
            query: Vec::new(),
        };
        for (w, worker) in compiled.workers.iter().enumerate() {
            let mut entries: Vec<(usize, NsId, KeyId)> = worker
                .cache
                .iter()
                .filter(|&&(_, _, tokens)| tokens > 0)
                .map(|&(ns, key, _)| (index.chains.shape().depth(ns, key), ns, key))
                .collect();
            entries.sort_unstable();
            for (_, ns, key) in entries {
                // An initial entry whose parent is not resident cannot be expressed;
                // the comparison's causes name what that changes.
                let _ = index.store_run(w as u32, ns, &[Seg { key, tokens: 1 }]);
            }
        }
        index
    }

    pub fn kind(&self) -> DynamoKind {
        self.kind
    }

    fn send(&mut self, worker: u32, data: KvCacheEventData) -> Result<(), KvCacheEventError> {
        self.backend.apply(worker, data)
    }

    /// One `Stored` event for segments consecutive in their chain.
    fn store_run(&mut self, worker: u32, ns: NsId, run: &[Seg]) -> Result<(), KvCacheEventError> {
        let data = stored_run(&self.chains, ns, run);
        self.send(worker, data)
    }
}

/// The `Stored` event of segments consecutive in their chain.
fn stored_run(chains: &ChainMap, ns: NsId, run: &[Seg]) -> KvCacheEventData {
    let parent_hash = chains
        .block(ns, run[0].key)
        .parent
        .map(|p| chains.block(ns, p).sequence_hash);
    let blocks = run
        .iter()
        .map(|s| {
            let block = chains.block(ns, s.key);
            KvCacheStoredBlockData {
                block_hash: block.sequence_hash,
                tokens_hash: block.local_hash,
                mm_extra_info: None,
            }
        })
        .collect();
    KvCacheEventData::Stored(KvCacheStoreData {
        parent_hash,
        start_position: None,
        blocks,
    })
}

fn removed(chains: &ChainMap, ns: NsId, keys: &[KeyId]) -> KvCacheEventData {
    let block_hashes = keys
        .iter()
        .map(|&k| chains.block(ns, k).sequence_hash)
        .collect();
    KvCacheEventData::Removed(KvCacheRemoveData { block_hashes })
}

/// The Dynamo events one kvroute cache operation maps to, in order (the module doc's
/// mapping, [`chain_ops`]).
pub fn dynamo_events(chains: &ChainMap, op: &Op) -> Vec<KvCacheEventData> {
    chain_ops(|ns, key| chains.block(ns, key).parent, op)
        .into_iter()
        .map(|chain_op| match chain_op {
            ChainOp::Stored { ns, run } => stored_run(chains, ns, run),
            ChainOp::Removed { ns, keys } => removed(chains, ns, &keys),
            ChainOp::Cleared => KvCacheEventData::Cleared,
        })
        .collect()
}

/// The blocks Dynamo is asked to match for `request`: its leading whole blocks.
pub fn query_blocks(chains: &ChainMap, request: &Req, block_tokens: u64) -> Vec<LocalBlockHash> {
    request.prefix[..full_block_count(&request.prefix, block_tokens)]
        .iter()
        .map(|s| chains.block(request.ns, s.key).local_hash)
        .collect()
}

pub fn outcome(result: Result<(), KvCacheEventError>) -> Applied {
    match result {
        Ok(()) => Applied::Applied,
        Err(KvCacheEventError::ParentBlockNotFound) => Applied::ParentNotFound,
        Err(_) => Applied::BlockNotFound,
    }
}

impl Peer for DynamoIndex {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn apply_cache_event(&mut self, worker: u32, _tick: u64, _epoch: u64, op: &Op) -> Applied {
        let mut first_failure = Applied::Applied;
        for data in dynamo_events(&self.chains, op) {
            let applied = outcome(self.send(worker, data));
            if first_failure == Applied::Applied {
                first_failure = applied;
            }
        }
        first_failure
    }

    fn reuse_tokens(&mut self, request: &Req, answer: &mut Vec<(u32, u64)>) {
        answer.clear();
        self.query = query_blocks(&self.chains, request, self.block_tokens);
        if self.query.is_empty() {
            return;
        }
        let scores: OverlapScores = self.backend.find_matches(&self.query);
        // Dynamo answers only for the workers that match, in hash-map order.
        answer.extend(scores.scores.iter().filter_map(|(worker, &blocks)| {
            let tokens: u64 = request.prefix[..blocks as usize]
                .iter()
                .map(|s| s.tokens)
                .sum();
            let tokens = tokens.min(request.prompt_tokens);
            (tokens > 0).then_some((worker.worker_id as u32, tokens))
        }));
        answer.sort_unstable();
    }
}
