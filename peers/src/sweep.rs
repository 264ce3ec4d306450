//! The seed sweep: chain-structured traces ([`crate::generate`]) compared in both
//! delivery modes (Dynamo given every event, or only those kvroute's epoch rule
//! applied), each difference classified, the new findings listed by seed.

use crate::compare::{compare, Cause, Difference, Options, Report};
use crate::generate::{chain_trace, seeded_rng, BLOCK_TOKENS};
use crate::shrink::{cut_reproducing, shows, shrink};
use kvroute_core::input::trace::Trace;

/// A seed whose trace shows a difference no documented cause explains.
#[derive(Debug, Clone)]
pub struct Finding {
    pub seed: u64,
    pub options: Options,
    pub difference: Difference,
}

/// What a sweep saw, summed over seeds and modes.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    pub traces: u64,
    pub rows_compared: u64,
    pub rows_differing: u64,
    pub by_cause: Vec<(Cause, u64)>,
    pub findings: Vec<Finding>,
}

impl SweepReport {
    pub fn count(&self, cause: Cause) -> u64 {
        self.by_cause
            .iter()
            .find(|(c, _)| *c == cause)
            .map_or(0, |&(_, n)| n)
    }
}

/// The trace of `seed`.
pub fn trace_of(seed: u64) -> Trace {
    chain_trace(&mut seeded_rng(seed))
}

/// The two delivery modes a seed is compared in.
pub fn modes(known_findings: bool) -> [Options; 2] {
    let base = Options {
        block_tokens: BLOCK_TOKENS,
        full_blocks_only: false,
        withhold_stale: false,
        known_findings,
    };
    [
        base,
        Options {
            withhold_stale: true,
            ..base
        },
    ]
}

/// Compares every seed of `seeds` in both modes.
pub fn sweep(seeds: std::ops::Range<u64>, known_findings: bool) -> SweepReport {
    let mut report = SweepReport {
        by_cause: Cause::ALL.iter().map(|&c| (c, 0)).collect(),
        ..SweepReport::default()
    };
    for seed in seeds {
        let trace = trace_of(seed);
        for options in modes(known_findings) {
            let compared: Report = compare(&trace, options);
            report.traces += 1;
            for tally in &compared.tallies {
                report.rows_compared += tally.rows_compared;
                report.rows_differing += tally.rows_differing;
                for (cause, n) in &mut report.by_cause {
                    *n += tally.count(*cause);
                }
            }
            if let Some(difference) = compared.first.iter().find(|d| d.cause == Cause::NewFinding) {
                report.findings.push(Finding {
                    seed,
                    options,
                    difference: difference.clone(),
                });
            }
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
        |t| shows(t, options, difference.comparison, difference.cause),
        50_000,
    )
}
