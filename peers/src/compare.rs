//! One trace replayed into kvroute and every Dynamo indexer at once, with every
//! differing `(request, worker)` row explained.
//!
//! kvroute is the reference: each cache event goes to [`KvrouteIndex`] first, then (unless
//! `withhold_stale` and kvroute dropped it) to each Dynamo indexer in the same order.
//! At each request every indexer answers for every worker, and a row on which a peer
//! differs from kvroute gets the first [`Cause`] that applies. The causes other than
//! [`Cause::NewFinding`] are the documented differences of SPEC.md's "Peers" section
//! (and the known Dynamo defect, when `known_findings` is on); each is checked against
//! the row's own evidence (its figures, or the keys of its prefix that an event the
//! cause names touched on that worker), not against the trace as a whole.

use crate::chains::ChainMap;
use crate::dynamo::{full_block_count, DynamoIndex, DynamoKind};
use crate::kvroute::KvrouteIndex;
use crate::{densify, Applied, Peer};
use kvroute_core::input::trace::{CacheOp, EventKind, Trace};
use kvroute_core::route::compiled::{Compiled, KeyId, NsId, Op, Req, Seg, Step};
use std::collections::HashSet;

/// How a comparison runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Tokens of a whole block: the request side of Dynamo hashes only these.
    pub block_tokens: u64,
    /// Compare on the trace cut to what Dynamo can express: stores and initial caches
    /// keep whole blocks only, prefixes stop at their first partial segment, and
    /// evictions name only keys that were ever whole blocks.
    pub full_blocks_only: bool,
    /// Give Dynamo only the cache events kvroute's epoch rule applied.
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
    /// segment; Dynamo counts whole blocks only (kvroute is higher by less than a block).
    PartialBlock,
    /// kvroute stopped inside a block stored with fewer tokens than the request's
    /// segment; Dynamo has no token counts and counted the block whole.
    TokenCount,
    /// kvroute's epoch rule dropped a late event on this worker touching this prefix
    /// (or a late `clear`), which Dynamo, having no ordering check, applied.
    StaleEpoch,
    /// Dynamo dropped a store of this prefix's keys on this worker because the run's
    /// parent block was not indexed there (a hole); kvroute stores keys independently.
    OrphanStore,
    /// A key of this prefix was evicted on this worker while a later key of its chain
    /// stayed resident (a hole). kvroute's walk stops at the hole and resumes if it is
    /// refilled; `RadixTree` drops the chain below it, and `PositionalIndexer`'s jump
    /// search assumes no holes (its documented precondition) and may match across one.
    HoleEvicted,
    /// The prefix reaches a key from a second parent: not a chain, so Dynamo indexes
    /// that key at one position only.
    ChainFork,
    /// The request's tenant shares with other tenants by a grant; Dynamo's namespaces
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

/// One differing row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Which comparison: a peer's name, or `positional_vs_radix_tree`.
    pub comparison: &'static str,
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
    pub comparison: &'static str,
    pub rows_compared: u64,
    pub rows_differing: u64,
    pub by_cause: [u64; Cause::ALL.len()],
}

impl Tally {
    fn new(comparison: &'static str) -> Self {
        Tally {
            comparison,
            rows_compared: 0,
            rows_differing: 0,
            by_cause: [0; Cause::ALL.len()],
        }
    }

    pub fn count(&self, cause: Cause) -> u64 {
        self.by_cause[cause.index()]
    }
}

/// What a comparison found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub workers: usize,
    pub requests: u64,
    pub forked_keys: usize,
    /// kvroute against `radix_tree`, kvroute against `positional`, then
    /// `positional_vs_radix_tree` (Dynamo against itself).
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
            .expect("every report has the three comparisons")
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
        let mut out = format!("{:<26} {:>12} {:>10}", "comparison", "rows", "differing");
        for cause in Cause::ALL {
            out.push_str(&format!(" {:>13}", cause.name()));
        }
        out.push('\n');
        for t in &self.tallies {
            out.push_str(&format!(
                "{:<26} {:>12} {:>10}",
                t.comparison, t.rows_compared, t.rows_differing
            ));
            for cause in Cause::ALL {
                out.push_str(&format!(" {:>13}", t.count(cause)));
            }
            out.push('\n');
        }
        out
    }
}

/// Per worker, the `(namespace, key)`s an event named, for one cause.
struct KeySets(Vec<HashSet<(NsId, KeyId)>>);

impl KeySets {
    fn new(workers: usize) -> Self {
        KeySets(vec![HashSet::new(); workers])
    }

