//! Every differing `(request, worker)` row of a peer's answers explained by the known
//! differences of SPEC.md §12.
//!
//! kvroute is the reference: [`Reference`] applies each cache event to
//! [`KvrouteIndex`] first, decides whether the peer is given it (not when
//! `withhold_stale` and kvroute's epoch rule dropped it), and keeps the evidence the
//! causes are checked against: the late events kvroute dropped, the holes in what the
//! peer was given. A row on which a peer differs from kvroute gets the first [`Cause`]
//! that applies; each is checked against the row's own evidence (its figures, or the
//! keys of its prefix that an event the cause names touched on that worker), not
//! against the trace as a whole. The in-process Dynamo comparison and a peer reached
//! over the protocol use this same code. A peer reached over the protocol is also
//! checked, last, against [`PeerModels`]: what an indexer that never applies evictions,
//! or that holds a stored key's chain ancestors with it, would answer (`evict_unseen`,
//! `ancestors_implied`).

use crate::chains::ChainShape;
use crate::kvroute::KvrouteIndex;
use crate::{densify, Applied, Peer};
use kvroute_core::input::{CacheOp, EventKind, Trace};
use kvroute_core::route::{CEvent, Compiled, KeyId, NsId, Op, Req, Seg};
use std::collections::{HashMap, HashSet};

/// How a comparison runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Tokens of a whole block: a chain indexer hashes only these on the request side.
    pub block_tokens: u64,
    /// Compare on the trace cut to what a chain indexer can express: stores and initial
    /// caches keep whole blocks only, prefixes stop at their first partial segment, and
    /// evictions name only keys that were ever whole blocks.
    pub full_blocks_only: bool,
    /// Give the peer only the cache events kvroute's epoch rule applied.
    pub withhold_stale: bool,
    /// Classify the known Dynamo defect ([`Cause::RemovedAbort`]); off, it is a new
    /// finding, which is how the seed sweep first found it.
    pub known_findings: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_tokens: 512,
            full_blocks_only: false,
            withhold_stale: false,
            known_findings: true,
        }
    }
}

/// Why a peer's row differs from kvroute's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// kvroute counts the tokens of a block it holds in part, or a partial tail
    /// segment; the peer counts whole blocks only (kvroute is higher by less than a block).
    PartialBlock,
    /// kvroute stopped inside a block stored with fewer tokens than the request's
    /// segment; the peer has no token counts and counted the block whole.
    TokenCount,
    /// kvroute's epoch rule dropped a late event on this worker touching this prefix
    /// (or a late `clear`), which the peer, having no ordering check, applied.
    StaleEpoch,
    /// The peer dropped a store of this prefix's keys on this worker because the run's
    /// parent block was not indexed there (a hole); kvroute stores keys independently.
    OrphanStore,
    /// A key of this prefix was evicted on this worker while a later key of its chain
    /// stayed resident (a hole). kvroute's walk stops at the hole and resumes if it is
    /// refilled; `RadixTree` drops the chain below it, and `PositionalIndexer`'s jump
    /// search assumes no holes (its documented precondition) and may match across one.
    HoleEvicted,
    /// The prefix reaches a key from a second parent: not a chain, so the peer indexes
    /// that key at one position only.
    ChainFork,
    /// The request's tenant shares with other tenants by a grant; the peer's namespaces
    /// are disjoint.
    SharingGrant,
    /// The known `PositionalIndexer` defect: a `Removed` event aborted at its first
    /// unknown block and kept the event's remaining blocks (docs/peers.md).
    RemovedAbort,
    /// The peer's figure is exactly the walk of a model given every event the peer was
    /// given but no eviction (an `evict`, or a store's 0-token removal): the peer never
    /// hears, or never acts on, evictions (Ray Serve's `PrefixTree`). Protocol peers only.
    EvictUnseen,
    /// Not [`Cause::EvictUnseen`], but the peer's figure is exactly the walk of its
    /// model with one change more: each stored key also makes its chain ancestors
    /// resident on that worker, as a tree whose `insert` marks the whole path from the
    /// root does (Ray Serve's `PrefixTree`). Protocol peers only.
    AncestorsImplied,
    /// None of the above: a difference nobody has explained.
    NewFinding,
}

