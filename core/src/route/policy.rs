//! The policy rule: how a row is priced and chosen (SPEC.md §4.4 cost, §4.5, §5).
//!
//! Every policy orders the choosable rows by one score and breaks ties by worker id
//! (rows arrive in id order, so "first in scan order" is "smallest id"). This module is
//! the one place that says what the cache-plus-load cost is (recompute, work, decode
//! weight through `work_milli`, and the imbalance penalty), which cost a run's rows
//! carry (the Dynamo cost of §4.8, [`dynamo_cost_milli`], in `dynamo_default`), what
//! each policy prefers, what the overload cap excludes, how `tie_count` and
//! `margin_milli` are measured, and which route kind a decision gets.

use crate::input::trace::PolicyParams;
use crate::mutant::{active, Mutant};
use crate::route::candidate::{dynamo_cost_milli, eligible, in_front_set, to_u64, Choice, Rows};
use crate::route::reason::{Reason, Reasons};

/// A routing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Policy {
    RoundRobin,
    LeastLoad,
    LongestPrefix,
    CachePlusLoad,
    /// Dynamo's default selector restated in integers (SPEC.md §4.8): a run only of a
    /// trace that sets `policy.dynamo_block_tokens`.
    DynamoDefault,
}

impl Policy {
    /// Every policy, in receipt order: what a policy name may be (`diff --baseline`, a
    /// receipt's runs). Which of them a trace's receipt has is [`Policy::runs_for`].
    pub const ALL: [Policy; 5] = [
        Policy::RoundRobin,
        Policy::LeastLoad,
        Policy::LongestPrefix,
        Policy::CachePlusLoad,
        Policy::DynamoDefault,
    ];

    /// The four policies of SPEC.md §5 that every receipt has, in receipt order; also
    /// the closed loop's comparison (§7: `dynamo_default` is no closed-loop policy).
    pub const STANDARD: [Policy; 4] = [
        Policy::RoundRobin,
        Policy::LeastLoad,
        Policy::LongestPrefix,
        Policy::CachePlusLoad,
    ];

    /// The runs a trace with these parameters has, in receipt order: the four, then
    /// `dynamo_default` when `dynamo_block_tokens` is set (SPEC.md §6), so a default
    /// trace keeps its four runs and its receipt bytes.
    pub fn runs_for(params: &PolicyParams) -> &'static [Policy] {
        if params.dynamo_block_tokens.is_some() {
            &Policy::ALL
        } else {
            &Policy::STANDARD
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::LeastLoad => "least_load",
            Policy::LongestPrefix => "longest_prefix",
            Policy::CachePlusLoad => "cache_plus_load",
            Policy::DynamoDefault => "dynamo_default",
        }
    }

    /// Whether the policy chooses by the rows' `cost_milli` (otherwise only a receipt
    /// reads it, to show what cache-plus-load would have paid).
    pub fn chooses_by_cost(self) -> bool {
        matches!(self, Policy::CachePlusLoad | Policy::DynamoDefault)
    }

    /// The policy a receipt names `name`, if any.
    pub fn from_name(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name() == name)
    }
}

const REJECTED: Choice = Choice {
    chosen: None,
    overload_escape: false,
    reserve_fallback: false,
    tie_count: 0,
    margin_milli: 0,
    chosen_dominated: None,
};

/// How a request was routed (SPEC.md §5, "Route kind").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    Rejected,
    OverloadEscape,
    Hit,
    Cold,
}

impl RouteKind {
    pub fn name(self) -> &'static str {
        match self {
            RouteKind::Rejected => "rejected",
            RouteKind::OverloadEscape => "overload_escape",
            RouteKind::Hit => "hit",
            RouteKind::Cold => "cold",
        }
    }

    /// `rejected`; else `overload_escape`; else `hit` when the chosen row reuses
    /// something; else `cold`.
    pub fn of(choice: &Choice, rows: &Rows) -> RouteKind {
        match choice.chosen {
            None => RouteKind::Rejected,
            Some(_) if choice.overload_escape => RouteKind::OverloadEscape,
            Some(c) if rows.reuse[c] > 0 => RouteKind::Hit,
            Some(_) => RouteKind::Cold,
        }
    }
}

