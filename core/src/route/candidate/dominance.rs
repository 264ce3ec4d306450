//! Pareto dominance of one decision's rows, found for every row at once (SPEC.md §4.6,
//! §1.5).
//!
//! Row B dominates row A when both are in the front set, B reuses at least as much and
//! leaves at most as much work after placement, and one of the two strictly. Comparing
//! every pair costs W² per decision (16.8 million at 4,096 workers). Here the front-set
//! rows are sorted by `after_milli` (which ranks the distinct after values) and then,
//! stably, by reuse, most first; a sweep in that order keeps a Fenwick tree over the
//! after ranks holding, for every row of strictly greater reuse already swept, how many
//! have each rank or less and the smallest row index among them. A row's dominators are
//! those rows of greater reuse with an after value at most its own (one tree query) and
//! the rows of its own reuse with a strictly smaller after value (the part of its reuse
//! group swept before its own after value), which is how equal reuse *and* equal after
//! is kept from counting. Row indexes are worker-id order, so the smallest index is the
//! smallest id. Both sorts are merge sorts written here, so the number of comparisons,
//! which the work bound states, is that of the algorithm and not of a library's.

use crate::route::cache::work::count_dominance;

/// "No row": the smallest index of an empty set, larger than every row index.
const NO_ROW: u32 = u32::MAX;

/// Every row's dominance for the current decision, and the scratch that finds it, kept
/// for a whole run so that a decision allocates nothing once the vectors have grown.
#[derive(Debug, Clone, Default)]
pub struct Dominance {
    /// Per row: the smallest index of the rows that dominate it, or [`NO_ROW`].
    first_dominator: Vec<u32>,
    /// Per row: how many rows dominate it.
    dominator_count: Vec<u32>,
    /// The front-set rows, sorted by after value, then (stably) by reuse, most first.
    order: Vec<u32>,
    /// The merge sorts' second buffer.
    merge_buffer: Vec<u32>,
    /// Per row: the 1-based rank of its after value among the front set's distinct ones.
    after_rank: Vec<u32>,
    /// The Fenwick tree over after ranks (slot 0 unused): per slot, how many swept rows
    /// it covers and the smallest row index among them.
    tree_count: Vec<u32>,
    tree_first: Vec<u32>,
}

impl Dominance {
    /// The smallest-index row that dominates row `row`, and how many do.
    pub fn of(&self, row: usize) -> (Option<usize>, u64) {
        let first = self.first_dominator[row];
        let first = (first != NO_ROW).then_some(first as usize);
        (first, u64::from(self.dominator_count[row]))
    }

    /// Finds every row's dominance among the rows `in_front` accepts, from their
    /// `reuse` and `after_milli` columns (one entry per row). Rows outside the front set
    /// are neither dominated nor dominating. Counts its dominance operations (§1.5): the
    /// sorts' comparisons, one step per front-set row for each of the two passes, and
    /// every tree step.
    pub fn compute(
        &mut self,
        reuse: &[u64],
        after_milli: &[u64],
        in_front: impl Fn(usize) -> bool,
    ) {
        let rows = reuse.len();
        assert!(
            after_milli.len() == rows && u32::try_from(rows).is_ok_and(|n| n < NO_ROW),
            "one after value per row, and row indexes below the no-row mark"
        );
        self.first_dominator.clear();
        self.first_dominator.resize(rows, NO_ROW);
        self.dominator_count.clear();
        self.dominator_count.resize(rows, 0);
        self.after_rank.resize(rows, 0);
        self.order.clear();
        self.order
            .extend((0..rows as u32).filter(|&row| in_front(row as usize)));
        let mut operations = merge_sort(&mut self.order, &mut self.merge_buffer, |a, b| {
            after_milli[a as usize] <= after_milli[b as usize]
        });
        let distinct_afters = self.rank_afters(after_milli);
        operations += merge_sort(&mut self.order, &mut self.merge_buffer, |a, b| {
            reuse[a as usize] >= reuse[b as usize]
        });
        operations += self.sweep(reuse, after_milli, distinct_afters);
        count_dominance(operations + 2 * self.order.len() as u64);
    }

    /// Gives each front-set row the rank of its after value (`order` is sorted by after
    /// value) and empties the tree's slots for those ranks; returns how many distinct
    /// after values there are.
    fn rank_afters(&mut self, after_milli: &[u64]) -> usize {
        self.tree_count.clear();
        self.tree_first.clear();
        // Slot 0 is never read: Fenwick indexes start at 1.
        self.tree_count.push(0);
        self.tree_first.push(NO_ROW);
        let mut previous = None;
        for &row in &self.order {
            let after = after_milli[row as usize];
            if previous != Some(after) {
                previous = Some(after);
                self.tree_count.push(0);
                self.tree_first.push(NO_ROW);
            }
            self.after_rank[row as usize] = (self.tree_count.len() - 1) as u32;
        }
        self.tree_count.len() - 1
    }

