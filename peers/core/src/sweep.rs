//! The seed sweep's parts that do not depend on the peer: the chain-structured trace of
//! each seed ([`crate::generate`]), the two delivery modes it is compared in (the peer
//! given every event, or only those kvroute's epoch rule applied), and the sums over
//! seeds with the new findings listed by seed. `kvroute-peers sweep` fills it from the
//! in-process Dynamo comparison, `kvroute peer sweep` from a peer over the protocol.

use crate::classify::{Cause, Difference, Options, Report};
use crate::generate::{chain_trace, seeded_rng, BLOCK_TOKENS};
use kvroute_core::input::Trace;

/// A seed whose trace shows a difference no documented cause explains.
#[derive(Debug, Clone)]
pub struct Finding {
    pub seed: u64,
    pub options: Options,
    pub difference: Difference,
}

/// What a sweep saw, summed over seeds and modes.
#[derive(Debug, Clone)]
pub struct SweepReport {
    pub traces: u64,
    pub rows_compared: u64,
    pub rows_differing: u64,
    pub by_cause: Vec<(Cause, u64)>,
    pub findings: Vec<Finding>,
}

impl Default for SweepReport {
    fn default() -> Self {
        SweepReport {
            traces: 0,
            rows_compared: 0,
            rows_differing: 0,
            by_cause: Cause::ALL.iter().map(|&c| (c, 0)).collect(),
            findings: Vec::new(),
        }
    }
}

impl SweepReport {
    pub fn count(&self, cause: Cause) -> u64 {
        self.by_cause
            .iter()
            .find(|(c, _)| *c == cause)
            .map_or(0, |&(_, n)| n)
    }

    /// Adds one trace's comparison (seed `seed`, compared with `options`).
    pub fn add(&mut self, seed: u64, options: Options, compared: &Report) {
        self.traces += 1;
        for tally in &compared.tallies {
            self.rows_compared += tally.rows_compared;
            self.rows_differing += tally.rows_differing;
            for (cause, n) in &mut self.by_cause {
                *n += tally.count(*cause);
            }
        }
        if let Some(difference) = compared.first.iter().find(|d| d.cause == Cause::NewFinding) {
            self.findings.push(Finding {
                seed,
                options,
                difference: difference.clone(),
            });
        }
    }

    /// The summary both sweep commands print.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{} traces, {} rows compared, {} differing\n",
            self.traces, self.rows_compared, self.rows_differing
        );
        let width = Cause::ALL.iter().map(|c| c.name().len()).max().unwrap_or(0);
        for (cause, n) in &self.by_cause {
            out.push_str(&format!("  {:<width$} {n}\n", cause.name()));
        }
        for f in self.findings.iter().take(10) {
            out.push_str(&format!(
                "new finding: seed {} withhold_stale={} {} request {} worker {}: {} vs {}\n",
                f.seed,
                f.options.withhold_stale,
                f.difference.comparison,
                f.difference.request_id,
                f.difference.worker,
                f.difference.reference_tokens,
                f.difference.peer_tokens
            ));
        }
        // A finding is kept per trace (its first new row), and a seed is two traces.
        let mut seeds: Vec<u64> = self.findings.iter().map(|f| f.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        out.push_str(&format!(
            "{} traces on {} seeds with new findings\n",
            self.findings.len(),
            seeds.len()
        ));
        out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Difference;

    fn finding(seed: u64, withhold_stale: bool) -> Finding {
        let [every, withheld] = modes(true);
        Finding {
            seed,
            options: if withhold_stale { withheld } else { every },
            difference: Difference {
                comparison: "peer".into(),
                request_id: "r1".into(),
                request_tick: 1,
                request_seq: 1,
                worker: "w0".into(),
                reference_tokens: 0,
                peer_tokens: 16,
                cause: Cause::NewFinding,
            },
        }
    }

    #[test]
    fn the_summary_counts_traces_and_seeds_with_findings_apart() {
        // Seed 3 in both delivery modes and seed 9 in one: three traces, two seeds.
        let report = SweepReport {
            findings: vec![finding(3, false), finding(3, true), finding(9, true)],
            ..SweepReport::default()
        };
        let summary = report.summary();
        assert!(
            summary.ends_with("3 traces on 2 seeds with new findings\n"),
            "{summary}"
        );
    }

    #[test]
    fn every_cause_name_has_its_own_column() {
        let summary = SweepReport::default().summary();
        let counts: Vec<usize> = summary
            .lines()
            .filter(|l| l.starts_with("  "))
            .map(|l| l.rfind(' ').unwrap())
            .collect();
        assert_eq!(counts.len(), Cause::ALL.len(), "{summary}");
        // Every count starts in the same column, the longest name included.
        assert!(counts.windows(2).all(|w| w[0] == w[1]), "{summary}");
    }
}