/// Fills every row's `cost_milli` for `policy`'s run: the Dynamo cost of SPEC.md §4.8
/// in the `dynamo_default` run, the cache-plus-load cost of §4.4 in every other.
pub fn price(policy: Policy, rows: &mut Rows, params: &PolicyParams) {
    match policy {
        Policy::DynamoDefault => price_dynamo(rows, params),
        _ => price_cache_plus_load(rows, params),
    }
}

/// Every row's Dynamo cost (SPEC.md §4.8), eligible or not. A trace without
/// `dynamo_block_tokens` has no `dynamo_default` run; a caller that runs one anyway
/// (a benchmark, a test) gets blocks of one token rather than a division by zero.
fn price_dynamo(rows: &mut Rows, params: &PolicyParams) {
    let block_tokens = params.dynamo_block_tokens.unwrap_or(1).max(1);
    for w in 0..rows.len() {
        rows.cost_milli[w] = dynamo_cost_milli(
            rows.reuse[w],
            rows.queued_prefill[w],
            rows.prompt_tokens,
            rows.active_decode[w],
            block_tokens,
        );
    }
}

/// Completes every row's `cost_milli` (SPEC.md §4.4): `1000 * recomputed +
/// work_milli + imbalance`, where the imbalance penalises a row whose after-placement
/// work is above the eligible rows' mean. [`Rows::fill`] left each row its cost before
/// the imbalance term, which is the whole cost when the penalty is 0. Every row is
/// priced, eligible or not, for every policy but `dynamo_default`: the receipt shows
/// what cache-plus-load would have paid.
fn price_cache_plus_load(rows: &mut Rows, params: &PolicyParams) {
    let imbalance_penalty = params.imbalance_penalty_milli as u128;
    if imbalance_penalty == 0 {
        return;
    }
    // The eligible rows' count and after sum: the mean the penalty is measured from.
    let (eligible_count, after_sum) = rows
        .reasons
        .iter()
        .zip(&rows.after_milli)
        .filter(|(&reasons, _)| eligible(reasons))
        .fold((0u128, 0u128), |(count, sum), (_, &after)| {
            (count + 1, sum + after as u128)
        });
    if eligible_count == 0 {
        return;
    }
    for (cost, &after) in rows.cost_milli.iter_mut().zip(&rows.after_milli) {
        let excess = (eligible_count * after as u128).saturating_sub(after_sum);
        // A row at or below the mean pays nothing: no 128-bit division for it.
        if excess > 0 {
            let imbalance = imbalance_penalty * excess / (1000 * eligible_count);
            *cost = to_u64(*cost as u128 + imbalance);
        }
    }
}

/// Prices the rows where the choice or a reader of the rows (`rows_read`, a receipt)
/// needs the cost ([`price`]), then chooses ([`choose`]). Without an imbalance term
/// pricing a cache-plus-load row adds nothing to what [`Rows::fill`] left it.
pub fn decide(
    policy: Policy,
    rows: &mut Rows,
    params: &PolicyParams,
    cursor: &mut usize,
    rows_read: bool,
) -> Choice {
    if policy.chooses_by_cost() || rows_read {
        price(policy, rows, params);
    }
    choose(policy, rows, params, cursor)
}

