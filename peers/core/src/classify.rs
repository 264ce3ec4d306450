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
//! over the protocol use this same code.

use crate::chains::ChainShape;
use crate::kvroute::KvrouteIndex;
use crate::{densify, Applied, Peer};
use kvroute_core::input::trace::{CacheOp, EventKind, Trace};
use kvroute_core::route::compiled::{CEvent, Compiled, KeyId, NsId, Op, Req, Seg};
use std::collections::HashSet;

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
    /// None of the above: a difference nobody has explained.
    NewFinding,
}

impl Cause {
    pub const ALL: [Cause; 9] = [
        Cause::PartialBlock,
        Cause::TokenCount,
        Cause::StaleEpoch,
        Cause::OrphanStore,
        Cause::HoleEvicted,
        Cause::ChainFork,
        Cause::SharingGrant,
        Cause::RemovedAbort,
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
            Cause::NewFinding => "new_finding",
        }
    }

    fn index(self) -> usize {
        Cause::ALL.iter().position(|&c| c == self).unwrap()
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
            out.push_str(&format!(" {:>13}", self.count(cause)));
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
        out.push_str(&format!(" {:>13}", cause.name()));
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
        }
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
    pub fn answer(&mut self, request: &Req) -> &[u64] {
        self.kvroute.reuse_tokens(request, &mut self.sparse);
        densify(&self.sparse, &mut self.answer);
        &self.answer
    }

    /// The first documented cause that explains `kvroute ≠ peer` on worker `w`.
    pub fn cause(
        &self,
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
