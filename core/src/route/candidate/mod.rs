//! Candidate rows: every worker's figures for one request (SPEC.md §4.1–§4.4, §4.6).
//!
//! A row says whether the worker may serve the request (eligibility and freshness),
//! how much prefix it could reuse (the walk in [`crate::route::cache::reuse`], under the
//! tenant rule of [`crate::route::tenant`]), the load it carries, the work it would
//! have after this request, and the cost of §4.4 before its imbalance term, which is a
//! row's own figures' sum. Rows are computed the same way for every policy. What a
//! policy makes of them — the imbalance term or the Dynamo cost, the overload cap, the
//! choice — is in [`crate::route::policy`]. The rows also hold their Pareto dominance,
//! found for all of them at once by [`dominance`] when a receipt needs it, and this
//! module prices one row in Dynamo's terms ([`dynamo_cost_milli`], §4.8), which reads
//! nothing but the row's own figures.

pub(crate) mod dominance;

use crate::input::trace::{EpochsMode, PolicyParams};
use crate::mutant::{active, Mutant};
use crate::route::cache::reuse::{reuse_walk_rows, WalkScratch};
use crate::route::cache::work::count_dominance;
use crate::route::compiled::{Compiled, NameId, Req};
use crate::route::reason::{Reason, Reasons};
use crate::route::state::RouterState;
use crate::route::tenant::NamespaceRule;
use dominance::Dominance;

/// One worker's figures for one request, as the receipt lists it. `worker` indexes the
/// id-sorted workers. Dominance is one index and a count (SPEC.md §4.6), so a row is a
/// fixed size and building one allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// The smallest-index (so smallest-id) row that dominates this one.
    pub dominated_by: Option<usize>,
    /// How many rows dominate this one.
    pub dominated_count: u64,
}

/// Every worker's figures for the current request, one array per column, indexed by
/// worker (id order). A run keeps one `Rows` and refills it for each request, so
/// routing allocates nothing per decision; [`Rows::compute_dominance`] and
/// [`Rows::to_candidate_rows`] build the receipt's rows only when a receipt is being
/// written. Eligibility has no column of its own: a row is eligible exactly when its
/// reasons include no [`Reasons::INELIGIBLE`] one ([`Rows::eligible`]), so the two can
/// never disagree, and a row's one test of its reasons answers both.
#[derive(Debug, Clone)]
pub struct Rows {
    pub reasons: Vec<Reasons>,
    pub reuse: Vec<u64>,
    pub recomputed: Vec<u64>,
    pub queued_prefill: Vec<u64>,
    pub active_decode: Vec<u64>,
    pub work_milli: Vec<u64>,
    pub after_milli: Vec<u64>,
    /// Filled with the cache-plus-load cost before its imbalance term (SPEC.md §4.4)
    /// by [`Rows::fill`]; [`crate::route::policy::price`] adds the imbalance, or
    /// replaces it by the Dynamo cost.
    pub cost_milli: Vec<u64>,
    /// The current request's `prompt_tokens`, the same for every row.
    pub prompt_tokens: u64,
    walk: WalkScratch,
    /// Each worker's model and adapter reasons (SPEC.md §4.1) for requests of
    /// `served_for`'s model and adapter. Workers never change what they serve, and
    /// consecutive requests nearly always ask for the same model and adapter, so the
    /// row builder copies these instead of testing every worker's model and adapters
    /// for every request. A `Rows` is filled for one compiled trace, whose workers
    /// these are.
    served: Vec<Reasons>,
    /// The `(model, adapter)` that `served` was judged for.
    served_for: Option<(NameId, NameId)>,
    dominance: Dominance,
    /// Whether `dominance` is that of the current figures: set by
    /// [`Rows::compute_dominance`], cleared by [`Rows::fill`].
    dominance_current: bool,
}

/// `a · b` for factors under 2^32, each read as its low 32 bits: the one multiplication
/// of two 32-bit numbers into 64 bits, which vector code does two at a time where a
/// full 64-bit product takes three.
#[inline(always)]
fn narrow_product(a: u64, b: u64) -> u64 {
    u64::from(a as u32) * u64::from(b as u32)
}

