//! Candidate rows: every worker's figures for one request (SPEC.md §4).
//!
//! A row says whether the worker may serve the request, how much prefix it could reuse
//! (through the tenant rule in [`crate::tenant`]), the load it carries and the cost the
//! cache-plus-load score gives it. Rows are computed the same way for every policy; only
//! the overload cap of `cache_plus_load` (applied in [`crate::policy`]) differs. This
//! module also computes the Pareto `dominated_by` lists.

use crate::state::WorkerState;
use crate::tenant::{reuse_walk, Sharing};
use crate::trace::{PolicyParams, Request, WorkerSpec};

/// Why a row is ineligible, lost its cache evidence, or was excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    ModelNotServed,
    AdapterNotLoaded,
    StaleView,
    TenantMismatch,
    ModelMismatch,
    AdapterMismatch,
    Overloaded,
}

impl Reason {
    /// Every reason, in the order a row lists them.
    pub const ALL: [Reason; 7] = [
        Reason::ModelNotServed,
        Reason::AdapterNotLoaded,
        Reason::StaleView,
        Reason::TenantMismatch,
        Reason::ModelMismatch,
        Reason::AdapterMismatch,
        Reason::Overloaded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Reason::ModelNotServed => "model_not_served",
            Reason::AdapterNotLoaded => "adapter_not_loaded",
            Reason::StaleView => "stale_view",
            Reason::TenantMismatch => "tenant_mismatch",
            Reason::ModelMismatch => "model_mismatch",
            Reason::AdapterMismatch => "adapter_mismatch",
            Reason::Overloaded => "overloaded",
        }
    }

    pub fn is_boundary(self) -> bool {
        matches!(
            self,
            Reason::TenantMismatch | Reason::ModelMismatch | Reason::AdapterMismatch
        )
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of reasons that iterates in the fixed listing order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reasons(u8);

impl Reasons {
    pub fn insert(&mut self, reason: Reason) {
        self.0 |= reason.bit();
    }

    pub fn contains(self, reason: Reason) -> bool {
        self.0 & reason.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Reason> {
        Reason::ALL.into_iter().filter(move |r| self.contains(*r))
    }

    pub fn boundary_count(self) -> u64 {
        self.iter().filter(|r| r.is_boundary()).count() as u64
    }
}

/// One worker's figures for one request. `worker` indexes the id-sorted workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateRow {
    pub worker: usize,
    pub eligible: bool,
    pub reasons: Reasons,
    pub reuse: u64,
    pub recomputed: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub work_milli: u64,
    pub after_milli: u64,
    pub cost_milli: u64,
    pub dominated_by: Vec<usize>,
}

impl CandidateRow {
    /// Eligible and not cut by the overload cap: the rows that compete for dominance.
    pub fn in_front_set(&self) -> bool {
        self.eligible && !self.reasons.contains(Reason::Overloaded)
    }
}

/// Computes every worker's row for `request` at tick `tick`, in worker-id order.
/// `workers` and `states` are both in id order.
pub fn build_rows(
    tick: u64,
    request: &Request,
    workers: &[&WorkerSpec],
    states: &[WorkerState],
    params: &PolicyParams,
    sharing: &Sharing,
) -> Vec<CandidateRow> {
    let decode_weight = params.decode_weight_milli as u128;
    let mut rows: Vec<CandidateRow> = workers
        .iter()
        .zip(states)
        .enumerate()
        .map(|(index, (spec, state))| {
            let mut reasons = Reasons::default();
            let eligible = if spec.model != request.namespace.model {
                reasons.insert(Reason::ModelNotServed);
                false
            } else if request.namespace.adapter != "base"
                && !spec.adapters.contains(&request.namespace.adapter)
            {
                reasons.insert(Reason::AdapterNotLoaded);
                false
            } else {
                true
            };
            let stale = eligible
                && !cfg!(feature = "mutant-freshness-ignored")
                && params
                    .freshness_ticks
                    .is_some_and(|window| tick.saturating_sub(state.last_heard()) > window);
            let reuse = if !eligible {
                0
            } else if stale {
                reasons.insert(Reason::StaleView);
                0
            } else {
                let walk = reuse_walk(state, request, sharing);
                // An eligible, fresh row has no reason yet: the walk's are all it gets.
                reasons = walk.boundary;
                walk.reuse_tokens
            };
            let recomputed = request.prompt_tokens - reuse;
            let work_milli =
                1000 * state.queued_prefill as u128 + decode_weight * state.active_decode as u128;
            let after_milli = work_milli
                + 1000 * recomputed as u128
                + decode_weight * request.decode_tokens as u128;
            CandidateRow {
                worker: index,
                eligible,
                reasons,
                reuse,
                recomputed,
                queued_prefill: state.queued_prefill,
                active_decode: state.active_decode,
                work_milli: to_u64(work_milli),
                after_milli: to_u64(after_milli),
                cost_milli: 0,
                dominated_by: Vec::new(),
            }
        })
        .collect();
    let eligible_count = rows.iter().filter(|r| r.eligible).count() as u128;
    let after_sum: u128 = rows
        .iter()
        .filter(|r| r.eligible)
        .map(|r| r.after_milli as u128)
        .sum();
    for row in &mut rows {
        let imbalance = if eligible_count == 0 {
            0
        } else {
            let excess = (eligible_count * row.after_milli as u128).saturating_sub(after_sum);
            params.imbalance_penalty_milli as u128 * excess / (1000 * eligible_count)
        };
        // The mutant prices a worker by its prefill queue alone, as if decode were free.
        let work_in_cost = if cfg!(feature = "mutant-decode-ignored") {
            1000 * row.queued_prefill as u128
        } else {
            row.work_milli as u128
        };
        row.cost_milli = to_u64(1000 * row.recomputed as u128 + work_in_cost + imbalance);
    }
    rows
}

/// The overflow rule (SPEC.md §1.4) bounds every row figure by 2^53 - 1, so this
/// narrowing never saturates on a validated trace; saturating keeps it panic-free.
fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// Fills `dominated_by` for the front set: B dominates A when it reuses at least as much
/// and leaves at most as much work after placement, one of them strictly.
pub fn mark_dominance(rows: &mut [CandidateRow]) {
    let front: Vec<(usize, u64, u64)> = rows
        .iter()
        .filter(|r| r.in_front_set())
        .map(|r| (r.worker, r.reuse, r.after_milli))
        .collect();
    for row in rows.iter_mut().filter(|r| r.in_front_set()) {
        row.dominated_by = front
            .iter()
            .filter(|(_, reuse, after)| {
                *reuse >= row.reuse
                    && *after <= row.after_milli
                    && (*reuse > row.reuse || *after < row.after_milli)
            })
            .map(|(worker, _, _)| *worker)
            .collect();
    }
}
