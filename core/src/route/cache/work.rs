//! Counting a replay's entry operations (SPEC.md §1.5), so tests can check the work
//! bound the limits promise by counting instead of timing.
//!
//! An entry operation is setting or removing one cache entry, building one candidate
//! row, or visiting one resident entry during a reuse walk. The count is per thread (a
//! policy's run happens on one thread, and tests run in parallel threads), and costs one
//! add per operation.

use std::cell::Cell;

thread_local! {
    static ENTRY_OPERATIONS: Cell<u64> = const { Cell::new(0) };
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