    fn add_op(&mut self, worker: u32, op: &Op) {
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

/// The evidence one Dynamo indexer's rows are classified with.
struct PeerEvidence {
    rejected_stores: KeySets,
    rejected_removals: KeySets,
}

/// The trace cut to what Dynamo can express (see [`Options::full_blocks_only`]).
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

/// Replays `trace` (already validated) into kvroute and both Dynamo indexers.
pub fn compare(trace: &Trace, options: Options) -> Report {
    let view;
    let trace = if options.full_blocks_only {
        view = full_blocks_view(trace, options.block_tokens);
        &view
    } else {
        trace
    };
    let compiled = Compiled::new(trace);
    let chains = ChainMap::new(&compiled);
    let workers = compiled.worker_count();
    let mut kvroute = KvrouteIndex::new(&compiled);
    // What Dynamo was given, as kvroute's cache would hold it with no epoch rule
    // (each event takes the worker's next epoch): where the holes in Dynamo's chains are.
    let mut delivered = KvrouteIndex::new(&compiled);
    let mut delivered_epochs: Vec<u64> = compiled.workers.iter().map(|w| w.epoch).collect();
    let mut dynamo: Vec<DynamoIndex> = DynamoKind::ALL
        .iter()
        .map(|&kind| DynamoIndex::new(kind, &compiled, chains.clone(), options.block_tokens))
        .collect();
    let mut evidence: Vec<PeerEvidence> = dynamo
        .iter()
        .map(|_| PeerEvidence {
            rejected_stores: KeySets::new(workers),
            rejected_removals: KeySets::new(workers),
        })
        .collect();
    let mut stale = KeySets::new(workers);
    let mut stale_clear = vec![false; workers];
    let mut holes = KeySets::new(workers);
    let mut tallies: Vec<Tally> = dynamo
        .iter()
        .map(|d| Tally::new(d.name()))
        .chain([Tally::new(CROSS)])
        .collect();
    let mut first = Vec::new();
    let mut requests = 0;
    let mut sparse = Vec::new();
    let mut reference = vec![0u64; workers];
    let mut answers = vec![vec![0u64; workers]; dynamo.len()];

    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                let applied = kvroute.apply_cache_event(*worker, event.tick, *epoch, op);
                if applied == Applied::StaleEpoch {
                    if options.withhold_stale {
                        continue;
                    }
                    stale.add_op(*worker, op);
                    if matches!(op, Op::Clear) {
                        stale_clear[*worker as usize] = true;
                    }
                }
                let next_epoch = &mut delivered_epochs[*worker as usize];
                *next_epoch += 1;
                delivered.apply_cache_event(*worker, event.tick, *next_epoch, op);
                if let Op::Evict { ns, keys } = op {
                    note_holes(&delivered, &chains, &mut holes, *worker, *ns, keys);
                }
                for (peer, evidence) in dynamo.iter_mut().zip(&mut evidence) {
                    match peer.apply_cache_event(*worker, event.tick, *epoch, op) {
                        Applied::ParentNotFound => evidence.rejected_stores.add_op(*worker, op),
                        Applied::BlockNotFound => evidence.rejected_removals.add_op(*worker, op),
                        Applied::Applied | Applied::StaleEpoch => {}
                    }
                }
            }
            Step::Load { .. } => {}
            Step::Request(request) => {
                requests += 1;
                kvroute.reuse_tokens(request, &mut sparse);
                densify(&sparse, &mut reference);
                for (peer, answer) in dynamo.iter_mut().zip(&mut answers) {
                    peer.reuse_tokens(request, &mut sparse);
                    densify(&sparse, answer);
                }
                let row = RowContext {
                    compiled: &compiled,
                    chains: &chains,
                    options,
                    request,
                    stale: &stale,
                    stale_clear: &stale_clear,
                    holes: &holes,
                };
                for (p, peer) in dynamo.iter().enumerate() {
                    for w in 0..workers {
                        let (kv, d) = (reference[w], answers[p][w]);
                        let cause =
                            (kv != d).then(|| row.cause(peer.kind(), &evidence[p], w, kv, d));
                        record(
                            &mut tallies[p],
                            &mut first,
                            event,
                            &compiled,
                            request,
                            w,
                            kv,
                            d,
                            cause,
                        );
                    }
                }
                // Dynamo against itself: RadixTree is the reference.
                let (radix, positional) = (&answers[0], &answers[1]);
                let cross = tallies.len() - 1;
                for w in 0..workers {
                    let (r, p) = (radix[w], positional[w]);
                    let cause = (r != p).then(|| row.cross_cause(&evidence[1], w, r, p));
                    record(
                        &mut tallies[cross],
                        &mut first,
                        event,
                        &compiled,
                        request,
                        w,
                        r,
                        p,
                        cause,
                    );
                }
            }
        }
    }
    Report {
        workers,
        requests,
        forked_keys: chains.forked_keys(),
        tallies,
        first,
    }
}