/// Chooses a row. For `cache_plus_load` with a cap this first marks excluded rows
/// `overloaded`. `cursor` is the round-robin position, untouched by other policies.
pub fn choose(
    policy: Policy,
    rows: &mut Rows,
    params: &PolicyParams,
    cursor: &mut usize,
) -> Choice {
    let choice = choose_unchecked(policy, rows, params, cursor);
    debug_assert!(choice.chosen.is_none_or(|w| w < rows.len()), "{choice:?}");
    debug_assert!(choice.chosen.is_none_or(|w| rows.eligible(w)), "{choice:?}");
    debug_assert_eq!(
        choice.chosen.is_some(),
        (0..rows.len()).any(|w| rows.eligible(w)),
        "a policy rejects only when no row is eligible"
    );
    debug_assert!(
        choice.chosen.is_none() || choice.tie_count >= 1,
        "{choice:?}"
    );
    debug_assert!(
        !(choice.overload_escape && choice.reserve_fallback),
        "{choice:?}"
    );
    choice
}

/// [`choose`] without its debug-build checks of the choice.
fn choose_unchecked(
    policy: Policy,
    rows: &mut Rows,
    params: &PolicyParams,
    cursor: &mut usize,
) -> Choice {
    match policy {
        Policy::RoundRobin => round_robin(rows, cursor),
        // Smaller work first.
        Policy::LeastLoad => best_of(eligible_scores(&rows.reasons, &rows.work_milli), 1),
        // Larger reuse first: order by the reuse a row lacks against the largest possible.
        Policy::LongestPrefix => best_of(
            eligible_scores(&rows.reasons, &rows.reuse).map(|(w, reuse)| (w, u64::MAX - reuse)),
            1000,
        ),
        Policy::CachePlusLoad => cache_plus_load(rows, params),
        // The Dynamo cost over every eligible row: no cap and no reserve apply (§4.8),
        // and Dynamo's random tie-break becomes the smallest id.
        Policy::DynamoDefault => best_of(eligible_scores(&rows.reasons, &rows.cost_milli), 1),
    }
}

/// `(row, score)` for every eligible row (by its `reasons`), from the `score` column.
fn eligible_scores<'r>(
    reasons: &'r [Reasons],
    score: &'r [u64],
) -> impl Iterator<Item = (usize, u64)> + 'r {
    reasons
        .iter()
        .zip(score)
        .enumerate()
        .filter(|(_, (&reasons, _))| eligible(reasons))
        .map(|(w, (_, &score))| (w, score))
}

fn round_robin(rows: &Rows, cursor: &mut usize) -> Choice {
    let n = rows.len();
    for step in 0..n {
        let i = (*cursor + step) % n;
        if rows.eligible(i) {
            // The cursor is only ever read modulo n, so "past the last" wraps there.
            *cursor = i + 1;
            return Choice {
                chosen: Some(i),
                overload_escape: false,
                reserve_fallback: false,
                tie_count: 1,
                margin_milli: 0,
                chosen_dominated: None,
            };
        }
    }
    REJECTED
}

/// `cache_plus_load`'s choice (SPEC.md §4.4, §4.5) over the rows' costs.
fn cache_plus_load(rows: &mut Rows, params: &PolicyParams) -> Choice {
    let cap = if active(Mutant::OverloadCapIgnored) {
        None
    } else {
        params.max_queued_work
    };
    if let Some(cap) = cap {
        let cap_milli = 1000 * cap as u128;
        // Rows with reuse stop at the cap minus the reserve; cold rows may use it all.
        let hit_cap_milli = params
            .cold_reserve_milli
            .map(|reserve| cap_milli.saturating_sub(reserve as u128));
        for w in 0..rows.len() {
            if !rows.eligible(w) {
                continue;
            }
            let after = rows.after_milli[w] as u128;
            if after > cap_milli {
                rows.reasons[w].insert(Reason::Overloaded);
            } else if let Some(hit_cap) = hit_cap_milli {
                // The mutant holds cold rows to the reserve too.
                let reserved = rows.reuse[w] > 0 || active(Mutant::ReserveOnCold);
                if reserved && after > hit_cap {
                    rows.reasons[w].insert(Reason::ColdReserve);
                }
            }
        }
    }
    let rows = &*rows;
    let best = scan_cheapest(rows);
    let choice = best.choice(1);
    #[cfg(debug_assertions)]
    check_cheapest(rows, &best, choice);
    if let Some(chosen) = choice.chosen {
        return Choice {
            chosen_dominated: cheapest_dominated(rows, params, chosen, best.tied_reuse_max),
            ..choice
        };
    }
    if !rows.reasons.iter().any(|&reasons| eligible(reasons)) {
        return choice;
    }
    // The reserve is a preference, the cap a limit: reserved-out rows come before an
    // escape past the cap.
    let fallback = best_by(
        rows,
        |w| under_cap(rows.reasons[w]),
        |w| rows.cost_milli[w],
        1,
    );
    if fallback.chosen.is_some() {
        return Choice {
            reserve_fallback: true,
            ..fallback
        };
    }
    // Every eligible row is over the cap: escape to the one that ends up least loaded.
    Choice {
        overload_escape: true,
        ..best_by(rows, |w| rows.eligible(w), |w| rows.after_milli[w], 1)
    }
}