/// [`Rows::fill_work`]'s loop when every factor is under 2^32: from the request's
/// `[prompt tokens, decode weight, decode work]` and the reuse and load columns, fills
/// the recomputed, work, cost and after columns, and returns the OR of every load, so
/// that the caller can tell whether the loads were narrow enough for the figures to be
/// right (each product reads its factors' low 32 bits, so a wider load makes a wrong
/// figure but never an overflow). Its own function, with every column
/// a slice argument of its own, because the compiler may then take them not to
/// overlap: filled through the rows' fields (or slices passed in an array), the
/// vector loop first tested every pair of columns for overlap, about 290 instructions
/// a request.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn fill_work_narrow(
    [prompt_tokens, decode_weight, decode_milli]: [u64; 3],
    reuse: &[u64],
    queued: &[u64],
    active: &[u64],
    recomputed: &mut [u64],
    work: &mut [u64],
    cost: &mut [u64],
    after: &mut [u64],
) -> u64 {
    let n = reuse.len();
    let (queued, active) = (&queued[..n], &active[..n]);
    let (recomputed, work, cost, after) = (
        &mut recomputed[..n],
        &mut work[..n],
        &mut cost[..n],
        &mut after[..n],
    );
    let mut loads = 0;
    for w in 0..n {
        loads |= queued[w] | active[w];
        recomputed[w] = prompt_tokens - reuse[w];
        work[w] = narrow_product(1000, queued[w]) + narrow_product(decode_weight, active[w]);
        cost[w] = narrow_product(1000, recomputed[w]) + work[w];
        after[w] = cost[w] + decode_milli;
    }
    loads
}

/// [`fill_work_narrow`], checked in debug builds against SPEC.md §4.4's saturating
/// form ([`saturated_work`]) on every row whose loads were narrow enough for the fast
/// figures to be right.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fill_work_narrow_checked(
    factors: [u64; 3],
    reuse: &[u64],
    queued: &[u64],
    active: &[u64],
    recomputed: &mut [u64],
    work: &mut [u64],
    cost: &mut [u64],
    after: &mut [u64],
) -> u64 {
    let loads = fill_work_narrow(
        factors, reuse, queued, active, recomputed, work, cost, after,
    );
    #[cfg(debug_assertions)]
    if loads < 1 << 32 {
        let [prompt_tokens, decode_weight, decode_milli] = factors;
        for w in 0..reuse.len() {
            let plain = saturated_work(
                prompt_tokens,
                reuse[w],
                queued[w],
                active[w],
                decode_weight,
                decode_milli,
            );
            let fast = (recomputed[w], work[w], cost[w], after[w]);
            debug_assert_eq!(fast, plain, "row {w}'s work figures");
        }
    }
    loads
}

/// One row's `(recomputed, work, cost, after)` by SPEC.md §4.4 in saturating
/// arithmetic: the plain form the vector loop is checked against.
#[cfg(debug_assertions)]
fn saturated_work(
    prompt_tokens: u64,
    reuse: u64,
    queued: u64,
    active: u64,
    decode_weight: u64,
    decode_milli: u64,
) -> (u64, u64, u64, u64) {
    let recomputed = prompt_tokens - reuse;
    let work = 1000u64
        .saturating_mul(queued)
        .saturating_add(decode_weight.saturating_mul(active));
    let recomputed_milli = 1000u64.saturating_mul(recomputed);
    let cost = recomputed_milli.saturating_add(work);
    (recomputed, work, cost, cost.saturating_add(decode_milli))
}

impl Rows {
    pub fn new(worker_count: usize) -> Self {
        Rows {
            reasons: vec![Reasons::default(); worker_count],
            reuse: vec![0; worker_count],
            recomputed: vec![0; worker_count],
            queued_prefill: vec![0; worker_count],
            active_decode: vec![0; worker_count],
            work_milli: vec![0; worker_count],
            after_milli: vec![0; worker_count],
            cost_milli: vec![0; worker_count],
            prompt_tokens: 0,
            walk: WalkScratch::new(worker_count),
            served: vec![Reasons::default(); worker_count],
            served_for: None,
            dominance: Dominance::default(),
            dominance_current: false,
        }
    }

    pub fn len(&self) -> usize {
        self.reasons.len()
    }