#[allow(clippy::too_many_arguments)]
fn record(
    tally: &mut Tally,
    first: &mut Vec<Difference>,
    event: &kvroute_core::route::compiled::CEvent,
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
            comparison: tally.comparison,
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

/// Records the evicted keys that leave a later key of their chain resident in what
/// Dynamo was given.
fn note_holes(
    kvroute: &KvrouteIndex,
    chains: &ChainMap,
    holes: &mut KeySets,
    worker: u32,
    ns: NsId,
    keys: &[KeyId],
) {
    let cache = &kvroute.state().cache;
    for &key in keys {
        let hole = chains.children(ns, key).iter().any(|&child| {
            cache
                .holders(child)
                .iter()
                .any(|h| h.worker == worker && h.ns == ns)
        });
        if hole {
            holes.0[worker as usize].insert((ns, key));
        }
    }
}

/// Whether a removal `PositionalIndexer` aborted, on any worker, named a key of this
/// prefix: the blocks it kept move the worker's own figure, and through the jump
/// search's count shortcut (see [`RowContext::hole_seen_by`]) other workers' too.
fn rejected_removal_anywhere(positional: &PeerEvidence, request: &Req) -> bool {
    (0..positional.rejected_removals.0.len())
        .any(|v| positional.rejected_removals.touches(v, request))
}

struct RowContext<'a, 't> {
    compiled: &'a Compiled<'t>,
    chains: &'a ChainMap,
    options: Options,
    request: &'a Req<'t>,
    stale: &'a KeySets,
    stale_clear: &'a [bool],
    holes: &'a KeySets,
}

impl RowContext<'_, '_> {
    /// The first documented cause that explains `kvroute ≠ dynamo` on worker `w`.
    fn cause(
        &self,
        kind: DynamoKind,
        evidence: &PeerEvidence,
        w: usize,
        kvroute: u64,
        dynamo: u64,
    ) -> Cause {
        let request = self.request;
        let whole = whole_block_part(&request.prefix, self.options.block_tokens, kvroute);
        if kvroute > dynamo && whole == dynamo {
            return Cause::PartialBlock;
        }
        if dynamo > kvroute && whole != kvroute {
            return Cause::TokenCount;
        }
        if self.stale_clear[w] || self.stale.touches(w, request) {
            return Cause::StaleEpoch;
        }
        if kind == DynamoKind::Positional
            && self.options.known_findings
            && dynamo > kvroute
            && rejected_removal_anywhere(evidence, request)
        {
            return Cause::RemovedAbort;
        }
        if dynamo < kvroute && evidence.rejected_stores.touches(w, request) {
            return Cause::OrphanStore;
        }
        if self.hole_seen_by(kind, w) {
            return Cause::HoleEvicted;
        }
        if self.forked() {
            return Cause::ChainFork;
        }
        if dynamo < kvroute && self.shares_across_tenants() {
            return Cause::SharingGrant;
        }
        Cause::NewFinding
    }

    /// Why `PositionalIndexer` differs from `RadixTree` on worker `w`.
    fn cross_cause(&self, positional: &PeerEvidence, w: usize, radix: u64, pos: u64) -> Cause {
        let request = self.request;
        if self.options.known_findings
            && pos > radix
            && rejected_removal_anywhere(positional, request)
        {
            return Cause::RemovedAbort;
        }
        if self.hole_seen_by(DynamoKind::Positional, w) {
            return Cause::HoleEvicted;
        }
        if self.forked() {
            return Cause::ChainFork;
        }
        Cause::NewFinding
    }

    /// Whether a hole touching this prefix can reach worker `w`'s answer: its own holes
    /// for `RadixTree`; any worker's for `PositionalIndexer`, whose jump search takes
    /// "as many workers hold the block at the jump target as are still matching" for
    /// "the same workers", so one worker's hole moves another's figure.
    fn hole_seen_by(&self, kind: DynamoKind, w: usize) -> bool {
        match kind {
            DynamoKind::RadixTree => self.holes.touches(w, self.request),
            DynamoKind::Positional => {
                (0..self.holes.0.len()).any(|v| self.holes.touches(v, self.request))
            }
        }
    }

    fn forked(&self) -> bool {
        self.request
            .prefix
            .iter()
            .any(|s| self.chains.is_forked(self.request.ns, s.key))
    }

    fn shares_across_tenants(&self) -> bool {
        let ns = &self.compiled.tables.namespaces[self.request.ns as usize];
        self.compiled.sharing.iter().any(|g| {
            g.model == ns.model
                && g.adapter == ns.adapter
                && g.tenants.contains(&ns.tenant)
                && g.tenants.iter().any(|t| *t != ns.tenant)
        })
    }
}