impl Cause {
    pub const ALL: [Cause; 11] = [
        Cause::PartialBlock,
        Cause::TokenCount,
        Cause::StaleEpoch,
        Cause::OrphanStore,
        Cause::HoleEvicted,
        Cause::ChainFork,
        Cause::SharingGrant,
        Cause::RemovedAbort,
        Cause::EvictUnseen,
        Cause::AncestorsImplied,
        Cause::NewFinding,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cause::PartialBlock => "partial_block",
            Cause::TokenCount => "token_count",
            Cause::StaleEpoch => "stale_epoch",
            Cause::OrphanStore => "orphan_store",
            Cause::HoleEvicted => "hole_evicted",
            Cause::ChainFork => "chain_fork",
            Cause::SharingGrant => "sharing_grant",
            Cause::RemovedAbort => "removed_abort",
            Cause::EvictUnseen => "evict_unseen",
            Cause::AncestorsImplied => "ancestors_implied",
            Cause::NewFinding => "new_finding",
        }
    }

    fn index(self) -> usize {
        Cause::ALL.iter().position(|&c| c == self).unwrap()
    }

    /// The width of this cause's column in the agreement table: 13, or the name's
    /// length when longer (`ancestors_implied`), so the figures stay under their names.
    fn column_width(self) -> usize {
        self.name().len().max(13)
    }
}

/// Which of §12's rules a peer's rows are classified by: how far a hole reaches, and
/// whether the known `PositionalIndexer` defect is a cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// `RadixTree`'s: a worker's own holes only; no `removed_abort`.
    RadixTree,
    /// `PositionalIndexer`'s, the widest: a hole on any worker, and `removed_abort`.
    /// A peer reached over the protocol is classified by these (SPEC.md §15.4).
    Positional,
}

/// One differing row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Which comparison: a peer's name, or `positional_vs_radix_tree`.
    pub comparison: String,
    pub request_id: String,
    pub request_tick: u64,
    pub request_seq: u64,
    pub worker: String,
    /// The reference's figure (kvroute's, or `RadixTree`'s for the cross comparison).
    pub reference_tokens: u64,
    pub peer_tokens: u64,
    pub cause: Cause,
}

/// One comparison's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub comparison: String,
    pub rows_compared: u64,
    pub rows_differing: u64,
    pub by_cause: [u64; Cause::ALL.len()],
}

impl Tally {
    pub fn new(comparison: &str) -> Self {
        Tally {
            comparison: comparison.to_string(),
            rows_compared: 0,
            rows_differing: 0,
            by_cause: [0; Cause::ALL.len()],
        }
    }

    pub fn count(&self, cause: Cause) -> u64 {
        self.by_cause[cause.index()]
    }

    /// This tally's line of [`Report::table`].
    pub fn table_line(&self) -> String {
        let mut out = format!(
            "{:<26} {:>12} {:>10}",
            self.comparison, self.rows_compared, self.rows_differing
        );
        for cause in Cause::ALL {
            let width = cause.column_width();
            out.push_str(&format!(" {:>width$}", self.count(cause)));
        }
        out
    }
}

/// What a comparison found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub workers: usize,
    pub requests: u64,
    pub forked_keys: usize,
    /// One tally per comparison (in-process: kvroute against `radix_tree`, against
    /// `positional`, then `positional_vs_radix_tree`; over the protocol: the peer).
    pub tallies: Vec<Tally>,
    /// The first differences in replay order, at most [`FIRST_DIFFERENCES`].
    pub first: Vec<Difference>,
}

/// How many differences a report keeps (the rest are only counted).
pub const FIRST_DIFFERENCES: usize = 16;

/// The name of the Dynamo-against-Dynamo comparison.
pub const CROSS: &str = "positional_vs_radix_tree";

impl Report {
    pub fn tally(&self, comparison: &str) -> &Tally {
        self.tallies
            .iter()
            .find(|t| t.comparison == comparison)
            .expect("the report has this comparison")
    }

    /// Rows no documented cause explains, over all comparisons.
    pub fn new_findings(&self) -> u64 {
        self.tallies
            .iter()
            .map(|t| t.count(Cause::NewFinding))
            .sum()
    }

    /// The agreement table, one line per comparison.
    pub fn table(&self) -> String {
        let mut out = table_header();
        for t in &self.tallies {
            out.push_str(&t.table_line());
            out.push('\n');
        }
        out
    }
}

/// The agreement table's header line, newline included.
pub fn table_header() -> String {
    let mut out = format!("{:<26} {:>12} {:>10}", "comparison", "rows", "differing");
    for cause in Cause::ALL {
        let width = cause.column_width();
        out.push_str(&format!(" {:>width$}", cause.name()));
    }
    out.push('\n');
    out
}

/// Per worker, the `(namespace, key)`s an event named, for one cause.
pub struct KeySets(Vec<HashSet<(NsId, KeyId)>>);

impl KeySets {
    pub fn new(workers: usize) -> Self {
        KeySets(vec![HashSet::new(); workers])
    }

    pub fn add_op(&mut self, worker: u32, op: &Op) {
        let set = &mut self.0[worker as usize];
        match op {
            Op::Store { ns, segments } => set.extend(segments.iter().map(|s| (*ns, s.key))),
            Op::Evict { ns, keys } => set.extend(keys.iter().map(|&k| (*ns, k))),
            Op::Clear => {}
        }
    }

