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
    /// Whether walks list the workers they change. The row builder resets every row
    /// before each walk and never reads the list, so its scratch skips keeping it.
    tracks_walked: bool,
}

/// The depth of a worker whose cache is not walked.
const NOT_WALKING: u32 = u32::MAX;

impl WalkScratch {
    /// Scratch whose walks list the workers they change ([`WalkScratch::walked`]).
    pub fn new(worker_count: usize) -> Self {
        WalkScratch {
            depth: vec![NOT_WALKING; worker_count],
            walked_in: vec![0; worker_count],
            walked: Vec::new(),
            walk: 0,
            tracks_walked: true,
        }
    }

    /// Scratch for a caller that resets every worker before each walk: its walks keep
    /// no list, and [`WalkScratch::walked`] stays empty.
    pub fn untracked(worker_count: usize) -> Self {
        WalkScratch {
            walked_in: Vec::new(),
            tracks_walked: false,
            ..WalkScratch::new(worker_count)
        }
    }

    /// Marks whether worker `w`'s cache is walked for the next request.
    pub fn set_walking(&mut self, w: usize, walking: bool) {
        self.depth[w] = if walking { 0 } else { NOT_WALKING };
    }

    /// Marks which workers' caches the next request walks: the eligible rows with no
    /// reason yet (a stale view or an evidence gap keeps the evidence out), one entry
    /// per worker in each column. One pass over two columns, for the row builder.
    pub fn set_walking_rows(&mut self, eligible: &[bool], reasons: &[Reasons]) {
        let rows = eligible.iter().zip(reasons);
        for (depth, (&eligible, reasons)) in self.depth.iter_mut().zip(rows) {
            *depth = if eligible && reasons.is_empty() {
                0
            } else {
                NOT_WALKING
            };
        }
    }

    /// The workers whose depth, `reuse` or `boundary` the last [`reuse_walk`] changed,
    /// each once, in the order it first reached them. Every other walking worker still
    /// has depth 0, reuse 0 and no boundary reason, so a caller that walks every worker
    /// for each request resets only these (O(holders), not O(workers)) before the next
    /// walk: `reuse` and `boundary` to zero and empty, and `set_walking(w, true)`.
    /// Always empty for a scratch made by [`WalkScratch::untracked`].
    pub fn walked(&self) -> &[u32] {
        &self.walked
    }

    #[inline]
    fn note_walked(&mut self, w: usize) {
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
/// `reuse` and `boundary` must be zero/empty for walking workers on entry. Reuse is
/// capped at the prompt length.
pub fn reuse_walk(
    request: &Req,
    index: &CacheIndex,
    tables: &Tables,
    rule: &mut NamespaceRule,
    scratch: &mut WalkScratch,
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    // The mutant keeps walking past a partially resident segment.
    let past_partial = active(Mutant::ReusePastPartial);
    scratch.walk += 1;
    scratch.walked.clear();
    for (i, segment) in request.prefix.iter().enumerate() {
        let i = i as u32;
        let holders = index.holders(segment.key);
        crate::route::cache::work::count(holders.len() as u64);
        let mut advanced = false;
        // Holders are sorted by worker, so a worker's entries (one per namespace it
        // holds the key under) are adjacent: each run is judged and applied at once,
        // with no per-worker scratch to reset between segments.
        let mut rest = holders;
        while let Some(first) = rest.first() {
            let w = first.worker as usize;
            let run = rest.iter().take_while(|h| h.worker == first.worker).count();
            let (entries, after) = rest.split_at(run);
            rest = after;
            let depth = scratch.depth[w];
            // A walking worker's depth is below `NOT_WALKING`, and so is `i`.
            let stopped = if past_partial {
                depth == NOT_WALKING
            } else {
                depth != i
            };
            if stopped {
                continue;
            }
            scratch.note_walked(w);
            // The most usable tokens among the worker's entries, and the boundary
            // reasons of those that may not serve the request.
            let mut usable_tokens = 0;
            let mut pending = Reasons::default();
            for entry in entries {
                match rule.verdict(tables, request.ns, entry.ns) {
                    None => usable_tokens = usable_tokens.max(entry.tokens),
                    Some(reason) => pending.insert(reason),
                }
            }
            reuse[w] += usable_tokens.min(segment.tokens);
            if usable_tokens == 0 {
                for reason in pending.iter() {
                    boundary[w].insert(reason);
                }
            }
            if usable_tokens >= segment.tokens {
                scratch.depth[w] = i + 1;
                advanced = true;
            }
        }
        // A segment of 0 tokens is fully resident everywhere (`0 < 0` does not stop a
        // walk), so every worker still matching passes it, holder or not.
        if segment.tokens == 0 {
            for w in 0..scratch.depth.len() {
                if scratch.depth[w] == i {
                    scratch.depth[w] = i + 1;
                    scratch.note_walked(w);
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
