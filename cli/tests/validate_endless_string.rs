//! `kvroute validate -` on a string with no end: `{"format": "` and then
//! endless `a`s, piped in. serde_json gathers a string whole before handing it over, so
//! the reader used to grow until the allocator aborted. A string is now capped at
//! `VALUE_BYTES_MAX` (SPEC.md §1.1): validation fails with the string's position as
//! soon as the cap is passed, stops reading (the feeding thread sees the pipe close
//! long before its 400 MiB are written) and holds about one capped string.
//!
//! One test, one child: the peak is `ru_maxrss` of every waited child.

#[path = "support/endless_stdin.rs"]
mod endless_stdin;
#[path = "support/peak_rss.rs"]
mod peak_rss;

use kvroute_core::input::VALUE_BYTES_MAX;

#[test]
fn a_string_with_no_end_is_an_error_and_memory_stays_bounded() {
    const FILLER_BYTES: usize = 400 * 1024 * 1024;
    let args = ["validate".as_ref(), "-".as_ref()];
    let run =
        endless_stdin::run_with_endless_stdin(&args, b"{\n  \"format\": \"", b'a', FILLER_BYTES);
    let stderr = String::from_utf8_lossy(&run.output.stderr);
    assert_eq!(run.output.status.code(), Some(2), "{stderr}");
    // The opening quote is the 13th byte of line 2.
    let expected = format!(
        "$: invalid JSON: a string longer than {VALUE_BYTES_MAX} bytes at line 2 column 13"
    );
    assert!(stderr.lines().any(|line| line == expected), "{stderr}");
    let fed = run.fed.expect_err("validation stops reading at the cap");
    assert_eq!(fed.kind(), std::io::ErrorKind::BrokenPipe, "{fed}");
    let peak = peak_rss::waited_children_peak_bytes();
    let bound = 3 * VALUE_BYTES_MAX as u64 + (32 << 20);
    assert!(peak < bound, "peak {peak} bytes, bound {bound}");
}