    fn touches(&self, worker: usize, request: &Req) -> bool {
        let set = &self.0[worker];
        !set.is_empty()
            && request
                .prefix
                .iter()
                .any(|s| set.contains(&(request.ns, s.key)))
    }
}

/// The evidence one peer's rows are classified with: the stores and removals it
/// rejected (Dynamo's own answers in-process, a [`crate::chains::ChainModel`]'s over
/// the protocol).
pub struct PeerEvidence {
    rejected_stores: KeySets,
    rejected_removals: KeySets,
}

impl PeerEvidence {
    pub fn new(workers: usize) -> Self {
        PeerEvidence {
            rejected_stores: KeySets::new(workers),
            rejected_removals: KeySets::new(workers),
        }
    }

    /// Notes what the peer did with cache operation `op` of `worker`.
    pub fn note(&mut self, worker: u32, op: &Op, applied: Applied) {
        match applied {
            Applied::ParentNotFound => self.rejected_stores.add_op(worker, op),
            Applied::BlockNotFound => self.rejected_removals.add_op(worker, op),
            Applied::Applied | Applied::StaleEpoch => {}
        }
    }
}

/// The trace cut to what a chain indexer can express (see [`Options::full_blocks_only`]).
pub fn full_blocks_view(trace: &Trace, block_tokens: u64) -> Trace {
    let mut whole: HashSet<(&str, &str, &str, &str)> = HashSet::new();
    let mut out = trace.clone();
    for worker in &mut out.workers {
        worker.cache.retain(|e| e.tokens == block_tokens);
    }
    for worker in &trace.workers {
        for e in worker.cache.iter().filter(|e| e.tokens == block_tokens) {
            let ns = &e.namespace;
            whole.insert((&ns.tenant, &ns.model, &ns.adapter, &e.key));
        }
    }
    for event in &trace.events {
        if let EventKind::Cache {
            op: CacheOp::Store {
                namespace,
                segments,
            },
            ..
        } = &event.kind
        {
            for s in segments.iter().filter(|s| s.tokens == block_tokens) {
                whole.insert((
                    &namespace.tenant,
                    &namespace.model,
                    &namespace.adapter,
                    &s.key,
                ));
            }
        }
    }
    for event in &mut out.events {
        match &mut event.kind {
            EventKind::Cache { op, .. } => match op {
                CacheOp::Store { segments, .. } => segments.retain(|s| s.tokens == block_tokens),
                CacheOp::Evict { namespace, keys } => {
                    let ns = namespace.clone();
                    keys.retain(|k| whole.contains(&(&ns.tenant, &ns.model, &ns.adapter, k)));
                }
                CacheOp::Clear => {}
            },
            EventKind::Request(request) => {
                let full = request
                    .prefix
                    .iter()
                    .take_while(|s| s.tokens == block_tokens)
                    .count();
                request.prefix.truncate(full);
            }
            EventKind::Load { .. } => {}
        }
    }
    out
}

/// How many leading segments of a prefix are whole blocks of `block_tokens`: what a
/// chain indexer's request side hashes.
pub fn full_block_count(prefix: &[Seg], block_tokens: u64) -> usize {
    prefix
        .iter()
        .take_while(|s| s.tokens == block_tokens)
        .count()
}

/// The tokens of the request's leading whole blocks that fit in `reuse_tokens`.
fn whole_block_part(prefix: &[Seg], block_tokens: u64, reuse_tokens: u64) -> u64 {
    let mut sum = 0;
    for s in &prefix[..full_block_count(prefix, block_tokens)] {
        if sum + s.tokens > reuse_tokens {
            break;
        }
        sum += s.tokens;
    }
    sum
}

/// What two kinds of peer that learn residency otherwise than kvroute would hold, kept
/// for a peer reached over the protocol (SPEC.md §12, `evict_unseen` and
/// `ancestors_implied`). Each model is kvroute's own index and walk (§3.2, §4.3), given
/// exactly the cache events the peer was given, in the order it was given them and
/// with no epoch rule (each event takes its worker's next epoch, as the peer has no
/// ordering check), and:
///
/// - `evictions_unseen`: no eviction is applied (an `evict`, or a store's 0-token
///   segment, which kvroute reads as a removal); stores and clears are.
/// - `ancestors`: the same, and before each store every chain ancestor (the peer's
///   positions, §15.2) of a key it stores with tokens, and that the store does not
///   itself name, is made resident on the worker with the tokens of the ancestor's
///   first occurrence in what the peer was sent (raised to them when held with fewer):
///   what a tree whose insert walks from the root and marks every node it passes holds.
///
/// Memory is two more copies of kvroute's cache state and one token count per key.
struct PeerModels<'t> {
    evictions_unseen: KvrouteIndex<'t>,
    ancestors: KvrouteIndex<'t>,
    /// Per worker, the last epoch the models were given: each event takes two (an
    /// implied store, then the event itself), so every one is applied.
    epochs: Vec<u64>,
    /// `(namespace, key)` → the tokens of its first occurrence among the requests,
    /// stores (segments with tokens) and initial caches the peer was sent. Lookups
    /// only: never iterated.
    first_tokens: HashMap<(NsId, KeyId), u64>,
    /// Whether `walks` holds the current request's answers.
    walked: bool,
    /// The current request's walk of each model, one slot per worker, in the order
    /// `evictions_unseen`, `ancestors`.
    walks: [Vec<u64>; 2],
    sparse: Vec<(u32, u64)>,
}

