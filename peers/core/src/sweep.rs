//! The seed sweep's parts that do not depend on the peer: the chain-structured trace of
//! each seed ([`crate::generate`]), the two delivery modes it is compared in (the peer
//! given every event, or only those kvroute's epoch rule applied), and the sums over
//! seeds with the new findings listed by seed. `kvroute-peers sweep` fills it from the
//! in-process Dynamo comparison, `kvroute peer sweep` from a peer over the protocol.

use crate::classify::{Cause, Difference, Options, Report};
use crate::generate::{chain_trace, seeded_rng, BLOCK_TOKENS};
use kvroute_core::input::trace::Trace;

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
        for (cause, n) in &self.by_cause {
            out.push_str(&format!("  {:<14} {n}\n", cause.name()));
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
        out.push_str(&format!(
            "{} seeds with new findings\n",
            self.findings.len()
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