/// Whether a row with these reasons is eligible and not over the overload cap: the
/// rows `cache_plus_load` falls back to when its front set is empty (SPEC.md §4.5).
fn under_cap(reasons: Reasons) -> bool {
    eligible(reasons) && !reasons.contains(Reason::Overloaded)
}

/// Which of a decision's rows `policy`'s run could choose, from their reasons
/// (SPEC.md §5): in `cache_plus_load`, the front set, or when it is empty the rows
/// under the cap, or when there is none either every eligible row, the same tiers
/// [`cache_plus_load`] chooses from; in every other run, every eligible row.
pub fn choosable_rows(policy: Policy, reasons: &[Reasons]) -> Vec<bool> {
    let tier =
        |keep: fn(Reasons) -> bool| -> Vec<bool> { reasons.iter().map(|&r| keep(r)).collect() };
    if policy != Policy::CachePlusLoad {
        return tier(eligible);
    }
    for keep in [in_front_set as fn(Reasons) -> bool, under_cap] {
        let rows = tier(keep);
        if rows.contains(&true) {
            return rows;
        }
    }
    tier(eligible)
}

/// Checks the choosing scan's answer against a plain pass over the rows, in debug
/// builds: the chosen row is in the front set and the cheapest, the first of its cost
/// (the last under the mutant that gives ties to the last), its ties counted, its
/// runner-up the next cost and the tied reuse the largest among the cheapest.
#[cfg(debug_assertions)]
fn check_cheapest(rows: &Rows, best: &Best, choice: Choice) {
    let front = || (0..rows.len()).filter(|&w| in_front_set(rows.reasons[w]));
    debug_assert_eq!(best.offered, front().count() as u64, "rows offered");
    let Some(chosen) = choice.chosen else {
        debug_assert_eq!(front().count(), 0, "a scan of front rows chooses one");
        return;
    };
    debug_assert!(in_front_set(rows.reasons[chosen]), "row {chosen}");
    let cost = rows.cost_milli[chosen];
    let cheapest = || front().filter(|&w| rows.cost_milli[w] == cost);
    debug_assert!(front().all(|w| rows.cost_milli[w] >= cost), "row {chosen}");
    let first = if best.ties_to_last {
        cheapest().next_back()
    } else {
        cheapest().next()
    };
    debug_assert_eq!(first, Some(chosen), "the tie rule");
    if !best.ties_to_last {
        let ties = cheapest().count() as u64;
        debug_assert_eq!(choice.tie_count, ties, "row {chosen}'s ties");
        let tied_reuse_max = cheapest().map(|w| rows.reuse[w]).max();
        debug_assert_eq!(Some(best.tied_reuse_max), tied_reuse_max, "row {chosen}");
    }
    let runner_up = front()
        .filter(|&w| w != chosen)
        .map(|w| rows.cost_milli[w])
        .min();
    let margin = runner_up.map_or(0, |next| next - cost);
    debug_assert_eq!(choice.margin_milli, margin, "row {chosen}'s margin");
}

