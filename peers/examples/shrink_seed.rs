//! Prints the minimal reproduction of the sweep's first new finding from seed `START`
//! on (`cargo run -p kvroute-peers --example shrink_seed -- [START] [known]`): how the
//! committed fixture `peers/fixtures/positional_removed_abort/trace.json` was made.

use kvroute_core::output::canonical_trace_bytes;
use kvroute_peers::compare::compare;
use kvroute_peers::sweep::{minimal_reproduction, sweep};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let start: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(0);
    let known = args.iter().any(|a| a == "known");
    let report = sweep(start..start + 1000, known);
    let Some(finding) = report.findings.first() else {
        eprintln!("no new finding in seeds {start}..{}", start + 1000);
        return;
    };
    eprintln!("seed {}: {:?}", finding.seed, finding.difference);
    let trace = minimal_reproduction(finding);
    println!(
        "{}",
        String::from_utf8(canonical_trace_bytes(&trace)).unwrap()
    );
    let again = compare(&trace, finding.options);
    eprint!("{}", again.table());
    for d in &again.first {
        eprintln!("{d:?}");
    }
}
