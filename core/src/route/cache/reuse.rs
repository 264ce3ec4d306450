//! The reuse walk (SPEC.md §4.3): how many leading prefix tokens each worker holds
//! that the request may use.
//!
//! The walk goes segment by segment over every walking worker at once, asks the tenant
//! rule ([`crate::route::tenant`]) whether each resident entry may serve the request,
//! and stops a worker at its first segment that is not fully resident. Whose entries
//! count is decided in `tenant`; how far they count is decided here.

use crate::mutant::{active, Mutant};
use crate::route::cache::index::{CacheIndex, Holder};
use crate::route::compiled::{NsId, Req, Tables};
use crate::route::reason::Reasons;
use crate::route::tenant::NamespaceRule;

/// Scratch space for [`reuse_walk`], sized to the worker count and reused by every
/// decision of a run so a decision allocates nothing.
#[derive(Debug, Clone)]
pub struct WalkScratch {
    /// Per worker, in one array so that the walk reaches a worker's figures through
    /// one pointer and one bounds check.
    walkers: Vec<Walker>,
    walked: Vec<u32>,
    walk: u64,
}

/// One worker's place in the walk.
#[derive(Debug, Clone, Copy)]
struct Walker {
    /// How many segments the worker has fully matched so far; [`NOT_WALKING`] for a
    /// worker whose evidence is not consulted (ineligible or stale).
    depth: u32,
    /// The last walk that reached the worker: [`reuse_walk`] lists a worker in
    /// [`WalkScratch::walked`] when it first reaches it, and [`reuse_walk_rows`] sets
    /// its depth then, so each does so once a walk.
    reached_in: u64,
}

/// The depth of a worker whose cache is not walked.
const NOT_WALKING: u32 = u32::MAX;

impl WalkScratch {
    pub fn new(worker_count: usize) -> Self {
        let walker = Walker {
            depth: NOT_WALKING,
            reached_in: 0,
        };
        WalkScratch {
            walkers: vec![walker; worker_count],
            walked: Vec::new(),
            walk: 0,
        }
    }

    /// Marks whether worker `w`'s cache is walked for the next request.
    pub fn set_walking(&mut self, w: usize, walking: bool) {
        self.walkers[w].depth = if walking { 0 } else { NOT_WALKING };
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
    walk::<false>(request, index, tables, rule, scratch, reuse, boundary);
}

/// [`reuse_walk`] for the row builder, whose rows say which workers are walked: the
/// rows with no reason yet (an ineligible row has one, and a stale view or an evidence
/// gap keeps the evidence out), `boundary` being the rows' reasons. A worker's row is
/// read when the walk first reaches it, so no pass over every worker marks them
/// beforehand.
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
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    walk::<true>(request, index, tables, rule, scratch, reuse, boundary);
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
    reuse: &mut [u64],
    boundary: &mut [Reasons],
) {
    // The mutant keeps walking past a partially resident segment.
    let past_partial = active(Mutant::ReusePastPartial);
    scratch.walk += 1;
    scratch.walked.clear();
    let this_walk = scratch.walk;
    let walked = &mut scratch.walked;
    // One length for the columns, so indexing one checks the others' bounds.
    let walkers = &mut scratch.walkers[..];
    let n = walkers.len();
    let (reuse, boundary) = (&mut reuse[..n], &mut boundary[..n]);
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
        let mut rest = holders;
        while let [first, tail @ ..] = rest {
            let w = first.worker as usize;
            let walker = &mut walkers[w];
            let worker_depth = depth_of::<FROM_ROWS>(walker, boundary[w], this_walk);
            if is_stopped(past_partial, worker_depth, i) {
                rest = tail;
                continue;
            }
            note::<FROM_ROWS>(walked, w, walker, this_walk);
            let usable_tokens =
                usable_tokens_of_run(&mut rest, rule, tables, request.ns, &mut boundary[w]);
            // Capped as it grows: the cap of a sum of additions is the cap of each
            // partial sum plus the next addition, capped.
            reuse[w] = (reuse[w] + usable_tokens.min(segment_tokens)).min(prompt_tokens);
            if usable_tokens >= segment_tokens {
                walker.depth = i + 1;
                advanced = true;
            }
        }
        // A segment of 0 tokens is fully resident everywhere (`0 < 0` does not stop a
        // walk), so every worker still matching passes it, holder or not.
        if segment_tokens == 0 {
            advanced |= pass_empty_segment::<FROM_ROWS>(walkers, boundary, walked, this_walk, i);
        }
        // Under the mutant every walking worker visits every segment.
        if !advanced && !past_partial {
            break;
        }
    }
}