/// Offers every front-set row at its cost.
fn scan_cheapest(rows: &Rows) -> Best {
    // Slices of one length, indexed in a plain loop: the bounds checks fold away.
    let n = rows.len();
    let (reasons, reuse, cost) = (&rows.reasons[..n], &rows.reuse[..n], &rows.cost_milli[..n]);
    let mut best = Best::new();
    // Nearly always every row is in the front set. One OR over the reasons says so,
    // and then the scan offers every row without testing its reasons and counts the
    // rows once, at the end, instead of once a row.
    let any_reasons = reasons
        .iter()
        .fold(Reasons::default(), |all, &r| all.union(r));
    if in_front_set(any_reasons) && n > 0 {
        best.offer_noting_reuse(0, cost[0], reuse[0]);
        for w in 1..n {
            best.offer_later_noting_reuse(w, cost[w], reuse[w]);
        }
        best.offered = n as u64;
        return best;
    }
    for w in 0..n {
        if in_front_set(reasons[w]) {
            best.offer_noting_reuse(w, cost[w], reuse[w]);
        }
    }
    best
}

/// Whether a row dominates the front-set row `chosen` of the smallest cost, read off
/// the choosing scan: `tied_reuse_max` is the largest reuse of the front rows of that
/// cost. Without an imbalance term a row's cost is `T = 1000 * recomputed +
/// work_milli` and its work after placement `T + decode_milli`, each saturated at
/// 2^64 - 1. While `chosen`'s work after placement is unsaturated, a front row leaves
/// at most as much work after placement exactly when its `T` is at most `chosen`'s,
/// that is when it shares the smallest cost, and then it leaves exactly as much; so a
/// row dominates `chosen` exactly when it shares the cost and reuses more. `None`
/// where that reasoning does not hold.
fn cheapest_dominated(
    rows: &Rows,
    params: &PolicyParams,
    chosen: usize,
    tied_reuse_max: u64,
) -> Option<bool> {
    let holds = params.imbalance_penalty_milli == 0
        && rows.after_milli[chosen] < u64::MAX
        // The mutants change the cost or the ties this reasoning reads.
        && !active(Mutant::DecodeIgnored)
        && !active(Mutant::TiesToLast);
    holds.then(|| tied_reuse_max > rows.reuse[chosen])
}

/// The choosable row with the smallest `score`, ties to the smallest id. The margin is
/// the runner-up's score minus the winner's, times `margin_scale` (1000 turns a token
/// count into milli-units).
fn best_by(
    rows: &Rows,
    choosable: impl Fn(usize) -> bool,
    score: impl Fn(usize) -> u64,
    margin_scale: u64,
) -> Choice {
    let scored = (0..rows.len())
        .filter(|&w| choosable(w))
        .map(|w| (w, score(w)));
    best_of(scored, margin_scale)
}

/// [`best_by`] over `(row, score)` pairs of the choosable rows, in row order.
fn best_of(scored: impl Iterator<Item = (usize, u64)>, margin_scale: u64) -> Choice {
    let mut best = Best::new();
    for (row, score) in scored {
        best.offer(row, score);
    }
    best.choice(margin_scale)
}

/// The smallest score offered so far, its row, how many rows share it and the
/// smallest score of the others: what [`best_by`] keeps while it scans. Plain fields
/// rather than options, so the scan's one test per row is a comparison.
#[derive(Debug, Clone, Copy)]
struct Best {
    /// Rows offered so far.
    offered: u64,
    score: u64,
    row: usize,
    tie_count: u64,
    /// The smallest score of the rows offered but not chosen; read once two rows have
    /// been offered.
    runner_up: u64,
    /// The mutant lets a later row with an equal score take the lead.
    ties_to_last: bool,
    /// The largest reuse of the rows offered with the smallest score so far, kept by
    /// [`Best::offer_noting_reuse`] (the mutant's ties aside).
    tied_reuse_max: u64,
}