impl<'t> PeerModels<'t> {
    fn new(compiled: &Compiled<'t>) -> Self {
        let workers = compiled.worker_count();
        let mut first_tokens = HashMap::new();
        for worker in &compiled.workers {
            for &(ns, key, tokens) in &worker.cache {
                if tokens > 0 {
                    first_tokens.entry((ns, key)).or_insert(tokens);
                }
            }
        }
        PeerModels {
            evictions_unseen: KvrouteIndex::new(compiled),
            ancestors: KvrouteIndex::new(compiled),
            epochs: compiled.workers.iter().map(|w| w.epoch).collect(),
            first_tokens,
            walked: false,
            walks: [vec![0; workers], vec![0; workers]],
            sparse: Vec::new(),
        }
    }

    /// Gives the models one cache operation the peer was given.
    fn cache_event(&mut self, shape: &ChainShape, worker: u32, tick: u64, op: &Op) {
        if let Op::Store { ns, segments } = op {
            for s in segments.iter().filter(|s| s.tokens > 0) {
                self.first_tokens.entry((*ns, s.key)).or_insert(s.tokens);
            }
        }
        let epoch = &mut self.epochs[worker as usize];
        let (implied_epoch, op_epoch) = (*epoch + 1, *epoch + 2);
        *epoch += 2;
        let Some(op) = without_evictions(op) else {
            return;
        };
        self.evictions_unseen
            .apply_cache_event(worker, tick, op_epoch, &op);
        let implied = implied_ancestors(&self.ancestors, &self.first_tokens, shape, worker, &op);
        if let Some(implied) = implied {
            self.ancestors
                .apply_cache_event(worker, tick, implied_epoch, &implied);
        }
        self.ancestors
            .apply_cache_event(worker, tick, op_epoch, &op);
    }

    /// Notes a request the peer was sent: its keys' first occurrences, and that the
    /// walks are to be made again.
    fn request(&mut self, request: &Req) {
        for s in &request.prefix {
            self.first_tokens
                .entry((request.ns, s.key))
                .or_insert(s.tokens);
        }
        self.walked = false;
    }

    /// The two models' walks of `request`, walked once per request.
    fn walks(&mut self, request: &Req) -> &[Vec<u64>; 2] {
        if !self.walked {
            for (index, walk) in [&mut self.evictions_unseen, &mut self.ancestors]
                .into_iter()
                .zip(&mut self.walks)
            {
                index.reuse_tokens(request, &mut self.sparse);
                densify(&self.sparse, walk);
            }
            self.walked = true;
        }
        &self.walks
    }
}

/// `op` without its evictions: `None` for an `evict`, a store without its 0-token
/// segments (`None` when nothing is left), a `clear` as it is.
fn without_evictions(op: &Op) -> Option<Op> {
    match op {
        Op::Evict { .. } => None,
        Op::Store { ns, segments } => {
            let kept: Vec<Seg> = segments.iter().copied().filter(|s| s.tokens > 0).collect();
            (!kept.is_empty()).then_some(Op::Store {
                ns: *ns,
                segments: kept,
            })
        }
        Op::Clear => Some(Op::Clear),
    }
}

