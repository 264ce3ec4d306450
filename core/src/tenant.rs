//! The tenant rule: whose cached prefix a request may reuse (SPEC.md §4.3).
//!
//! A cache entry is usable only under the request's own model and adapter, and only when
//! its tenant is the request's tenant or shares with it through a grant for that exact
//! model and adapter. Everything else resident under the same key is a *boundary*: it
//! contributes nothing, and the row records why. This module is the only place that
//! decides whether cached tokens may be reused.

use crate::candidate::{Reason, Reasons};
use crate::compiled::{NsId, Req, Tables};
use crate::state::CacheIndex;
use crate::trace::{Grant, Namespace};
use std::collections::HashMap;

/// The sharing grants of a trace.
#[derive(Debug, Clone, Copy)]
pub struct Sharing<'t> {
    grants: &'t [Grant],
}

impl<'t> Sharing<'t> {
    pub fn new(grants: &'t [Grant]) -> Self {
        Sharing { grants }
    }

    /// Whether `a` and `b` count as one tenant for `model` and `adapter`. Grants are not
    /// transitive: each pair must be listed together in one grant.
    pub fn shares(&self, model: &str, adapter: &str, a: &str, b: &str) -> bool {
        a == b
            || self.grants.iter().any(|g| {
                g.model == model
                    && g.adapter == adapter
                    && g.tenants.iter().any(|t| t == a)
                    && g.tenants.iter().any(|t| t == b)
            })
    }

    /// Whether an entry under `entry` may serve a request under `request`.
    pub fn usable(&self, request: &Namespace, entry: &Namespace) -> bool {
        #[cfg(feature = "mutant-tenant-scope-removed")]
        return entry.model == request.model && entry.adapter == request.adapter;
        #[cfg(feature = "mutant-namespace-model-adapter-dropped")]
        return self.shares(
            &request.model,
            &request.adapter,
            &request.tenant,
            &entry.tenant,
        );
        #[allow(unreachable_code)]
        {
            entry.model == request.model
                && entry.adapter == request.adapter
                && self.shares(
                    &request.model,
                    &request.adapter,
                    &request.tenant,
                    &entry.tenant,
                )
        }
    }
}

/// The tenant rule over interned namespaces, remembered per pair: a run asks about the
/// same few pairs millions of times. Lookups only, so the map's order never matters.
#[derive(Debug, Clone)]
pub struct NamespaceRule<'t> {
    sharing: Sharing<'t>,
    verdicts: HashMap<(NsId, NsId), Option<Reason>>,
}

impl<'t> NamespaceRule<'t> {
    pub fn new(sharing: Sharing<'t>) -> Self {
        NamespaceRule {
            sharing,
            verdicts: HashMap::new(),
        }
    }

    /// `None` when an entry under `entry` may serve a request under `request`, else the
    /// boundary reason the row records.
    pub fn verdict(&mut self, tables: &Tables, request: NsId, entry: NsId) -> Option<Reason> {
        // A namespace always serves itself, under every reading of the rule.
        if request == entry {
            return None;
        }
        let sharing = self.sharing;
        *self.verdicts.entry((request, entry)).or_insert_with(|| {
            let (r, e) = (
                &tables.namespaces[request as usize],
                &tables.namespaces[entry as usize],
            );
            if sharing.usable(r, e) {
                None
            } else {
                Some(boundary_reason(r, e))
            }
        })
    }
}

/// Scratch space for [`reuse_walk`], sized to the worker count and reused by every
/// decision of a run so a decision allocates nothing.
#[derive(Debug, Clone)]
pub struct WalkScratch {
    /// How many segments each worker has fully matched so far; [`NOT_WALKING`] for
    /// workers whose evidence is not consulted (ineligible or stale).
    depth: Vec<u32>,
    /// Per worker, the segment visit it was last touched in, so `best` and `pending`
    /// need no clearing between segments.
    touched_in: Vec<u64>,
    best: Vec<u64>,
    pending: Vec<Reasons>,
    touched: Vec<u32>,
    visit: u64,
}

/// The depth of a worker whose cache is not walked.
const NOT_WALKING: u32 = u32::MAX;

impl WalkScratch {
    pub fn new(worker_count: usize) -> Self {
        WalkScratch {
            depth: vec![NOT_WALKING; worker_count],
            touched_in: vec![0; worker_count],
            best: vec![0; worker_count],
            pending: vec![Reasons::default(); worker_count],
            touched: Vec::with_capacity(worker_count),
            visit: 0,
        }
    }

    /// Marks whether worker `w`'s cache is walked for the next request.
    pub fn set_walking(&mut self, w: usize, walking: bool) {
        self.depth[w] = if walking { 0 } else { NOT_WALKING };
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
    let past_partial = cfg!(feature = "mutant-reuse-past-partial");
    for (i, segment) in request.prefix.iter().enumerate() {
        let i = i as u32;
        scratch.visit += 1;
        scratch.touched.clear();
        for holder in index.holders(segment.key) {
            let w = holder.worker as usize;
            let depth = scratch.depth[w];
            if depth == NOT_WALKING || (depth != i && !past_partial) {
                continue;
            }
            if scratch.touched_in[w] != scratch.visit {
                scratch.touched_in[w] = scratch.visit;
                scratch.best[w] = 0;
                scratch.pending[w] = Reasons::default();
                scratch.touched.push(holder.worker);
            }
            match rule.verdict(tables, request.ns, holder.ns) {
                None => scratch.best[w] = scratch.best[w].max(holder.tokens),
                Some(reason) => scratch.pending[w].insert(reason),
            }
        }
        let mut advanced = false;
        for &w in &scratch.touched {
            let w = w as usize;
            let usable_tokens = scratch.best[w];
            reuse[w] += usable_tokens.min(segment.tokens);
            if usable_tokens == 0 {
                for reason in scratch.pending[w].iter() {
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
            for depth in scratch.depth.iter_mut().filter(|d| **d == i) {
                *depth = i + 1;
                advanced = true;
            }
        }
        // Under the mutant every walking worker visits every segment.
        if !advanced && !past_partial {
            break;
        }
    }
}

/// Why a resident entry (known not to be usable) cannot serve the request: the first
/// difference in the order model, adapter, tenant.
fn boundary_reason(request: &Namespace, entry: &Namespace) -> Reason {
    if entry.model != request.model {
        Reason::ModelMismatch
    } else if entry.adapter != request.adapter {
        Reason::AdapterMismatch
    } else {
        Reason::TenantMismatch
    }
}