/// Whether a worker at `worker_depth` takes no part in segment `i`: it stopped before
/// it, or is not walked at all. A walking worker's depth is below `NOT_WALKING`, and so
/// is `i`; under the mutant only a worker not walked at all is stopped.
#[inline(always)]
fn is_stopped(past_partial: bool, worker_depth: u32, i: u32) -> bool {
    if past_partial {
        worker_depth == NOT_WALKING
    } else {
        worker_depth != i
    }
}

/// The usable tokens of the run of one worker's entries that starts `rest` (not
/// empty), leaving `rest` past the run; a run with none adds its boundary reasons to
/// `boundary`. Nearly always the worker holds the key once, under the request's own
/// namespace, which serves it: that case is answered here, with tokens above 0 (a
/// resident entry's) and so no boundary reason. Any other run of entries is judged out
/// of line, so the registers of the walk's loop stay its own.
#[inline(always)]
fn usable_tokens_of_run(
    rest: &mut &[Holder],
    rule: &mut NamespaceRule,
    tables: &Tables,
    request_ns: NsId,
    boundary: &mut Reasons,
) -> u64 {
    let [first, tail @ ..] = *rest else {
        unreachable!("a run has a first entry");
    };
    let alone = tail.first().is_none_or(|next| next.worker != first.worker);
    if alone && first.ns == request_ns {
        *rest = tail;
        debug_assert!(first.tokens > 0, "a resident entry holds tokens");
        return first.tokens;
    }
    let (usable_tokens, pending) = judge_run(rest, rule, tables, request_ns);
    if usable_tokens == 0 {
        *boundary = boundary.union(pending);
    }
    usable_tokens
}

/// Worker `w`'s depth now. From rows, a worker first reached in walk `this_walk` starts
/// at 0 if its row is walked; its reasons are still the row's own then, since only a
/// reached worker gets boundary reasons.
#[inline(always)]
fn depth_of<const FROM_ROWS: bool>(walker: &mut Walker, boundary: Reasons, this_walk: u64) -> u32 {
    if FROM_ROWS && walker.reached_in != this_walk {
        walker.reached_in = this_walk;
        walker.depth = if boundary.is_empty() { 0 } else { NOT_WALKING };
    }
    walker.depth
}

/// Lists worker `w` in `walked` the first time walk `this_walk` changes it, where a
/// list is kept (not from rows).
#[inline(always)]
fn note<const FROM_ROWS: bool>(
    walked: &mut Vec<u32>,
    w: usize,
    walker: &mut Walker,
    this_walk: u64,
) {
    if !FROM_ROWS && walker.reached_in != this_walk {
        walker.reached_in = this_walk;
        walked.push(w as u32);
    }
}

/// Passes every worker still matching at segment `i` past it, for a segment of 0
/// tokens; says whether any worker advanced.
#[inline(always)]
fn pass_empty_segment<const FROM_ROWS: bool>(
    walkers: &mut [Walker],
    boundary: &[Reasons],
    walked: &mut Vec<u32>,
    this_walk: u64,
    i: u32,
) -> bool {
    let mut advanced = false;
    for (w, walker) in walkers.iter_mut().enumerate() {
        if depth_of::<FROM_ROWS>(walker, boundary[w], this_walk) == i {
            walker.depth = i + 1;
            note::<FROM_ROWS>(walked, w, walker, this_walk);
            advanced = true;
        }
    }
    advanced
}

/// The most usable tokens among the run of entries that starts `rest`, all of one
/// worker's, and the boundary reasons of those that may not serve a request under
/// `request_ns`; leaves `rest` past the run.
#[cold]
#[inline(never)]
fn judge_run(
    rest: &mut &[Holder],
    rule: &mut NamespaceRule,
    tables: &Tables,
    request_ns: NsId,
) -> (u64, Reasons) {
    let worker = rest[0].worker;
    let mut usable_tokens = 0;
    let mut pending = Reasons::default();
    while let [entry, tail @ ..] = *rest {
        if entry.worker != worker {
            break;
        }
        match rule.verdict(tables, request_ns, entry.ns) {
            None => usable_tokens = usable_tokens.max(entry.tokens),
            Some(reason) => pending.insert(reason),
        }
        *rest = tail;
    }
    (usable_tokens, pending)
}