impl Best {
    fn new() -> Self {
        Best {
            offered: 0,
            score: u64::MAX,
            row: 0,
            tie_count: 0,
            runner_up: u64::MAX,
            ties_to_last: active(Mutant::TiesToLast),
            tied_reuse_max: 0,
        }
    }

    /// [`Best::offer`], also keeping the largest `reuse` of the rows offered with the
    /// smallest score so far.
    #[inline]
    fn offer_noting_reuse(&mut self, row: usize, score: u64, reuse: u64) {
        if self.offered == 0 {
            self.offered = 1;
            (self.score, self.row, self.tie_count) = (score, row, 1);
            self.tied_reuse_max = reuse;
            return;
        }
        self.offered += 1;
        self.offer_later_noting_reuse(row, score, reuse);
    }

    /// [`Best::offer_noting_reuse`] of a row after the first, without counting it: for
    /// a scan that offers every row and counts them itself.
    #[inline(always)]
    fn offer_later_noting_reuse(&mut self, row: usize, score: u64, reuse: u64) {
        // Debug builds check the fast form against the plain one on every row.
        #[cfg(debug_assertions)]
        let (mut plain, before) = (*self, *self);
        #[cfg(debug_assertions)]
        plain.offer(row, score);
        self.offer_later_noting_reuse_fast(row, score, reuse);
        #[cfg(debug_assertions)]
        {
            let figures = |b: &Best| (b.score, b.row, b.tie_count, b.runner_up);
            debug_assert_eq!(figures(self), figures(&plain), "row {row} at {score}");
            debug_assert_eq!(self.offered, before.offered, "an uncounted offer");
            let tied_reuse_max = match score.cmp(&before.score) {
                std::cmp::Ordering::Less => reuse,
                std::cmp::Ordering::Equal => before.tied_reuse_max.max(reuse),
                std::cmp::Ordering::Greater => before.tied_reuse_max,
            };
            debug_assert_eq!(self.tied_reuse_max, tied_reuse_max, "row {row}");
        }
    }

    /// [`Best::offer_later_noting_reuse`] without its debug-build check.
    #[inline(always)]
    fn offer_later_noting_reuse_fast(&mut self, row: usize, score: u64, reuse: u64) {
        // Most rows cost more than the cheapest so far and leave the tied rows' reuse
        // as it is: they are told apart first, so their reuse is never read.
        if score > self.score {
            self.runner_up = self.runner_up.min(score);
            return;
        }
        self.tied_reuse_max = if score < self.score {
            reuse
        } else {
            self.tied_reuse_max.max(reuse)
        };
        if score < self.score || (self.ties_to_last && score == self.score) {
            self.runner_up = self.score;
            (self.score, self.row, self.tie_count) = (score, row, 1);
        } else {
            // The one case left: the score ties the cheapest.
            self.tie_count += 1;
            self.runner_up = self.runner_up.min(score);
        }
    }

    #[inline]
    fn offer(&mut self, row: usize, score: u64) {
        self.offered += 1;
        if self.offered == 1 {
            (self.score, self.row, self.tie_count) = (score, row, 1);
        } else if score < self.score || (self.ties_to_last && score == self.score) {
            self.runner_up = self.score;
            (self.score, self.row, self.tie_count) = (score, row, 1);
        } else {
            if score == self.score {
                self.tie_count += 1;
            }
            // `runner_up` starts at u64::MAX, which no minimum with a real score exceeds.
            self.runner_up = self.runner_up.min(score);
        }
    }

