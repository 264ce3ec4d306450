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
use crate::{Applied, Peer};
use dynamo_kv_router::indexer::positional::{LevelIndex, SearchMode};
use dynamo_kv_router::protocols::{
    KvCacheEvent, KvCacheEventData, KvCacheEventError, KvCacheRemoveData, KvCacheStoreData,
    KvCacheStoredBlockData, LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
};
use dynamo_kv_router::{PositionalIndexer, RadixTree, SyncIndexer};
use kvroute_core::route::compiled::{Compiled, KeyId, NsId, Op, Req, Seg};
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

/// The jump size Dynamo's own positional tests and benchmarks use.
const POSITIONAL_JUMP_SIZE: usize = 8;

/// A Dynamo indexer fed kvroute's cache events through a [`ChainMap`].
pub struct DynamoIndex {
    kind: DynamoKind,
    backend: Backend,
    chains: ChainMap,
    block_tokens: u64,
    next_event_id: u64,
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
        let backend = match kind {
            DynamoKind::RadixTree => Backend::Radix(RadixTree::new()),
            DynamoKind::Positional => Backend::Positional(
                PositionalIndexer::new_with_mode(POSITIONAL_JUMP_SIZE, SearchMode::Strided),
                FxHashMap::default(),
            ),
        };
        let mut index = DynamoIndex {
            kind,
            backend,
            chains,
            block_tokens,
            next_event_id: 0,
            query: Vec::new(),
        };
        for (w, worker) in compiled.workers.iter().enumerate() {
            let mut entries: Vec<(usize, NsId, KeyId)> = worker
                .cache
                .iter()
                .filter(|&&(_, _, tokens)| tokens > 0)
                .map(|&(ns, key, _)| (index.depth(ns, key), ns, key))
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

    fn depth(&self, ns: NsId, key: KeyId) -> usize {
        let mut depth = 0;
        let mut at = self.chains.block(ns, key).parent;
        while let Some(parent) = at {
            depth += 1;
            at = self.chains.block(ns, parent).parent;
        }
        depth
    }

    fn send(&mut self, worker: u32, data: KvCacheEventData) -> Result<(), KvCacheEventError> {
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
/// mapping).
pub fn dynamo_events(chains: &ChainMap, op: &Op) -> Vec<KvCacheEventData> {
    let mut events = Vec::new();
    match op {
        Op::Store { ns, segments } => {
            let mut start = 0;
            for i in 0..=segments.len() {
                let run_ends = i == segments.len()
                    || segments[i].tokens == 0
                    || (i > start
                        && chains.block(*ns, segments[i].key).parent != Some(segments[i - 1].key));
                if !run_ends {
                    continue;
                }
                if i > start {
                    events.push(stored_run(chains, *ns, &segments[start..i]));
                }
                start = i;
                // A store of 0 tokens is a removal in kvroute (SPEC.md §3): Dynamo has
                // no token counts, so it is sent as one.
                if i < segments.len() && segments[i].tokens == 0 {
                    events.push(removed(chains, *ns, &[segments[i].key]));
                    start = i + 1;
                }
            }
        }
        Op::Evict { ns, keys } => {
            if !keys.is_empty() {
                events.push(removed(chains, *ns, keys));
            }
        }
        Op::Clear => events.push(KvCacheEventData::Cleared),
    }
    events
}

/// The blocks Dynamo is asked to match for `request`: its leading whole blocks.
pub fn query_blocks(chains: &ChainMap, request: &Req, block_tokens: u64) -> Vec<LocalBlockHash> {
    request.prefix[..full_block_count(&request.prefix, block_tokens)]
        .iter()
        .map(|s| chains.block(request.ns, s.key).local_hash)
        .collect()
}

fn outcome(result: Result<(), KvCacheEventError>) -> Applied {
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
        let scores: OverlapScores = match &self.backend {
            Backend::Radix(tree) => tree.find_matches(self.query.clone(), false),
            Backend::Positional(indexer, _) => indexer.find_matches(&self.query, false),
        };
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

/// How many leading segments of a prefix are whole blocks of `block_tokens`: what
/// Dynamo's request side hashes.
pub fn full_block_count(prefix: &[Seg], block_tokens: u64) -> usize {
    prefix
        .iter()
        .take_while(|s| s.tokens == block_tokens)
        .count()
}
