//! The tenant rule: whose cached prefix a request may reuse (SPEC.md §4.3).
//!
//! A cache entry is usable only under the request's own model and adapter, and only when
//! its tenant is the request's tenant or shares with it through a grant for that exact
//! model and adapter. Everything else resident under the same key is a *boundary*: it
//! contributes nothing, and the row records why. This module is the only place that
//! decides whether cached tokens may be reused.

use crate::input::trace::{Grant, Namespace};
use crate::mutant::{active, Mutant};
use crate::route::compiled::{NsId, Tables};
use crate::route::reason::Reason;
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
                *g.model == *model
                    && *g.adapter == *adapter
                    && g.tenants.iter().any(|t| **t == *a)
                    && g.tenants.iter().any(|t| **t == *b)
            })
    }

    /// Whether an entry under `entry` may serve a request under `request`.
    pub fn usable(&self, request: &Namespace, entry: &Namespace) -> bool {
        if active(Mutant::TenantScopeRemoved) {
            return entry.model == request.model && entry.adapter == request.adapter;
        }
        if active(Mutant::NamespaceModelAdapterDropped) {
            return self.shares(
                &request.model,
                &request.adapter,
                &request.tenant,
                &entry.tenant,
            );
        }
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
