//! Counting a replay's entry operations (SPEC.md §1.5), so tests can check the work
//! bound the limits promise by counting instead of timing.
//!
//! An entry operation is setting or removing one cache entry, building one candidate
//! row, or visiting one resident entry during a reuse walk. Dominance (§4.6) is counted
//! apart, in dominance operations: a comparison of two rows' figures, a step of a pass
//! over the sorted front set, or a step of a tree query or update
//! ([`crate::route::candidate::dominance`]). The counts are per thread (a policy's run
//! happens on one thread, and tests run in parallel threads), and cost one add per
//! operation, or one per decision where the operations are tallied first.

use std::cell::Cell;

thread_local! {
    static ENTRY_OPERATIONS: Cell<u64> = const { Cell::new(0) };
    static DOMINANCE_OPERATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Adds `n` entry operations to this thread's count.
#[inline]
pub(crate) fn count(n: u64) {
    ENTRY_OPERATIONS.with(|c| c.set(c.get().wrapping_add(n)));
}

/// Sets this thread's count back to 0 and returns what it was.
pub fn reset_entry_operations() -> u64 {
    ENTRY_OPERATIONS.with(|c| c.replace(0))
}

/// Adds `n` dominance operations to this thread's count.
#[inline]
pub(crate) fn count_dominance(n: u64) {
    DOMINANCE_OPERATIONS.with(|c| c.set(c.get().wrapping_add(n)));
}

/// Sets this thread's dominance count back to 0 and returns what it was.
pub fn reset_dominance_operations() -> u64 {
    DOMINANCE_OPERATIONS.with(|c| c.replace(0))
}
