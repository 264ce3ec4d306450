//! The chain structure of a keyed trace, as a radix-tree indexer has to see it.
//!
//! kvroute names a block by `(namespace, key)` and knows nothing of its position; a
//! radix-tree indexer names it by its place in a chain of blocks. The two agree only on
//! traces whose keys form chains: every key has one parent (the key before it in every
//! request prefix that names it). [`ChainShape`] learns the parents from the trace's
//! requests (first occurrence wins, later disagreements are counted as forks) and places
//! keys only cache events name at the root (SPEC.md §12). [`chain_ops`] is how one
//! cache operation becomes chain-indexer operations, and [`ChainModel`] a model of a
//! chain indexer's acceptance rules: what the comparison of a peer reached over the
//! protocol uses as evidence, where the in-process comparison has Dynamo's own answers.

use kvroute_core::route::{Compiled, KeyId, NsId, Op, Seg, Step};
use std::collections::{HashMap, HashSet};

/// Every `(namespace, key)` of a trace with its chain parent. Lookups only: the maps
/// are never iterated, so their order cannot reach a result.
#[derive(Debug, Clone, Default)]
pub struct ChainShape {
    parents: HashMap<(NsId, KeyId), Option<KeyId>>,
    /// The keys in the order they were learned: each after its parent.
    order: Vec<(NsId, KeyId)>,
    children: HashMap<(NsId, KeyId), Vec<KeyId>>,
    /// Keys some request reaches from a parent other than the first one seen: the
    /// trace is not a set of chains there, and a chain indexer sees one position.
    forked: HashSet<(NsId, KeyId)>,
}

impl ChainShape {
    /// Learns every key's parent from the requests of `compiled` (in replay order),
    /// then places keys that only cache events name at the root.
    pub fn new(compiled: &Compiled) -> Self {
        let mut shape = ChainShape::default();
        for event in &compiled.events {
            if let Step::Request(request) = &event.step {
                let mut parent: Option<KeyId> = None;
                for segment in &request.prefix {
                    shape.learn(request.ns, segment.key, parent);
                    parent = Some(segment.key);
                }
            }
        }
        for (ns, key) in cache_keys(compiled) {
            if !shape.parents.contains_key(&(ns, key)) {
                shape.learn(ns, key, None);
            }
        }
        shape
    }

    /// The positions a peer over the protocol can know (SPEC.md §15.2): each key placed
    /// at its first occurrence in what the peer is sent — after the key before it in a
    /// request prefix or a store's segments, at the root when first there or in an
    /// initial cache (an eviction places nothing; a key only evictions name ends at
    /// the root). A later request reaching a key from another
    /// parent is a fork, as in [`ChainShape::new`]; a later store is not (a store may
    /// skip a block of its chain). `withheld[i]` is whether `compiled.events[i]` is not
    /// sent.
    pub fn streamed(compiled: &Compiled, withheld: &[bool]) -> Self {
        let mut shape = ChainShape::default();
        for worker in &compiled.workers {
            for &(ns, key, tokens) in &worker.cache {
                if tokens > 0 {
                    shape.place(ns, key, None);
                }
            }
        }
        for (event, &withheld) in compiled.events.iter().zip(withheld) {
            match &event.step {
                Step::Request(request) => {
                    let mut parent: Option<KeyId> = None;
                    for segment in &request.prefix {
                        shape.learn(request.ns, segment.key, parent);
                        parent = Some(segment.key);
                    }
                }
                Step::Cache { op, .. } if !withheld => match op {
                    Op::Store { ns, segments } => {
                        let mut parent: Option<KeyId> = None;
                        for segment in segments {
                            shape.place(*ns, segment.key, parent);
                            parent = Some(segment.key);
                        }
                    }
                    // An eviction places nothing (SPEC.md §15.2): a key it names
                    // first is held nowhere, so its next occurrence places it.
                    Op::Evict { .. } | Op::Clear => {}
                },
                Step::Cache { .. } | Step::Load { .. } => {}
            }
        }
        // Keys only withheld events name are never sent; they get a place so that the
        // lookups of the comparison's evidence find one.
        for (ns, key) in cache_keys(compiled) {
            shape.place(ns, key, None);
        }
        shape
    }

    /// Places `(ns, key)` after `parent` unless it has a place already.
    fn place(&mut self, ns: NsId, key: KeyId, parent: Option<KeyId>) {
        if !self.parents.contains_key(&(ns, key)) {
            self.learn(ns, key, parent);
        }
    }

    /// Whether every key has the same parent in `self` and `other`.
    pub fn same_positions(&self, other: &ChainShape) -> bool {
        self.order.len() == other.order.len()
            && self
                .order
                .iter()
                .all(|k| other.parents.get(k) == Some(&self.parents[k]))
    }

    fn learn(&mut self, ns: NsId, key: KeyId, parent: Option<KeyId>) {
        if let Some(known) = self.parents.get(&(ns, key)) {
            if *known != parent {
                self.forked.insert((ns, key));
            }
            return;
        }
        self.parents.insert((ns, key), parent);
        self.order.push((ns, key));
        if let Some(p) = parent {
            self.children.entry((ns, p)).or_default().push(key);
        }
    }

    /// The parent of `(ns, key)`; every key the trace names has a place.
    pub fn parent(&self, ns: NsId, key: KeyId) -> Option<KeyId> {
        self.parents[&(ns, key)]
    }

    /// Every key, each after its parent.
    pub fn in_order(&self) -> &[(NsId, KeyId)] {
        &self.order
    }

    /// The depth of `(ns, key)` below the root (0 at the root).
    pub fn depth(&self, ns: NsId, key: KeyId) -> usize {
        let mut depth = 0;
        let mut at = self.parent(ns, key);
        while let Some(parent) = at {
            depth += 1;
            at = self.parent(ns, parent);
        }
        depth
    }