/// The store of the chain ancestors `op` implies on `worker` in `index` (see
/// [`PeerModels`]), or `None` when it implies none the worker lacks. Ancestors are
/// listed once each, in the order the store's segments reach them.
fn implied_ancestors(
    index: &KvrouteIndex,
    first_tokens: &HashMap<(NsId, KeyId), u64>,
    shape: &ChainShape,
    worker: u32,
    op: &Op,
) -> Option<Op> {
    let Op::Store { ns, segments } = op else {
        return None;
    };
    let stored: HashSet<KeyId> = segments
        .iter()
        .filter(|s| s.tokens > 0)
        .map(|s| s.key)
        .collect();
    let cache = &index.state().cache;
    let mut implied: Vec<Seg> = Vec::new();
    for s in segments.iter().filter(|s| s.tokens > 0) {
        let mut at = shape.parent(*ns, s.key);
        while let Some(ancestor) = at {
            at = shape.parent(*ns, ancestor);
            if stored.contains(&ancestor) || implied.iter().any(|i| i.key == ancestor) {
                continue;
            }
            let Some(&tokens) = first_tokens.get(&(*ns, ancestor)) else {
                continue;
            };
            let held = cache
                .holders(ancestor)
                .iter()
                .find(|h| h.worker == worker && h.ns == *ns)
                .map_or(0, |h| h.tokens);
            if held < tokens {
                implied.push(Seg {
                    key: ancestor,
                    tokens,
                });
            }
        }
    }
    (!implied.is_empty()).then_some(Op::Store {
        ns: *ns,
        segments: implied,
    })
}

/// kvroute's side of a comparison: its answers, and the evidence about what the peer
/// was given.
pub struct Reference<'c, 't> {
    compiled: &'c Compiled<'t>,
    shape: &'c ChainShape,
    options: Options,
    kvroute: KvrouteIndex<'t>,
    /// What the peer was given, as kvroute's cache would hold it with no epoch rule
    /// (each event takes the worker's next epoch): where the holes in its chains are.
    delivered: KvrouteIndex<'t>,
    delivered_epochs: Vec<u64>,
    stale: KeySets,
    stale_clear: Vec<bool>,
    holes: KeySets,
    sparse: Vec<(u32, u64)>,
    answer: Vec<u64>,
    /// Only for a peer reached over the protocol ([`Reference::with_peer_models`]).
    models: Option<PeerModels<'t>>,
}

impl<'c, 't> Reference<'c, 't> {
    pub fn new(compiled: &'c Compiled<'t>, shape: &'c ChainShape, options: Options) -> Self {
        let workers = compiled.worker_count();
        Reference {
            compiled,
            shape,
            options,
            kvroute: KvrouteIndex::new(compiled),
            delivered: KvrouteIndex::new(compiled),
            delivered_epochs: compiled.workers.iter().map(|w| w.epoch).collect(),
            stale: KeySets::new(workers),
            stale_clear: vec![false; workers],
            holes: KeySets::new(workers),
            sparse: Vec::new(),
            answer: vec![0; workers],
            models: None,
        }
    }

    /// Also keeps the models `evict_unseen` and `ancestors_implied` are checked against
    /// (SPEC.md §12): for a peer reached over the protocol, whose handling of evictions
    /// and stores is not known. The in-process Dynamo comparison does not: Dynamo is
    /// given every `Removed` and drops orphan stores, so a row of its that fits either
    /// model is a defect of Dynamo's (`removed_abort` is one) and stays a finding.
    pub fn with_peer_models(mut self) -> Self {
        self.models = Some(PeerModels::new(self.compiled));
        self
    }

