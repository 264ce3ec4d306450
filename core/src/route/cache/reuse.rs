//! The reuse walk (SPEC.md §4.3): how many leading prefix tokens each worker holds
//! that the request may use.
//!
//! The walk goes segment by segment over every walking worker at once, asks the tenant
//! rule ([`crate::route::tenant`]) whether each resident entry may serve the request,
//! and stops a worker at its first segment that is not fully resident. Whose entries
//! count is decided in `tenant`; how far they count is decided here.

use crate::mutant::{active, Mutant};
use crate::route::cache::index::CacheIndex;
use crate::route::compiled::{Req, Tables};
use crate::route::reason::Reasons;
use crate::route::tenant::NamespaceRule;

/// Scratch space for [`reuse_walk`], sized to the worker count and reused by every
/// decision of a run so a decision allocates nothing.
#[derive(Debug, Clone)]
pub struct WalkScratch {
    /// How many segments each worker has fully matched so far; [`NOT_WALKING`] for
    /// workers whose evidence is not consulted (ineligible or stale).
    depth: Vec<u32>,
    /// Per worker, the walk it was last changed in, so [`WalkScratch::walked`] lists a
    /// worker once.
    walked_in: Vec<u64>,
    walked: Vec<u32>,
    walk: u64,
    /// For [`reuse_walk_rows`]: per worker, the walk whose start its depth was last
    /// set for, so only the workers a walk reaches have their depth set.
    started_in: Vec<u64>,
}

/// The depth of a worker whose cache is not walked.
const NOT_WALKING: u32 = u32::MAX;

impl WalkScratch {
    pub fn new(worker_count: usize) -> Self {
        WalkScratch {
            depth: vec![NOT_WALKING; worker_count],
            walked_in: vec![0; worker_count],
            walked: Vec::new(),
            walk: 0,
            started_in: vec![0; worker_count],
        }
    }

    /// Marks whether worker `w`'s cache is walked for the next request.
    pub fn set_walking(&mut self, w: usize, walking: bool) {
        self.depth[w] = if walking { 0 } else { NOT_WALKING };
    }

    /// The workers whose depth, `reuse` or `boundary` the last [`reuse_walk`] changed,
    /// each once, in the order it first reached them. Every other walking worker still
    /// has depth 0, reuse 0 and no boundary reason, so a caller that walks every worker
    /// for each request resets only these (O(holders), not O(workers)) before the next
    /// walk: `reuse` and `boundary` to zero and empty, and `set_walking(w, true)`.
    /// Empty after a [`reuse_walk_rows`]: its caller resets every row before a walk,
    /// so that walk keeps no list.
    pub fn walked(&self) -> &[u32] {
        &self.walked
    }
}

/// The walked list's half of [`WalkScratch`], borrowed apart from the depths so the
/// walk's loops keep the columns they index in registers.
struct WalkedList<'s> {
    walked_in: &'s mut [u64],
    walked: &'s mut Vec<u32>,
    walk: u64,
    /// False for [`reuse_walk_rows`], which keeps no list.
    tracks_walked: bool,
}

impl WalkedList<'_> {
    #[inline]
    fn note(&mut self, w: usize) {
        if self.tracks_walked && self.walked_in[w] != self.walk {
            self.walked_in[w] = self.walk;
            self.walked.push(w as u32);
        }
    }
}

/// Walks the request's prefix over every walking worker's cache at once: segment by
/// segment, summing usable resident tokens into `reuse[w]` and stopping each worker
/// after its first segment that is not fully resident; boundary reasons go to
/// `boundary[w]`. Only the holders of each segment's key are visited, so the cost is
/// O(segments + holders), and the walk ends as soon as no worker is still matching.
/// The walking workers are those [`WalkScratch::set_walking`] marked; `reuse` and
/// `boundary` must be zero/empty for them on entry. Reuse is capped at the prompt
/// length.
pub fn reuse_walk(
    request: &Req,
    index: &CacheIndex,
    tables: &Tables,
    rule: &mut NamespaceRule,
    scratch: &mut WalkScratch,
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    walk::<false>(request, index, tables, rule, scratch, &[], reuse, boundary);
}

/// [`reuse_walk`] for the row builder, whose rows say which workers are walked: the
/// eligible rows with no reason yet (a stale view or an evidence gap keeps the
/// evidence out), `boundary` being the rows' reasons. A worker's row is read when the
/// walk first reaches it, so no pass over every worker marks them beforehand.
/// `reuse` must be zero for every row on entry. The walk keeps no list of the
/// workers it reached ([`WalkScratch::walked`]), since the row builder resets every
/// row before the next walk anyway.
#[allow(clippy::too_many_arguments)]
pub fn reuse_walk_rows(
    request: &Req,
    index: &CacheIndex,
    tables: &Tables,
    rule: &mut NamespaceRule,
    scratch: &mut WalkScratch,
    eligible: &[bool],
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    walk::<true>(
        request, index, tables, rule, scratch, eligible, reuse, boundary,
    );
}

