//! The seed sweep in-process: chain-structured traces compared in both delivery modes
//! (`kvroute_peer_core::sweep`) against both Dynamo indexers, each difference
//! classified, the new findings listed by seed.

use crate::compare::compare;
use crate::shrink::{cut_reproducing, shows, shrink};
use kvroute_core::input::Trace;
pub use kvroute_peer_core::sweep::{modes, trace_of, Finding, SweepReport};

/// Compares every seed of `seeds` in both modes.
pub fn sweep(seeds: std::ops::Range<u64>, known_findings: bool) -> SweepReport {
    let mut report = SweepReport::default();
    for seed in seeds {
        let trace = trace_of(seed);
        for options in modes(known_findings) {
            report.add(seed, options, &compare(&trace, options));
        }
    }
    report
}

/// A finding cut down to a minimal trace that still shows a difference of the same
/// comparison and cause (see [`crate::shrink`]).
pub fn minimal_reproduction(finding: &Finding) -> Trace {
    let trace = trace_of(finding.seed);
    let (options, difference) = (finding.options, &finding.difference);
    let cut = cut_reproducing(&trace, difference, options).unwrap_or(trace);
    shrink(
        cut,
        |t| shows(t, options, &difference.comparison, difference.cause),
        50_000,
    )
}
