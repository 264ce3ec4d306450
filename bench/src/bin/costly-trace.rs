//! `costly-trace [issue|limits] > FILE`: writes a costly trace (`kvroute_harness::costly`)
//! to stdout, to measure a replay's CPU time and memory with `/usr/bin/time -v`:
//! `issue` (the default) is issue 12's 1.35 MB lab trace that the work limits now
//! reject; `limits` is the valid trace at every `lab` work limit.

use kvroute_harness::costly::{costly_trace, CostlyShape};

fn main() {
    let shape = match std::env::args().nth(1).as_deref() {
        None | Some("issue") => CostlyShape::ISSUE_12_LAB,
        Some("limits") => CostlyShape::LAB_LIMITS,
        Some(other) => {
            eprintln!("costly-trace: expected `issue` or `limits`, found {other:?}");
            std::process::exit(2);
        }
    };
    println!("{}", costly_trace(&shape));
}