    pub fn is_empty(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Whether row `w` may serve the request at all (SPEC.md §4.1).
    pub fn eligible(&self, w: usize) -> bool {
        eligible(self.reasons[w])
    }

    /// Computes every worker's row for `request` at tick `tick`, draining each worker
    /// up to `tick` first: everything but the imbalance term of the cost, which needs
    /// every row first, and the Dynamo cost ([`crate::route::policy::price`] adds or
    /// replaces them).
    pub fn fill(
        &mut self,
        tick: u64,
        request: &Req,
        compiled: &Compiled,
        state: &mut RouterState,
        params: &PolicyParams,
        rule: &mut NamespaceRule,
    ) {
        self.dominance_current = false;
        crate::route::cache::work::count(compiled.workers.len() as u64);
        self.fill_eligibility(tick, request, compiled, state, params);
        reuse_walk_rows(
            request,
            &state.cache,
            &compiled.tables,
            rule,
            &mut self.walk,
            &mut self.reuse,
            &mut self.reasons,
        );
        self.prompt_tokens = request.prompt_tokens;
        self.fill_work(request, params);
        #[cfg(debug_assertions)]
        self.check_filled(compiled, state);
    }

    /// Checks the filled rows in debug builds: one row per worker in every column, and
    /// each row's figures consistent with each other and with the worker's load.
    #[cfg(debug_assertions)]
    fn check_filled(&self, compiled: &Compiled, state: &RouterState) {
        let n = compiled.workers.len();
        debug_assert_eq!(self.len(), n, "rows for workers");
        debug_assert_eq!(state.workers.len(), n, "worker states for workers");
        for column in [&self.reuse, &self.recomputed, &self.queued_prefill] {
            debug_assert_eq!(column.len(), n, "a column's rows");
        }
        for column in [&self.active_decode, &self.work_milli, &self.after_milli] {
            debug_assert_eq!(column.len(), n, "a column's rows");
        }
        debug_assert_eq!(self.cost_milli.len(), n, "the cost column's rows");
        for w in 0..n {
            debug_assert!(self.reuse[w] <= self.prompt_tokens, "row {w}'s reuse");
            debug_assert!(
                self.reuse[w] == 0 || self.eligible(w),
                "row {w} is not walked but reuses"
            );
            debug_assert_eq!(
                self.reuse[w] + self.recomputed[w],
                self.prompt_tokens,
                "row {w}'s reuse and recomputed tokens"
            );
            debug_assert_eq!(
                self.queued_prefill[w], state.workers[w].queued_prefill,
                "row {w}"
            );
            debug_assert_eq!(
                self.active_decode[w], state.workers[w].active_decode,
                "row {w}"
            );
            debug_assert!(self.after_milli[w] >= self.work_milli[w], "row {w}'s after");
        }
    }

    /// Fills each row's recomputed tokens (its reuse the walk capped at the prompt),
    /// its work, its work after placement and its cost before the imbalance term. Its
    /// own function, like [`Rows::fill_eligibility`]: each loop is then compiled on its
    /// own, the same way whatever else changes around it.
    #[inline(never)]
    fn fill_work(&mut self, request: &Req, params: &PolicyParams) {
        let prompt_tokens = request.prompt_tokens;
        let decode_weight = params.decode_weight_milli;
        let decode_milli = decode_weight.saturating_mul(request.decode_tokens);
        let decode_ignored = active(Mutant::DecodeIgnored);
        // Below these bounds no sum can overflow (1000·2^32 + 2^31·2^32 + 1000·2^32 +
        // 2^62 < 2^64), and every product is of two factors under 2^32, which the
        // processor multiplies two rows at a time: so when every row's load is under
        // 2^32 too, the rows are filled by plain arithmetic in a loop without a branch,
        // which the compiler vectorises. That loop ORs the loads together as it goes
        // (a pass of its own over the load columns cost more than the OR does there),
        // and when one of them is wider, the saturating loop fills every row again.
        // It is for figures the overflow rule (§1.4) keeps out of a valid trace anyway,
        // and for the mutant that prices decode as free.
        let small_factors = !decode_ignored
            && decode_weight < 1 << 31
            && decode_milli < 1 << 62
            && prompt_tokens < 1 << 32;
        if small_factors
            && fill_work_narrow_checked(
                [prompt_tokens, decode_weight, decode_milli],
                &self.reuse,
                &self.queued_prefill,
                &self.active_decode,
                &mut self.recomputed,
                &mut self.work_milli,
                &mut self.cost_milli,
                &mut self.after_milli,
            ) < 1 << 32
        {
            return;
        }
        // Zipped slices rather than indexes: this loop runs once per worker per request.
        let columns = self
            .reuse
            .iter()
            .zip(&mut self.recomputed)
            .zip(self.work_milli.iter_mut().zip(&mut self.after_milli))
            .zip(&mut self.cost_milli)
            .zip(self.queued_prefill.iter().zip(&self.active_decode));
        // Saturating u64 arithmetic of non-negative terms is the exact sum narrowed by
        // `to_u64`.
        for ((((&reuse, recomputed), (work, after)), cost), (&queued, &active)) in columns {
            *recomputed = prompt_tokens - reuse;
            *work = 1000u64
                .saturating_mul(queued)
                .saturating_add(decode_weight.saturating_mul(active));
            let recomputed_milli = 1000u64.saturating_mul(*recomputed);
            *after = work
                .saturating_add(recomputed_milli)
                .saturating_add(decode_milli);
            // The mutant prices a worker by its prefill queue alone, as if decode were
            // free.
            let work_in_cost = if decode_ignored {
                1000u64.saturating_mul(queued)
            } else {
                *work
            };
            *cost = recomputed_milli.saturating_add(work_in_cost);
        }
    }

    /// Drains every worker to `tick` and fills its reasons before the walk (model,
    /// adapter, freshness, evidence gap), its load, and a reuse of 0.
    #[inline(never)]
    fn fill_eligibility(
        &mut self,
        tick: u64,
        request: &Req,
        compiled: &Compiled,
        state: &mut RouterState,
        params: &PolicyParams,
    ) {
        let freshness_ticks = params
            .freshness_ticks
            .filter(|_| !active(Mutant::FreshnessIgnored));
        let sequential = state.epochs == EpochsMode::Sequential;
        // Most traces have no freshness window and parallel epochs: their loop, compiled
        // apart, judges model and adapter alone.
        if freshness_ticks.is_none() && !sequential {
            self.fill_rows::<false>(tick, request, compiled, state, None, false);
        } else {
            self.fill_rows::<true>(tick, request, compiled, state, freshness_ticks, sequential);
        }
    }

    /// [`Rows::fill_eligibility`]'s loop; without `EVIDENCE_RULES` neither the
    /// freshness window nor the evidence gap can apply.
    #[inline(always)]
    fn fill_rows<const EVIDENCE_RULES: bool>(
        &mut self,
        tick: u64,
        request: &Req,
        compiled: &Compiled,
        state: &mut RouterState,
        freshness_ticks: Option<u64>,
        sequential: bool,
    ) {
        if self.served_for != Some((request.model, request.adapter)) {
            self.judge_served(request, compiled);
        }
        // Zipped slices rather than indexes: the columns are distinct borrows, so their
        // pointers stay in registers through the loop, which runs once per worker per
        // request.
        let workers = self.served.iter().zip(&mut state.workers);
        let columns = self
            .reasons
            .iter_mut()
            .zip(&mut self.reuse)
            .zip(self.queued_prefill.iter_mut().zip(&mut self.active_decode));
        let drain = tick > state.all_drained_to_tick;
        for ((&served, worker), ((reasons, reuse), (queued, active))) in workers.zip(columns) {
            if drain {
                worker.drain_to(tick);
            }
            let mut row_reasons = served;
            if EVIDENCE_RULES && eligible(served) {
                let stale = freshness_ticks
                    .is_some_and(|window| tick.saturating_sub(worker.last_heard()) > window);
                if stale {
                    row_reasons.insert(Reason::StaleView);
                }
                // Sequential epochs with one missing: the evidence is kept but not used.
                if sequential && worker.has_gap() {
                    row_reasons.insert(Reason::EvidenceGap);
                }
            }
            *reasons = row_reasons;
            *reuse = 0;
            *queued = worker.queued_prefill;
            *active = worker.active_decode;
        }
        if drain {
            state.all_drained_to_tick = tick;
        }
    }

    /// Fills `served` for `request`'s model and adapter: a worker of another model
    /// does not serve it, nor one without its adapter (unless it asks for the base).
    #[cold]
    #[inline(never)]
    fn judge_served(&mut self, request: &Req, compiled: &Compiled) {
        let base = compiled.base_adapter;
        for (served, spec) in self.served.iter_mut().zip(&compiled.workers) {
            let mut reasons = Reasons::default();
            if spec.model != request.model {
                reasons.insert(Reason::ModelNotServed);
            } else if request.adapter != base
                && spec.adapters.binary_search(&request.adapter).is_err()
            {
                reasons.insert(Reason::AdapterNotLoaded);
            }
            *served = reasons;
        }
        self.served_for = Some((request.model, request.adapter));
    }

    /// Eligible and cut neither by the overload cap nor by the cold reserve: the rows
    /// that compete for dominance.
    pub fn in_front_set(&self, w: usize) -> bool {
        in_front_set(self.reasons[w])
    }

    /// B dominates A when it reuses at least as much and leaves at most as much work
    /// after placement, one of them strictly; both must be in the front set.
    pub fn dominates(&self, b: usize, a: usize) -> bool {
        let (reuse_a, after_a) = (self.reuse[a], self.after_milli[a]);
        let (reuse_b, after_b) = (self.reuse[b], self.after_milli[b]);
        self.in_front_set(a)
            && self.in_front_set(b)
            && reuse_b >= reuse_a
            && after_b <= after_a
            && (reuse_b > reuse_a || after_b < after_a)
    }

    /// Whether any row dominates row `a`: O(workers), for the metrics of every run,
    /// receipt or none.
    pub fn is_dominated(&self, a: usize) -> bool {
        let dominated = self.is_dominated_fast(a);
        // Debug builds check the zipped form against the plain test of every row.
        debug_assert_eq!(
            dominated,
            (0..self.len()).any(|b| self.dominates(b, a)),
            "row {a}"
        );
        dominated
    }

    /// [`Rows::is_dominated`] without its debug-build check.
    fn is_dominated_fast(&self, a: usize) -> bool {
        count_dominance(self.len() as u64);
        if !self.in_front_set(a) {
            return false;
        }
        let (reuse_a, after_a) = (self.reuse[a], self.after_milli[a]);
        // [`Rows::dominates`] over zipped columns: row `a`'s figures are read once, and
        // the cheap comparisons come before the front-set test.
        let figures = self.reuse.iter().zip(&self.after_milli);
        figures
            .zip(&self.reasons)
            .any(|((&reuse_b, &after_b), &reasons_b)| {
                reuse_b >= reuse_a
                    && after_b <= after_a
                    && (reuse_b > reuse_a || after_b < after_a)
                    && in_front_set(reasons_b)
            })
    }

    /// Finds every row's dominance for the current figures, reasons included (so after
    /// the policy has chosen: the overload cap and the cold reserve decide the front
    /// set): O(workers · log workers) dominance operations (SPEC.md §1.5).
    pub fn compute_dominance(&mut self) {
        let reasons = &self.reasons;
        self.dominance
            .compute(&self.reuse, &self.after_milli, |w| in_front_set(reasons[w]));
        self.dominance_current = true;
    }

    /// The first (smallest-id) row that dominates row `a`, and how many do, as
    /// [`Rows::compute_dominance`] found them.
    pub fn dominance(&self, a: usize) -> (Option<usize>, u64) {
        assert!(
            self.dominance_current,
            "compute_dominance must follow the rows' last fill"
        );
        let (first, count) = self.dominance.of(a);
        debug_assert_eq!(first.is_some(), count > 0, "row {a}'s dominance");
        debug_assert!(
            first.is_none_or(|b| self.dominates(b, a)),
            "row {a}'s first"
        );
        debug_assert!(count as usize <= self.len(), "row {a}'s dominance count");
        (first, count)
    }

    /// Row `w` as the receipt lists it.
    pub fn candidate_row(&self, w: usize) -> CandidateRow {
        let (dominated_by, dominated_count) = self.dominance(w);
        CandidateRow {
            worker: w,
            eligible: self.eligible(w),
            reasons: self.reasons[w],
            reuse: self.reuse[w],
            recomputed: self.recomputed[w],
            queued_prefill: self.queued_prefill[w],
            active_decode: self.active_decode[w],
            work_milli: self.work_milli[w],
            after_milli: self.after_milli[w],
            cost_milli: self.cost_milli[w],
            dominated_by,
            dominated_count,
        }
    }

    /// Every row as the receipt lists it, dominance included (computed first): O(workers).
    pub fn to_candidate_rows(&self) -> Vec<CandidateRow> {
        (0..self.len()).map(|w| self.candidate_row(w)).collect()
    }
}

/// Whether a row with these reasons may serve the request at all (SPEC.md §4.1).
pub(crate) fn eligible(reasons: Reasons) -> bool {
    !reasons.intersects(Reasons::INELIGIBLE)
}

/// Whether a row with these reasons is in the front set (SPEC.md §4.6): eligible, and
/// cut neither by the overload cap nor by the cold reserve.
pub(crate) fn in_front_set(reasons: Reasons) -> bool {
    !reasons.intersects(Reasons::OUTSIDE_FRONT_SET)
}

/// One row's Dynamo cost (SPEC.md §4.8): Dynamo's `prefill blocks - overlap blocks +
/// decode blocks` in blocks of `block_tokens`, times `1000 * block_tokens` so that it
/// is an integer. Dynamo's indexer matches whole blocks only, so a partial last block of
/// reuse earns nothing; its decode term counts the blocks the outstanding decode tokens
/// fill, the last one partly. `reuse <= prompt_tokens`, so the prefill is never negative.
pub fn dynamo_cost_milli(
    reuse: u64,
    queued_prefill: u64,
    prompt_tokens: u64,
    active_decode: u64,
    block_tokens: u64,
) -> u64 {
    let b = u128::from(block_tokens.max(1));
    // The mutant credits the partial last block too, as a token-level index would.
    let overlap_tokens = if active(Mutant::DynamoPartialBlocks) {
        u128::from(reuse)
    } else {
        b * (u128::from(reuse) / b)
    };
    let prefill_tokens =
        (u128::from(queued_prefill) + u128::from(prompt_tokens)).saturating_sub(overlap_tokens);
    let decode_blocks = u128::from(active_decode).div_ceil(b);
    to_u64(1000 * prefill_tokens + 1000 * b * decode_blocks)
}

/// The overflow rule (SPEC.md §1.4) bounds every row figure by 2^53 - 1, so this
/// narrowing never saturates on a validated trace; saturating keeps it panic-free.
pub(crate) fn to_u64(value: u128) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// What a policy decided for one request, over its rows. It lives beside the rows
/// rather than with the policies so that the metrics can read it without depending on
/// the policy rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index of the chosen row (and worker), or `None` when rejected.
    pub chosen: Option<usize>,
    pub overload_escape: bool,
    /// Chosen among rows the cold reserve had excluded, because no other row was under
    /// the cap (SPEC.md §4.5).
    pub reserve_fallback: bool,
    pub tie_count: u64,
    pub margin_milli: u64,
    /// Whether a row dominates the chosen one (SPEC.md §4.6), when the policy's own
    /// scan already shows it, so that the metrics need not test every row; `None`
    /// when it does not.
    pub chosen_dominated: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::{dynamo_cost_milli, Rows};
    use crate::input::trace::PolicyParams;
    use crate::route::compiled::Req;