    fn choice(&self, margin_scale: u64) -> Choice {
        if self.offered == 0 {
            return REJECTED;
        }
        let margin_milli = if self.offered == 1 {
            0
        } else {
            (self.runner_up - self.score) * margin_scale
        };
        Choice {
            chosen: Some(self.row),
            overload_escape: false,
            reserve_fallback: false,
            tie_count: self.tie_count,
            margin_milli,
            chosen_dominated: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows from `(eligible, reuse, work, cost)` per worker; after is work + 10. An
    /// ineligible row lists the model as not served.
    fn rows(spec: &[(bool, u64, u64, u64)]) -> Rows {
        let mut rows = Rows::new(spec.len());
        for (w, &(eligible, reuse, work, cost)) in spec.iter().enumerate() {
            if !eligible {
                rows.reasons[w].insert(Reason::ModelNotServed);
            }
            rows.reuse[w] = reuse;
            rows.work_milli[w] = work;
            rows.after_milli[w] = work + 10;
            rows.cost_milli[w] = cost;
        }
        rows
    }

    /// What the choosing scan keeps, against its definition over the whole list of
    /// offered `(score, reuse)` pairs: the smallest score, the first row with it, how
    /// many share it, the smallest score of the other rows (`u64::MAX` when there is
    /// none), and the largest reuse of the rows that share the smallest score. Short
    /// lists of few distinct scores, so ties, equal runners-up and `u64::MAX` scores are
    /// common.
    #[test]
    fn the_scan_keeps_the_cheapest_its_ties_the_runner_up_and_the_tied_reuse() {
        let mut sequence = crate::fixed_sequence::FixedSequence::new(0x9e37_79b9_7f4a_7c15);
        let mut next = |bound: u64| sequence.below(bound);
        let scores = [0, 1, 2, 3, u64::MAX - 1, u64::MAX];
        for case in 0..5_000 {
            let offered: Vec<(u64, u64)> = (0..next(7))
                .map(|_| (scores[next(scores.len() as u64) as usize], next(4)))
                .collect();
            let mut best = Best::new();
            for (row, &(score, reuse)) in offered.iter().enumerate() {
                best.offer_noting_reuse(row, score, reuse);
            }
            // The scan of a front set of every row: the first row offered, the others
            // offered uncounted, the count set at the end.
            if let Some(&(score, reuse)) = offered.first() {
                let mut every_row = Best::new();
                every_row.offer_noting_reuse(0, score, reuse);
                for (row, &(score, reuse)) in offered.iter().enumerate().skip(1) {
                    every_row.offer_later_noting_reuse(row, score, reuse);
                }
                every_row.offered = offered.len() as u64;
                let fields = |b: &Best| {
                    let kept = (b.offered, b.score, b.row, b.tie_count, b.runner_up);
                    (kept, b.tied_reuse_max)
                };
                assert_eq!(
                    fields(&every_row),
                    fields(&best),
                    "case {case}: {offered:?}"
                );
            }
            let Some(&min) = offered.iter().map(|(score, _)| score).min() else {
                assert_eq!(best.offered, 0, "case {case}");
                continue;
            };
            let first = offered.iter().position(|&(score, _)| score == min).unwrap();
            let others = offered.iter().enumerate().filter(|&(row, _)| row != first);
            let runner_up = others
                .map(|(_, &(score, _))| score)
                .min()
                .unwrap_or(u64::MAX);
            let tied = offered.iter().filter(|&&(score, _)| score == min);
            let case = format!("case {case}: {offered:?}");
            assert_eq!(best.offered, offered.len() as u64, "{case}");
            assert_eq!((best.score, best.row), (min, first), "{case}");
            assert_eq!(best.tie_count, tied.clone().count() as u64, "{case}");
            assert_eq!(best.runner_up, runner_up, "{case}");
            let tied_reuse_max = tied.map(|&(_, reuse)| reuse).max().unwrap();
            assert_eq!(best.tied_reuse_max, tied_reuse_max, "{case}");
        }
    }

    #[test]
    fn ties_go_to_the_smallest_id_and_are_counted() {
        let mut rows = rows(&[(true, 5, 7, 3), (true, 5, 7, 3), (true, 1, 9, 4)]);
        let mut cursor = 0;
        let params = PolicyParams::default();
        let c = choose(Policy::LeastLoad, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.tie_count, c.margin_milli), (Some(0), 2, 0));
        let c = choose(Policy::LongestPrefix, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.tie_count, c.margin_milli), (Some(0), 2, 0));
        let c = choose(Policy::CachePlusLoad, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.tie_count), (Some(0), 2));
    }

    #[test]
    fn margins_are_in_each_policys_own_units() {
        let mut rows = rows(&[(true, 1, 9, 40), (true, 4, 7, 30), (false, 9, 0, 0)]);
        let params = PolicyParams::default();
        let mut cursor = 0;
        let c = choose(Policy::LeastLoad, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.margin_milli), (Some(1), 2));
        let c = choose(Policy::LongestPrefix, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.margin_milli), (Some(1), 3000));
        let c = choose(Policy::CachePlusLoad, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, c.margin_milli), (Some(1), 10));
    }

    #[test]
    fn round_robin_skips_ineligible_wraps_and_holds_on_reject() {
        let mut rows = rows(&[(true, 0, 0, 0), (false, 0, 0, 0), (true, 0, 0, 0)]);
        let params = PolicyParams::default();
        let mut cursor = 1;
        let c = choose(Policy::RoundRobin, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, cursor % 3), (Some(2), 0));
        let c = choose(Policy::RoundRobin, &mut rows, &params, &mut cursor);
        assert_eq!((c.chosen, cursor), (Some(0), 1));
        let mut none = super::tests::rows(&[(false, 0, 0, 0), (false, 0, 0, 0)]);
        let c = choose(Policy::RoundRobin, &mut none, &params, &mut cursor);
        assert_eq!((c.chosen, c.tie_count, cursor), (None, 0, 1));
    }

    /// The choosing scan's answer on dominance (SPEC.md §4.6) is the test of every
    /// row's: rows of one cost, the chosen (smallest id) reusing less or more than the
    /// other, and a cheapest row alone.
    #[test]
    fn the_scan_knows_whether_the_cheapest_row_is_dominated() {
        // (reuse, recomputed, work) per row; decode 0, so after = work + 1000 * recomputed,
        // which is also the cost that filling the rows leaves without an imbalance term.
        type Figures = [(u64, u64, u64); 3];
        let cases: [(Figures, bool); 3] = [
            ([(0, 10, 5_000), (5, 5, 10_000), (0, 10, 9_000)], true),
            ([(5, 5, 10_000), (0, 10, 5_000), (0, 10, 9_000)], false),
            ([(0, 10, 4_000), (5, 5, 10_000), (0, 10, 9_000)], false),
        ];
        for (figures, dominated) in cases {
            let mut rows = Rows::new(figures.len());
            for (w, &(reuse, recomputed, work)) in figures.iter().enumerate() {
                rows.reuse[w] = reuse;
                rows.recomputed[w] = recomputed;
                rows.work_milli[w] = work;
                rows.after_milli[w] = work + 1000 * recomputed;
                rows.cost_milli[w] = work + 1000 * recomputed;
            }
            let params = PolicyParams::default();
            let c = choose(Policy::CachePlusLoad, &mut rows, &params, &mut 0);
            let chosen = c.chosen.expect("a row is chosen");
            assert_eq!(c.chosen_dominated, Some(dominated), "{figures:?}");
            assert_eq!(rows.is_dominated(chosen), dominated, "{figures:?}");
        }
    }

    #[test]
    fn cap_excludes_and_escapes_to_least_after() {
        let mut rows = rows(&[(true, 0, 991, 1), (true, 0, 996, 0)]);
        let params = PolicyParams {
            max_queued_work: Some(1),
            ..PolicyParams::default()
        };
        let mut cursor = 0;
        let c = choose(Policy::CachePlusLoad, &mut rows, &params, &mut cursor);
        assert!(c.overload_escape);
        assert_eq!((c.chosen, c.margin_milli), (Some(0), 5));
        assert!(rows.reasons.iter().all(|r| r.contains(Reason::Overloaded)));
    }
}
