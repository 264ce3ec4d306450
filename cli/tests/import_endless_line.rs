//! `kvroute import mooncake` on a line with no end: a field, then endless
//! spaces, piped in. The reader used to keep the line growing until the allocator
//! aborted (exit 134) and left the temporary file behind. A line is now capped at
//! `LINE_BYTES_MAX` (SPEC.md §10.2) and read past: the import fails with the line's
//! number, writes nothing, and holds about one capped line, not the input.
//!
//! One test, one child: the peak is `ru_maxrss` of every waited child.

#[path = "support/endless_stdin.rs"]
mod endless_stdin;
#[path = "support/peak_rss.rs"]
mod peak_rss;

#[test]
fn a_line_with_no_end_is_an_error_and_memory_stays_bounded() {
    const SPACES_BYTES: usize = 400 * 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("z.json");
    let args = [
        "import".as_ref(),
        "mooncake".as_ref(),
        "-".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    let run =
        endless_stdin::run_with_endless_stdin(&args, br#"{"timestamp": 0, "#, b' ', SPACES_BYTES);
    let output = run.output;
    run.fed.expect("kvroute reads the whole input");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // Progress lines may come first: the run takes over 2 s in a debug build.
    let expected = format!(
        "-:1: line longer than {} bytes",
        kvroute_core::import::MOONCAKE_LINE_BYTES_MAX
    );
    assert!(stderr.lines().any(|line| line == expected), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "nothing is written or left behind: {left:?}"
    );
    let peak = peak_rss::waited_children_peak_bytes();
    let bound = 2 * kvroute_core::import::MOONCAKE_LINE_BYTES_MAX as u64 + (32 << 20);
    assert!(
        peak < bound,
        "peak {peak} bytes for a {SPACES_BYTES}-byte line, bound {bound}"
    );
}