    /// Every row's work figures and its cost before the imbalance term, on the
    /// vectorised path (every load under 2^32) and the saturating one (some load at or
    /// over it), against SPEC.md §4.4's formulas in 128-bit arithmetic with the
    /// overflow rule's saturation at 2^64 - 1: the two paths must agree with the
    /// formulas at the edges of 32 bits, and a request with one wide row must fill its
    /// narrow rows as a request without one does.
    #[test]
    fn work_figures_match_the_formulas_on_both_sides_of_32_bits() {
        let edge = [0, 1, 999, (1 << 32) - 1];
        let wide = [1 << 32, (1 << 53) - 1, u64::MAX];
        let saturate = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        for decode_weight in [0, 1000, (1 << 31) - 1, 1 << 31, (1 << 53) - 1] {
            for prompt_tokens in [0, 700, (1 << 32) - 1, 1 << 32] {
                for wide_row in [None, Some(wide[0]), Some(wide[1]), Some(wide[2])] {
                    let mut loads: Vec<(u64, u64)> = Vec::new();
                    for &queued in &edge {
                        for &active in &edge {
                            loads.push((queued, active));
                        }
                    }
                    if let Some(load) = wide_row {
                        loads.push((load, 3));
                        loads.push((5, load));
                    }
                    let mut rows = Rows::new(loads.len());
                    for (w, &(queued, active)) in loads.iter().enumerate() {
                        rows.queued_prefill[w] = queued;
                        rows.active_decode[w] = active;
                        rows.reuse[w] = (w as u64 * 37) % (prompt_tokens + 1);
                    }
                    let request = Req {
                        id: "r",
                        ns: 0,
                        model: 0,
                        adapter: 0,
                        prefix: Vec::new(),
                        prompt_tokens,
                        decode_tokens: 9,
                    };
                    let params = PolicyParams {
                        decode_weight_milli: decode_weight,
                        ..PolicyParams::default()
                    };
                    rows.fill_work(&request, &params);
                    let decode_milli = saturate(u128::from(decode_weight) * 9);
                    for (w, &(queued, active)) in loads.iter().enumerate() {
                        let recomputed = prompt_tokens - rows.reuse[w];
                        let work = saturate(
                            1000 * u128::from(queued)
                                + u128::from(decode_weight) * u128::from(active),
                        );
                        let after = saturate(
                            u128::from(work)
                                + 1000 * u128::from(recomputed)
                                + u128::from(decode_milli),
                        );
                        let cost = saturate(1000 * u128::from(recomputed) + u128::from(work));
                        let case = format!(
                            "weight {decode_weight}, prompt {prompt_tokens}, wide {wide_row:?}, \
                             row {w} ({queued}, {active})"
                        );
                        assert_eq!(rows.recomputed[w], recomputed, "{case}");
                        assert_eq!(rows.work_milli[w], work, "{case}");
                        assert_eq!(rows.after_milli[w], after, "{case}");
                        assert_eq!(rows.cost_milli[w], cost, "{case}");
                    }
                }
            }
        }
    }