    /// Applies a cache event to kvroute and notes it as given to the peer, unless
    /// `withhold_stale` and kvroute dropped it: then `false`, and the peer must not be
    /// given it.
    pub fn cache_event(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> bool {
        let applied = self.kvroute.apply_cache_event(worker, tick, epoch, op);
        if applied == Applied::StaleEpoch {
            if self.options.withhold_stale {
                return false;
            }
            self.stale.add_op(worker, op);
            if matches!(op, Op::Clear) {
                self.stale_clear[worker as usize] = true;
            }
        }
        let next_epoch = &mut self.delivered_epochs[worker as usize];
        *next_epoch += 1;
        self.delivered
            .apply_cache_event(worker, tick, *next_epoch, op);
        if let Some(models) = &mut self.models {
            models.cache_event(self.shape, worker, tick, op);
        }
        if let Op::Evict { ns, keys } = op {
            let cache = &self.delivered.state().cache;
            for &key in keys {
                let hole = self.shape.children(*ns, key).iter().any(|&child| {
                    cache
                        .holders(child)
                        .iter()
                        .any(|h| h.worker == worker && h.ns == *ns)
                });
                if hole {
                    self.holes.0[worker as usize].insert((*ns, key));
                }
            }
        }
        true
    }

    /// kvroute's answer to `request`, one slot per worker.
    /// Call it for every request, before any [`Reference::cause`] of that request.
    pub fn answer(&mut self, request: &Req) -> &[u64] {
        if let Some(models) = &mut self.models {
            models.request(request);
        }
        self.kvroute.reuse_tokens(request, &mut self.sparse);
        densify(&self.sparse, &mut self.answer);
        &self.answer
    }

    /// The first documented cause that explains `kvroute ≠ peer` on worker `w`, tried in
    /// SPEC.md §12's order: the evidence rules of the causes an indexer given every
    /// event has, then (with [`Reference::with_peer_models`]) the two exact model
    /// rules, so that those can only take a row that would otherwise be a finding.
    pub fn cause(
        &mut self,
        rules: Rules,
        evidence: &PeerEvidence,
        request: &Req,
        w: usize,
        kvroute: u64,
        peer: u64,
    ) -> Cause {
        let whole = whole_block_part(&request.prefix, self.options.block_tokens, kvroute);
        if kvroute > peer && whole == peer {
            return Cause::PartialBlock;
        }
        if peer > kvroute && whole != kvroute {
            return Cause::TokenCount;
        }
        if self.stale_clear[w] || self.stale.touches(w, request) {
            return Cause::StaleEpoch;
        }
        if rules == Rules::Positional
            && self.options.known_findings
            && peer > kvroute
            && rejected_removal_anywhere(evidence, request)
        {
            return Cause::RemovedAbort;
        }
        if peer < kvroute && evidence.rejected_stores.touches(w, request) {
            return Cause::OrphanStore;
        }
        if self.hole_seen_by(rules, request, w) {
            return Cause::HoleEvicted;
        }
        if self.forked(request) {
            return Cause::ChainFork;
        }
        if peer < kvroute && self.shares_across_tenants(request) {
            return Cause::SharingGrant;
        }
        if let Some(models) = &mut self.models {
            let [evictions_unseen, ancestors] = models.walks(request);
            if peer == evictions_unseen[w] {
                return Cause::EvictUnseen;
            }
            if peer == ancestors[w] {
                return Cause::AncestorsImplied;
            }
        }
        Cause::NewFinding
    }

    /// Why `PositionalIndexer` differs from `RadixTree` on worker `w`.
    pub fn cross_cause(
        &self,
        positional: &PeerEvidence,
        request: &Req,
        w: usize,
        radix: u64,
        pos: u64,
    ) -> Cause {
        if self.options.known_findings
            && pos > radix
            && rejected_removal_anywhere(positional, request)
        {
            return Cause::RemovedAbort;
        }
        if self.hole_seen_by(Rules::Positional, request, w) {
            return Cause::HoleEvicted;
        }
        if self.forked(request) {
            return Cause::ChainFork;
        }
        Cause::NewFinding
    }

    /// Whether a hole touching this prefix can reach worker `w`'s answer: its own holes
    /// for `RadixTree`; any worker's for `PositionalIndexer`, whose jump search takes
    /// "as many workers hold the block at the jump target as are still matching" for
    /// "the same workers", so one worker's hole moves another's figure.
    fn hole_seen_by(&self, rules: Rules, request: &Req, w: usize) -> bool {
        match rules {
            Rules::RadixTree => self.holes.touches(w, request),
            Rules::Positional => (0..self.holes.0.len()).any(|v| self.holes.touches(v, request)),
        }
    }

    fn forked(&self, request: &Req) -> bool {
        request
            .prefix
            .iter()
            .any(|s| self.shape.is_forked(request.ns, s.key))
    }

    fn shares_across_tenants(&self, request: &Req) -> bool {
        let ns = &self.compiled.tables.namespaces[request.ns as usize];
        self.compiled.sharing.iter().any(|g| {
            g.model == ns.model
                && g.adapter == ns.adapter
                && g.tenants.contains(&ns.tenant)
                && g.tenants.iter().any(|t| *t != ns.tenant)
        })
    }
}

/// Whether a removal the peer rejected, on any worker, named a key of this prefix: the
/// blocks `PositionalIndexer` kept move the worker's own figure, and through the jump
/// search's count shortcut other workers' too.
fn rejected_removal_anywhere(evidence: &PeerEvidence, request: &Req) -> bool {
    (0..evidence.rejected_removals.0.len()).any(|v| evidence.rejected_removals.touches(v, request))
}

/// Counts one row into `tally`, and keeps it among the first differences when it
/// differs.
#[allow(clippy::too_many_arguments)]
pub fn record(
    tally: &mut Tally,
    first: &mut Vec<Difference>,
    event: &CEvent,
    compiled: &Compiled,
    request: &Req,
    w: usize,
    reference_tokens: u64,
    peer_tokens: u64,
    cause: Option<Cause>,
) {
    tally.rows_compared += 1;
    let Some(cause) = cause else { return };
    tally.rows_differing += 1;
    tally.by_cause[cause.index()] += 1;
    if first.len() < FIRST_DIFFERENCES {
        first.push(Difference {
            comparison: tally.comparison.clone(),
            request_id: request.id.to_string(),
            request_tick: event.tick,
            request_seq: event.seq,
            worker: compiled.worker_ids[w].to_string(),
            reference_tokens,
            peer_tokens,
            cause,
        });
    }
}

#[cfg(test)]
mod tests {
    //! The two model rules on hand-built traces, with a fake peer's figures put to
    //! [`Reference::cause`] directly.

