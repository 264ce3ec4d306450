//! `costly-trace [issue|limits|wide|wide-tied] > FILE`: writes a costly trace
//! (`kvroute_harness::costly`) to stdout, to measure a replay's CPU time and memory with
//! `/usr/bin/time -v`: `issue` (the default) is the 1.35 MB lab trace that the
//! work limits now reject; `limits` is the valid trace at every `lab` work limit;
//! `wide` and `wide-tied` are the 1 MB `scale` traces of 4,096 workers with one
//! cache entry each and 120 one-segment requests, with every reuse distinct or with
//! most rows tied.

use kvroute_harness::costly::{costly_trace, wide_trace_bytes, CostlyShape, WideShape};
use std::io::Write;

/// The wide traces: workers and requests, enough that pairwise dominance would take
/// seconds.
const WIDE_WORKERS: usize = 4_096;
const WIDE_REQUESTS: usize = 120;

fn main() {
    let wide = |shape| {
        let bytes = wide_trace_bytes(WIDE_WORKERS, WIDE_REQUESTS, shape);
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(&bytes)
            .and_then(|()| stdout.write_all(b"\n"))
            .expect("stdout is writable");
    };
    let shape = match std::env::args().nth(1).as_deref() {
        None | Some("issue") => CostlyShape::ISSUE_12_LAB,
        Some("limits") => CostlyShape::LAB_LIMITS,
        Some("wide") => return wide(WideShape::DistinctReuse),
        Some("wide-tied") => return wide(WideShape::TiedReuse),
        Some(other) => {
            eprintln!(
                "costly-trace: expected `issue`, `limits`, `wide` or `wide-tied`, found {other:?}"
            );
            std::process::exit(2);
        }
    };
    println!("{}", costly_trace(&shape));
}
