//! The tenant rule: whose cached prefix a request may reuse (SPEC.md §4.3).
//!
//! A cache entry is usable only under the request's own model and adapter, and only when
//! its tenant is the request's tenant or shares with it through a grant for that exact
//! model and adapter. Everything else resident under the same key is a *boundary*: it
//! contributes nothing, and the row records why. This module is the only place that
//! decides whether cached tokens may be reused.

use crate::candidate::{Reason, Reasons};
use crate::state::WorkerState;
use crate::trace::{Grant, Namespace, Request};

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

/// The result of walking a request's prefix over one worker's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReuseWalk {
    pub reuse_tokens: u64,
    pub boundary: Reasons,
}

/// Walks the prefix in order, summing usable resident tokens, and stops after the first
/// segment that is not fully resident. Capped at the prompt length.
pub fn reuse_walk(worker: &WorkerState, request: &Request, sharing: &Sharing) -> ReuseWalk {
    let mut reuse_tokens: u64 = 0;
    let mut boundary = Reasons::default();
    for segment in &request.prefix {
        let residents = worker.residents(&segment.key);
        let usable_tokens = residents
            .iter()
            .filter(|r| sharing.usable(&request.namespace, &r.namespace))
            .map(|r| r.tokens)
            .max()
            .unwrap_or(0);
        reuse_tokens += usable_tokens.min(segment.tokens);
        if usable_tokens == 0 {
            for resident in residents {
                boundary.insert(boundary_reason(&request.namespace, &resident.namespace));
            }
        }
        // The mutant keeps walking past a partially resident segment.
        if usable_tokens < segment.tokens && !cfg!(feature = "mutant-reuse-past-partial") {
            break;
        }
    }
    ReuseWalk {
        reuse_tokens: reuse_tokens.min(request.prompt_tokens),
        boundary,
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