/// The walk of [`reuse_walk`] and [`reuse_walk_rows`]: with `FROM_ROWS`, a worker's
/// depth is set from its row when the walk first reaches it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn walk<const FROM_ROWS: bool>(
    request: &Req,
    index: &CacheIndex,
    tables: &Tables,
    rule: &mut NamespaceRule,
    scratch: &mut WalkScratch,
    eligible: &[bool],
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    // The mutant keeps walking past a partially resident segment.
    let past_partial = active(Mutant::ReusePastPartial);
    scratch.walk += 1;
    scratch.walked.clear();
    let this_walk = scratch.walk;
    let depth = &mut scratch.depth[..];
    let mut walked = WalkedList {
        walked_in: &mut scratch.walked_in,
        walked: &mut scratch.walked,
        walk: this_walk,
        tracks_walked: !FROM_ROWS,
    };
    // One length for the columns, so indexing one checks the others' bounds.
    let n = depth.len();
    let (reuse, boundary) = (&mut reuse[..n], &mut boundary[..n]);
    let (eligible, started_in) = if FROM_ROWS {
        (&eligible[..n], &mut scratch.started_in[..n])
    } else {
        (eligible, &mut scratch.started_in[..])
    };
    // Worker `w`'s depth now. From rows, a worker first reached in this walk starts at
    // 0 if its row is walked; its reasons are still the row's own then, since only a
    // reached worker gets boundary reasons.
    let mut depth_of = |w: usize, depth: &mut [u32], boundary: &[Reasons]| -> u32 {
        if FROM_ROWS && started_in[w] != this_walk {
            started_in[w] = this_walk;
            depth[w] = if eligible[w] && boundary[w].is_empty() {
                0
            } else {
                NOT_WALKING
            };
        }
        depth[w]
    };
    let prompt_tokens = request.prompt_tokens;
    for (i, segment) in request.prefix.iter().enumerate() {
        let i = i as u32;
        let segment_tokens = segment.tokens;
        let holders = index.holders(segment.key);
        crate::route::cache::work::count(holders.len() as u64);
        let mut advanced = false;
        // Holders are sorted by worker, so a worker's entries (one per namespace it
        // holds the key under) are adjacent: each run is judged and applied at once,
        // with no per-worker scratch to reset between segments. A stopped worker's
        // run is passed one holder at a time: its depth stays what stopped it.
        let mut k = 0;
        while let Some(first) = holders.get(k) {
            let w = first.worker as usize;
            let worker_depth = depth_of(w, depth, boundary);
            // A walking worker's depth is below `NOT_WALKING`, and so is `i`.
            let stopped = if past_partial {
                worker_depth == NOT_WALKING
            } else {
                worker_depth != i
            };
            if stopped {
                k += 1;
                continue;
            }
            walked.note(w);
            // The most usable tokens among the worker's entries, and the boundary
            // reasons of those that may not serve the request.
            let mut usable_tokens = 0;
            let mut pending = Reasons::default();
            while let Some(entry) = holders.get(k).filter(|h| h.worker == first.worker) {
                match rule.verdict(tables, request.ns, entry.ns) {
                    None => usable_tokens = usable_tokens.max(entry.tokens),
                    Some(reason) => pending.insert(reason),
                }
                k += 1;
            }
            // Capped as it grows: the cap of a sum of additions is the cap of each
            // partial sum plus the next addition, capped.
            reuse[w] = (reuse[w] + usable_tokens.min(segment_tokens)).min(prompt_tokens);
            if usable_tokens == 0 {
                boundary[w] = boundary[w].union(pending);
            }
            if usable_tokens >= segment_tokens {
                depth[w] = i + 1;
                advanced = true;
            }
        }
        // A segment of 0 tokens is fully resident everywhere (`0 < 0` does not stop a
        // walk), so every worker still matching passes it, holder or not.
        if segment_tokens == 0 {
            for w in 0..n {
                if depth_of(w, depth, boundary) == i {
                    depth[w] = i + 1;
                    walked.note(w);
                    advanced = true;
                }
            }
        }
        // Under the mutant every walking worker visits every segment.
        if !advanced && !past_partial {
            break;
        }
    }
}