    use super::*;
    use crate::run::withheld;
    use serde_json::{json, Value};

    fn request(seq: u64, id: &str, keys: &[&str]) -> Value {
        let prefix: Vec<Value> = keys
            .iter()
            .map(|k| json!({"key": k, "tokens": 16}))
            .collect();
        json!({"seq": seq, "tick": seq, "type": "request", "id": id, "tenant": "t",
            "model": "m", "adapter": "base", "prefix": prefix, "prompt_tokens": 80,
            "decode_tokens": 4})
    }

    fn store(seq: u64, worker: &str, epoch: u64, keys: &[&str]) -> Value {
        let segments: Vec<Value> = keys
            .iter()
            .map(|k| json!({"key": k, "tokens": 16}))
            .collect();
        json!({"seq": seq, "tick": seq, "type": "cache", "op": "store", "worker": worker,
            "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base",
            "segments": segments})
    }

    fn evict(seq: u64, worker: &str, epoch: u64, keys: &[&str]) -> Value {
        json!({"seq": seq, "tick": seq, "type": "cache", "op": "evict", "worker": worker,
            "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base", "keys": keys})
    }

    fn trace(events: Vec<Value>) -> Trace {
        let workers: Vec<Value> = ["w0", "w1"]
            .iter()
            .map(|id| {
                json!({"id": id, "model": "m", "adapters": [], "prefill_rate": 16,
                    "decode_rate": 4, "queued_prefill": 0, "active_decode": 0,
                    "observed_tick": 0, "epoch": 0, "cache": []})
            })
            .collect();
        let value = json!({"format": "kvroute-trace/1", "limits": "lab",
            "policy": {"decode_weight_milli": 1000, "freshness_ticks": null,
                "imbalance_penalty_milli": 0, "max_queued_work": null},
            "sharing": [], "workers": workers, "events": events});
        kvroute_core::parse_trace(value.to_string().as_bytes()).expect("a valid trace")
    }

    /// Replays `trace` as `peer run` does and returns, for the last request, kvroute's
    /// figure on each worker and the cause each of `peer`'s figures `(worker, tokens)`
    /// gets (`None` when it equals kvroute's), with the protocol's models or without
    /// them (the in-process comparison).
    fn causes(
        trace: &Trace,
        models: bool,
        peer: &[(usize, u64)],
    ) -> (Vec<u64>, Vec<Option<Cause>>) {
        let options = Options {
            block_tokens: 16,
            ..Options::default()
        };
        let compiled = Compiled::new(trace);
        let shape = ChainShape::streamed(&compiled, &withheld(&compiled, options));
        let mut reference = Reference::new(&compiled, &shape, options);
        if models {
            reference = reference.with_peer_models();
        }
        let mut chain_model = crate::chains::ChainModel::new(&compiled, &shape);
        let mut evidence = PeerEvidence::new(compiled.worker_count());
        let mut last = None;
        for event in &compiled.events {
            match &event.step {
                kvroute_core::route::Step::Cache { worker, epoch, op } => {
                    if reference.cache_event(*worker, event.tick, *epoch, op) {
                        let applied = chain_model.apply(*worker as usize, &shape, op);
                        evidence.note(*worker, op, applied);
                    }
                }
                kvroute_core::route::Step::Request(request) => {
                    let kvroute = reference.answer(request).to_vec();
                    let found: Vec<Option<Cause>> = peer
                        .iter()
                        .map(|&(w, p)| {
                            (kvroute[w] != p).then(|| {
                                reference.cause(
                                    Rules::Positional,
                                    &evidence,
                                    request,
                                    w,
                                    kvroute[w],
                                    p,
                                )
                            })
                        })
                        .collect();
                    last = Some((kvroute, found));
                }
                kvroute_core::route::Step::Load { .. } => {}
            }
        }
        last.expect("the trace has a request")
    }

    #[test]
    fn a_peer_that_keeps_what_an_evict_removed_is_evict_unseen() {
        // w0 stores k0 k1 and evicts k1: kvroute reuses 16 tokens of r2 on w0; a peer
        // that never applied the evict holds both (32).
        let trace = trace(vec![
            request(1, "r1", &["k0", "k1"]),
            store(2, "w0", 1, &["k0", "k1"]),
            evict(3, "w0", 2, &["k1"]),
            request(4, "r2", &["k0", "k1"]),
        ]);
        let (kvroute, found) = causes(&trace, true, &[(0, 32), (0, 16), (0, 48), (1, 16)]);
        assert_eq!(kvroute, vec![16, 0]);
        assert_eq!(
            found,
            vec![
                Some(Cause::EvictUnseen),
                None,
                // More than any model holds: nothing explains it.
                Some(Cause::NewFinding),
                // w1 holds nothing in any model.
                Some(Cause::NewFinding),
            ]
        );
        // In-process (no models) the same figure is a finding.
        let (_, found) = causes(&trace, false, &[(0, 32)]);
        assert_eq!(found, vec![Some(Cause::NewFinding)]);
    }