    /// Eligibility and the front set are read off a row's reasons (SPEC.md §4.1,
    /// §4.6): over every set of reasons, a row is eligible exactly when it lists
    /// neither the model nor the adapter as missing, and in the front set exactly when
    /// it is eligible and cut by neither the cap nor the reserve.
    #[test]
    fn eligibility_and_the_front_set_follow_the_reasons() {
        use crate::route::reason::{Reason, Reasons};
        for bits in 0..1u32 << Reason::ALL.len() {
            let mut reasons = Reasons::default();
            for (i, &reason) in Reason::ALL.iter().enumerate() {
                if bits & 1 << i != 0 {
                    reasons.insert(reason);
                }
            }
            let is_eligible = !reasons.contains(Reason::ModelNotServed)
                && !reasons.contains(Reason::AdapterNotLoaded);
            let front = is_eligible
                && !reasons.contains(Reason::Overloaded)
                && !reasons.contains(Reason::ColdReserve);
            assert_eq!(super::eligible(reasons), is_eligible, "{reasons:?}");
            assert_eq!(super::in_front_set(reasons), front, "{reasons:?}");
        }
    }

    #[test]
    fn dynamo_cost_counts_whole_blocks_of_reuse_and_rounds_decode_up() {
        // (reuse, queued_prefill, prompt_tokens, active_decode, block_tokens) -> cost,
        // each worked out from SPEC.md §4.8 by hand.
        let cases = [
            // §4.8's worked example, w0 with blocks of 512 and of 1000.
            ((1024, 1000, 1200, 0, 512), 1_176_000),
            ((1024, 1000, 1200, 0, 1000), 1_200_000),
            // One token short of a block: no overlap at all.
            ((511, 0, 600, 0, 512), 600_000),
            // Exactly one block of decode, then one token over it.
            ((0, 0, 10, 512, 512), 10_000 + 512_000),
            ((0, 0, 10, 513, 512), 10_000 + 1_024_000),
            // Blocks of one token: every reused token counts, decode tokens as they are.
            ((7, 3, 10, 5, 1), 6_000 + 5_000),
            // The whole prompt reused in whole blocks: only the queue is left.
            ((256, 40, 256, 0, 64), 40_000),
        ];
        for ((reuse, queued, prompt, active, b), expected) in cases {
            assert_eq!(
                dynamo_cost_milli(reuse, queued, prompt, active, b),
                expected,
                "reuse {reuse}, queued {queued}, prompt {prompt}, active {active}, b {b}"
            );
        }
    }
}