    /// Sweeps `order` (reuse descending, after ascending within a reuse) one reuse group
    /// at a time, writing each row's dominance; returns the tree steps taken.
    fn sweep(&mut self, reuse: &[u64], after_milli: &[u64], distinct_afters: usize) -> u64 {
        let mut steps = 0;
        let mut group_start = 0;
        while group_start < self.order.len() {
            let group_reuse = reuse[self.order[group_start] as usize];
            let group_end = group_start
                + self.order[group_start..]
                    .iter()
                    .take_while(|&&row| reuse[row as usize] == group_reuse)
                    .count();
            // Rows of this reuse with a strictly smaller after value: they dominate.
            let (mut smaller_count, mut smaller_first) = (0u32, NO_ROW);
            let mut run_start = group_start;
            while run_start < group_end {
                let run_after = after_milli[self.order[run_start] as usize];
                let run_end = run_start
                    + self.order[run_start..group_end]
                        .iter()
                        .take_while(|&&row| after_milli[row as usize] == run_after)
                        .count();
                // Every row of a run has the same figures, so one query serves them all.
                let rank = self.after_rank[self.order[run_start] as usize];
                let (above_count, above_first, query_steps) = self.query(rank);
                steps += query_steps;
                let (count, first) = (above_count + smaller_count, above_first.min(smaller_first));
                for &row in &self.order[run_start..run_end] {
                    self.first_dominator[row as usize] = first;
                    self.dominator_count[row as usize] = count;
                    smaller_first = smaller_first.min(row);
                }
                smaller_count += (run_end - run_start) as u32;
                run_start = run_end;
            }
            // Only now is the group in the tree: it does not dominate its own rows of
            // equal after value, and rows of strictly smaller after were counted above.
            for i in group_start..group_end {
                let row = self.order[i];
                steps += self.insert(self.after_rank[row as usize], row, distinct_afters);
            }
            group_start = group_end;
        }
        steps
    }

    /// How many inserted rows have an after rank at most `rank`, the smallest of their
    /// indexes, and the steps taken.
    fn query(&self, rank: u32) -> (u32, u32, u64) {
        let (mut count, mut first, mut steps) = (0, NO_ROW, 0);
        let mut slot = rank as usize;
        while slot > 0 {
            count += self.tree_count[slot];
            first = first.min(self.tree_first[slot]);
            steps += 1;
            slot &= slot - 1;
        }
        (count, first, steps)
    }

    /// Adds row `row`, of after rank `rank`, to the tree; returns the steps taken.
    fn insert(&mut self, rank: u32, row: u32, distinct_afters: usize) -> u64 {
        let mut steps = 0;
        let mut slot = rank as usize;
        while slot <= distinct_afters {
            self.tree_count[slot] += 1;
            self.tree_first[slot] = self.tree_first[slot].min(row);
            steps += 1;
            slot += slot & slot.wrapping_neg();
        }
        steps
    }
}

/// Sorts `items` stably, `may_precede(a, b)` saying whether `a` may come before `b`,
/// bottom-up with `buffer` as the second half of each merge. Returns the comparisons
/// made: at most `n - 1` per pass and `⌈log₂ n⌉` passes.
fn merge_sort(
    items: &mut Vec<u32>,
    buffer: &mut Vec<u32>,
    mut may_precede: impl FnMut(u32, u32) -> bool,
) -> u64 {
    let n = items.len();
    buffer.clear();
    buffer.resize(n, 0);
    let mut comparisons = 0;
    let mut width = 1;
    while width < n {
        for start in (0..n).step_by(2 * width) {
            let middle = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut left, mut right, mut out) = (start, middle, start);
            while left < middle && right < end {
                comparisons += 1;
                // Ties take the left item first: that is what keeps the sort stable.
                if may_precede(items[left], items[right]) {
                    buffer[out] = items[left];
                    left += 1;
                } else {
                    buffer[out] = items[right];
                    right += 1;
                }
                out += 1;
            }
            let rest = middle - left;
            buffer[out..out + rest].copy_from_slice(&items[left..middle]);
            buffer[out + rest..end].copy_from_slice(&items[right..end]);
        }
        std::mem::swap(items, buffer);
        width *= 2;
    }
    comparisons
}

#[cfg(test)]
mod tests {
    use super::{merge_sort, Dominance};

    #[test]
    fn merge_sort_is_stable_and_within_n_log_n_comparisons() {
        let keys = [3u32, 1, 3, 0, 2, 1, 3, 0, 2];
        let mut items: Vec<u32> = (0..keys.len() as u32).collect();
        let comparisons = merge_sort(&mut items, &mut Vec::new(), |a, b| {
            keys[a as usize] <= keys[b as usize]
        });
        assert_eq!(items, [3, 7, 1, 5, 4, 8, 0, 2, 6]);
        // n = 9: at most 4 passes of at most 8 comparisons.
        assert!(comparisons <= 9 * 4, "{comparisons}");
    }

    #[test]
    fn ties_on_both_figures_do_not_dominate_and_ties_on_one_do() {
        // (reuse, after): rows 0 and 1 tie exactly; row 2 has row 0's reuse and less
        // work; row 3 is outside the front set and would dominate everyone.
        let reuse = [5, 5, 5, 9];
        let after = [10, 10, 7, 1];
        let mut dominance = Dominance::default();
        dominance.compute(&reuse, &after, |row| row != 3);
        assert_eq!(dominance.of(0), (Some(2), 1));
        assert_eq!(dominance.of(1), (Some(2), 1));
        assert_eq!(dominance.of(2), (None, 0));
        assert_eq!(dominance.of(3), (None, 0));
    }
}