    /// The keys that follow `(ns, key)` in some request.
    pub fn children(&self, ns: NsId, key: KeyId) -> &[KeyId] {
        self.children.get(&(ns, key)).map_or(&[], Vec::as_slice)
    }

    /// Whether some request reaches `(ns, key)` from a second parent.
    pub fn is_forked(&self, ns: NsId, key: KeyId) -> bool {
        self.forked.contains(&(ns, key))
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
                Op::Store { ns, segments } => keys.extend(segments.iter().map(|s| (*ns, s.key))),
                Op::Evict { ns, keys: evicted } => keys.extend(evicted.iter().map(|&k| (*ns, k))),
                Op::Clear => {}
            }
        }
    }
    keys
}

/// One chain-indexer operation (Dynamo's `Stored`, `Removed`, `Cleared`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainOp<'a> {
    /// Segments consecutive in their chain; the run's parent is its first key's parent.
    Stored {
        ns: NsId,
        run: &'a [Seg],
    },
    Removed {
        ns: NsId,
        keys: Vec<KeyId>,
    },
    Cleared,
}

/// The chain operations one kvroute cache operation maps to, in order (SPEC.md §12
/// "The mapping"): a store is one `Stored` per run of segments consecutive in their
/// chain, a segment of 0 tokens a `Removed` of its key; an evict one `Removed`; a clear
/// `Cleared`. `parent` is the chain parent of a key.
pub fn chain_ops<'a>(
    parent: impl Fn(NsId, KeyId) -> Option<KeyId>,
    op: &'a Op,
) -> Vec<ChainOp<'a>> {
    let mut ops = Vec::new();
    match op {
        Op::Store { ns, segments } => {
            let mut start = 0;
            for i in 0..=segments.len() {
                let run_ends = i == segments.len()
                    || segments[i].tokens == 0
                    || (i > start && parent(*ns, segments[i].key) != Some(segments[i - 1].key));
                if !run_ends {
                    continue;
                }
                if i > start {
                    ops.push(ChainOp::Stored {
                        ns: *ns,
                        run: &segments[start..i],
                    });
                }
                start = i;
                // A store of 0 tokens is a removal in kvroute (SPEC.md §3): a chain
                // indexer has no token counts, so it is sent as one.
                if i < segments.len() && segments[i].tokens == 0 {
                    ops.push(ChainOp::Removed {
                        ns: *ns,
                        keys: vec![segments[i].key],
                    });
                    start = i + 1;
                }
            }
        }
        Op::Evict { ns, keys } => {
            if !keys.is_empty() {
                ops.push(ChainOp::Removed {
                    ns: *ns,
                    keys: keys.clone(),
                });
            }
        }
        Op::Clear => ops.push(ChainOp::Cleared),
    }
    ops
}

/// A chain indexer's acceptance rules, per worker: a `Stored` run is dropped when its
/// parent block is not held (an orphan), a `Removed` naming a block not held is
/// rejected (the blocks it names that are held go), `Cleared` drops everything.
/// [`ChainModel::apply`] says what such an indexer would have rejected, which is the
/// evidence the causes `orphan_store` and `removed_abort` need for a peer whose own
/// rejections are not visible (one reached over the protocol).
#[derive(Debug, Clone)]
pub struct ChainModel {
    held: Vec<HashSet<(NsId, KeyId)>>,
}

impl ChainModel {
    /// The workers' initial caches stored, each entry after its parent.
    pub fn new(compiled: &Compiled, shape: &ChainShape) -> Self {
        let mut model = ChainModel {
            held: vec![HashSet::new(); compiled.worker_count()],
        };
        for (w, worker) in compiled.workers.iter().enumerate() {
            let mut entries: Vec<(usize, NsId, KeyId)> = worker
                .cache
                .iter()
                .filter(|&&(_, _, tokens)| tokens > 0)
                .map(|&(ns, key, _)| (shape.depth(ns, key), ns, key))
                .collect();
            entries.sort_unstable();
            for (_, ns, key) in entries {
                let run = [Seg { key, tokens: 1 }];
                model.apply_chain_op(w, shape, &ChainOp::Stored { ns, run: &run });
            }
        }
        model
    }

    /// Applies one cache operation of worker `w`: the first rejection, as an indexer
    /// that reports one would report it.
    pub fn apply(&mut self, w: usize, shape: &ChainShape, op: &Op) -> crate::Applied {
        let mut first = crate::Applied::Applied;
        for chain_op in chain_ops(|ns, key| shape.parent(ns, key), op) {
            let applied = self.apply_chain_op(w, shape, &chain_op);
            if first == crate::Applied::Applied {
                first = applied;
            }
        }
        first
    }

    fn apply_chain_op(&mut self, w: usize, shape: &ChainShape, op: &ChainOp) -> crate::Applied {
        let held = &mut self.held[w];
        match op {
            ChainOp::Stored { ns, run } => {
                if let Some(parent) = shape.parent(*ns, run[0].key) {
                    if !held.contains(&(*ns, parent)) {
                        return crate::Applied::ParentNotFound;
                    }
                }
                held.extend(run.iter().map(|s| (*ns, s.key)));
                crate::Applied::Applied
            }
            ChainOp::Removed { ns, keys } => {
                let mut all_held = true;
                for key in keys {
                    all_held &= held.remove(&(*ns, *key));
                }
                if all_held {
                    crate::Applied::Applied
                } else {
                    crate::Applied::BlockNotFound
                }
            }
            ChainOp::Cleared => {
                held.clear();
                crate::Applied::Applied
            }
        }
    }
}