    #[test]
    fn a_peer_that_holds_a_stored_keys_ancestors_is_ancestors_implied() {
        // w1 stores only k1, whose chain parent is k0: kvroute's walk of [k0, k1] on w1
        // stops at k0 (0 tokens); a tree whose insert marks the path holds both (32).
        let trace = trace(vec![
            request(1, "r1", &["k0", "k1"]),
            store(2, "w1", 1, &["k1"]),
            request(3, "r2", &["k0", "k1"]),
        ]);
        let (kvroute, found) = causes(&trace, true, &[(1, 32), (1, 16), (1, 48)]);
        assert_eq!(kvroute, vec![0, 0]);
        assert_eq!(
            found,
            vec![
                Some(Cause::AncestorsImplied),
                // Only k0 (the walk of no model): a finding.
                Some(Cause::NewFinding),
                Some(Cause::NewFinding),
            ]
        );
        let (_, found) = causes(&trace, false, &[(1, 32)]);
        assert_eq!(found, vec![Some(Cause::NewFinding)]);
    }

    #[test]
    fn an_ancestor_held_with_fewer_tokens_is_raised_by_the_implication() {
        // r1 names k0 and k1 with 16 tokens each (their first occurrences). w1 stores
        // k0 with 8 tokens, then k1 alone, then evicts both: kvroute holds nothing
        // (0). Without the evict, k0 with 8 and k1: the walk stops inside k0, 8
        // (`evict_unseen`). A tree whose insert marks k1's path holds k0 whole again
        // too: 32 (`ancestors_implied`), since an ancestor held with fewer tokens than
        // its first occurrence is raised to them, not only a missing one added.
        let mut short_k0 = store(2, "w1", 1, &["k0"]);
        short_k0["segments"][0]["tokens"] = json!(8);
        let trace = trace(vec![
            request(1, "r1", &["k0", "k1"]),
            short_k0,
            store(3, "w1", 2, &["k1"]),
            evict(4, "w1", 3, &["k0", "k1"]),
            request(5, "r2", &["k0", "k1"]),
        ]);
        let (kvroute, found) = causes(&trace, true, &[(1, 32), (1, 8), (1, 24)]);
        assert_eq!(kvroute, vec![0, 0]);
        assert_eq!(
            found,
            vec![
                Some(Cause::AncestorsImplied),
                Some(Cause::EvictUnseen),
                Some(Cause::NewFinding),
            ]
        );
    }

    #[test]
    fn ancestors_implied_is_named_only_where_the_implication_is_needed() {
        // Chain k0 k1 k2 k3. w0 stores k0 k1, evicts k1 (a leaf then: no hole), then
        // stores only k3. kvroute holds k0 k3: 16 tokens of [k0 k1 k2 k3]. Without the
        // evict, k0 k1 k3: 32 (`evict_unseen`); with k3's ancestors k1 k2 implied as
        // well, all four: 64 (`ancestors_implied`).
        let trace = trace(vec![
            request(1, "r1", &["k0", "k1", "k2", "k3"]),
            store(2, "w0", 1, &["k0", "k1"]),
            evict(3, "w0", 2, &["k1"]),
            store(4, "w0", 3, &["k3"]),
            request(5, "r2", &["k0", "k1", "k2", "k3"]),
        ]);
        let (kvroute, found) = causes(&trace, true, &[(0, 32), (0, 64), (0, 48), (0, 80)]);
        assert_eq!(kvroute, vec![16, 0]);
        assert_eq!(
            found,
            vec![
                Some(Cause::EvictUnseen),
                Some(Cause::AncestorsImplied),
                Some(Cause::NewFinding),
                Some(Cause::NewFinding),
            ]
        );
    }

    #[test]
    fn an_earlier_cause_keeps_its_rows() {
        // A late store kvroute drops (epoch 1 after epoch 2) that the peer was given:
        // the row is `stale_epoch` even though the no-eviction model fits it too.
        let trace = trace(vec![
            request(1, "r1", &["k0"]),
            store(2, "w0", 2, &["k1"]),
            store(3, "w0", 1, &["k0"]),
            request(4, "r2", &["k0"]),
        ]);
        let (kvroute, found) = causes(&trace, true, &[(0, 16)]);
        assert_eq!(kvroute, vec![0, 0]);
        assert_eq!(found, vec![Some(Cause::StaleEpoch)]);
    }
}
