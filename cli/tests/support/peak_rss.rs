//! The peak memory of a finished child, for the memory tests: `ru_maxrss` of
//! `getrusage(RUSAGE_CHILDREN)`, read after the child is waited for. That figure is the
//! largest of every waited child of the calling process, so a test file that uses it
//! holds one test and runs one child.

/// The largest resident set, in bytes, of any child this process has waited for.
pub fn waited_children_peak_bytes() -> u64 {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage), 0);
        usage.ru_maxrss as u64 * 1024
    }
}
