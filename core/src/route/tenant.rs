//! The tenant rule: whose cached prefix a request may reuse (SPEC.md §4.3).
//!
//! A cache entry is usable only under the request's own model and adapter, and only when
//! its tenant is the request's tenant or shares with it through a grant for that exact
//! model and adapter. Everything else resident under the same key is a *boundary*: it
//! contributes nothing, and the row records why. This module is the only place that
//! decides whether cached tokens may be reused.

use crate::input::trace::Grant;
use crate::mutant::{active, Mutant};
use crate::route::compiled::{Interner, NameId, NamespaceParts, NsId, Tables};
use crate::route::reason::Reason;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::HashMap;

/// The sharing grants of a trace, as the trace lists them.
#[derive(Debug, Clone, Copy)]
pub struct Sharing<'t> {
    grants: &'t [Grant],
}

impl<'t> Sharing<'t> {
    pub fn new(grants: &'t [Grant]) -> Self {
        Sharing { grants }
    }
}

/// The grants compiled to name ids once: per `(model, adapter)`, the tenant sets that
/// share under it. A grant naming a model, adapter or tenant that no namespace of the
/// trace uses can never decide anything, so it is left out. Lookups only, so no map's
/// order can reach a verdict.
#[derive(Debug, Clone, Default)]
struct GrantIds {
    tenant_sets: FxHashMap<(NameId, NameId), Vec<FxHashSet<NameId>>>,
}

impl GrantIds {
    fn compile(grants: &[Grant], names: &Interner) -> Self {
        let mut tenant_sets: FxHashMap<(NameId, NameId), Vec<FxHashSet<NameId>>> =
            FxHashMap::default();
        for grant in grants {
            let (Some(model), Some(adapter)) = (names.get(&grant.model), names.get(&grant.adapter))
            else {
                continue;
            };
            let tenants = grant.tenants.iter().filter_map(|t| names.get(t)).collect();
            tenant_sets
                .entry((model, adapter))
                .or_default()
                .push(tenants);
        }
        GrantIds { tenant_sets }
    }

    /// Whether tenants `a` and `b` count as one for `model` and `adapter`. Grants are
    /// not transitive: the pair must be listed together in one grant.
    fn shares(&self, model: NameId, adapter: NameId, a: NameId, b: NameId) -> bool {
        a == b
            || self
                .tenant_sets
                .get(&(model, adapter))
                .is_some_and(|sets| sets.iter().any(|t| t.contains(&a) && t.contains(&b)))
    }

    /// `None` when an entry under `entry` may serve a request under `request`, else
    /// why not: the first difference in the order model, adapter, tenant, found by the
    /// same comparisons that decide.
    fn judge(&self, request: NamespaceParts, entry: NamespaceParts) -> Option<Reason> {
        let shares = || self.shares(request.model, request.adapter, request.tenant, entry.tenant);
        // The mutant lets the tenant rule alone decide, whatever the entry's model and
        // adapter.
        if active(Mutant::NamespaceModelAdapterDropped) && shares() {
            return None;
        }
        if entry.model != request.model {
            return Some(Reason::ModelMismatch);
        }
        if entry.adapter != request.adapter {
            return Some(Reason::AdapterMismatch);
        }
        // The mutant forgets the tenant altogether.
        if active(Mutant::TenantScopeRemoved) || shares() {
            None
        } else {
            Some(Reason::TenantMismatch)
        }
    }
}

/// The tenant rule over interned namespaces, remembered per pair: a run asks about the
/// same few pairs millions of times. Lookups only, so the map's order never matters.
#[derive(Debug, Clone)]
pub struct NamespaceRule<'t> {
    sharing: Sharing<'t>,
    /// Compiled at the first verdict, from the tables of the trace being replayed.
    grant_ids: Option<GrantIds>,
    verdicts: HashMap<(NsId, NsId), Option<Reason>>,
}

impl<'t> NamespaceRule<'t> {
    pub fn new(sharing: Sharing<'t>) -> Self {
        NamespaceRule {
            sharing,
            grant_ids: None,
            verdicts: HashMap::new(),
        }
    }

    /// `None` when an entry under `entry` may serve a request under `request`, else the
    /// boundary reason the row records.
    #[inline]
    pub fn verdict(&mut self, tables: &Tables, request: NsId, entry: NsId) -> Option<Reason> {
        // A namespace always serves itself, under every reading of the rule: the reuse
        // walk asks this of nearly every entry it visits, so it is answered inline.
        if request == entry {
            return None;
        }
        self.verdict_between(tables, request, entry)
    }

    /// [`NamespaceRule::verdict`] of two different namespaces.
    #[inline(never)]
    fn verdict_between(&mut self, tables: &Tables, request: NsId, entry: NsId) -> Option<Reason> {
        let grants = self.sharing.grants;
        let grant_ids = self
            .grant_ids
            .get_or_insert_with(|| GrantIds::compile(grants, &tables.names));
        *self.verdicts.entry((request, entry)).or_insert_with(|| {
            grant_ids.judge(
                tables.namespace_parts[request as usize],
                tables.namespace_parts[entry as usize],
            )
        })
    }
}
