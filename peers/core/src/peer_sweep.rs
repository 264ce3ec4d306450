//! `kvroute peer sweep`'s loop (SPEC.md §15.4): a peer over the protocol on each seed's
//! generated chain trace in both delivery modes, the reuse rows and the choices summed.
//!
//! A peer whose hello offers `reset` (SPEC.md §15.2, message 4) serves the whole sweep
//! from one process, reset between traces, so start-up (an interpreter, a router
//! server) is paid once instead of once a trace; any other peer, or any peer under
//! [`Processes::OnePerTrace`], gets a fresh process per trace. Either way each trace
//! starts from a peer holding nothing of another, and a failure names the seed and the
//! mode of the trace it happened on (a failed reset: the trace it followed).

use crate::classify::Options;
use crate::protocol::{Hello, PeerError, PeerProcess};
use crate::run::{run_trace, shrunk_difference, ChoiceTally, RunOptions};
use crate::sweep::{modes, trace_of, Finding, SweepReport};
use kvroute_core::input::Trace;
use kvroute_core::Policy;
use std::ffi::OsString;
use std::time::Duration;

/// How many peer processes a sweep may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processes {
    /// One process for the sweep when the peer offers `reset`, else one per trace.
    ResetWhenOffered,
    /// One process per trace, whatever the peer offers (`--process-per-trace`).
    OnePerTrace,
}

/// How `peer sweep` drives its peer.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub timeout: Duration,
    pub expect_version: Option<String>,
    /// The policy a `choice` answer is compared with.
    pub policy: Policy,
    pub processes: Processes,
}

/// What a peer sweep saw.
#[derive(Debug, Clone)]
pub struct PeerSweep {
    /// The hello of the first process (every later one gave the same name, version and
    /// answers, or the sweep failed).
    pub hello: Hello,
    pub policy: Policy,
    pub report: SweepReport,
    /// The choices summed over traces, when the peer answers `choice`.
    pub choice: Option<ChoiceTally>,
    /// Peer processes started.
    pub processes: u64,
    /// Whether traces after the first were put to a reset process.
    pub reset_used: bool,
}

/// A sweep's failure: the trace it happened on and the peer's own account.
fn on_trace(seed: u64, compare: Options, e: PeerError) -> String {
    format!(
        "seed {seed} (withhold_stale={}): {e}",
        compare.withhold_stale
    )
}

/// How one trace of the sweep is run, in delivery mode `compare`.
fn run_options(options: &SweepOptions, compare: Options) -> RunOptions {
    RunOptions {
        compare,
        timeout: options.timeout,
        expect_version: options.expect_version.clone(),
        policy: options.policy,
    }
}

/// The sweep's new finding `finding` as a reproduction (`peer sweep --diff-out`, SPEC.md
/// §15.4): its seed's trace, cut and shrunk while re-running the peer in the finding's
/// delivery mode still shows a `new_finding` row, at most `budget` peer runs. The
/// result is a trace `peer run` (with `--withhold-stale` when the finding's mode
/// withheld stale events) shows a new finding on.
pub fn shrunk_finding(
    command: &[OsString],
    finding: &Finding,
    options: &SweepOptions,
    budget: usize,
) -> Trace {
    shrunk_difference(
        &trace_of(finding.seed),
        command,
        &run_options(options, finding.options),
        &finding.difference,
        budget,
    )
}

/// Runs `command` over seeds `start..start + seeds`, each in both delivery modes.
pub fn sweep_peer(
    command: &[OsString],
    seeds: u64,
    start: u64,
    options: &SweepOptions,
) -> Result<PeerSweep, String> {
    if seeds == 0 {
        return Err("peer sweep: no seeds".into());
    }
    let end = start.saturating_add(seeds);
    let run_options = |compare: Options| run_options(options, compare);
    let mut report = SweepReport::default();
    let mut choice: Option<ChoiceTally> = None;
    let mut first_hello: Option<Hello> = None;
    let mut processes = 0;
    let mut reset_used = false;
    // The live process and its hello, between traces.
    let mut live: Option<(PeerProcess, Hello)> = None;
    for seed in start..end {
        let trace = trace_of(seed);
        let both = modes(true);
        for (m, &compare) in both.iter().enumerate() {
            let (mut peer, hello) = match live.take() {
                Some(session) => session,
                None => {
                    let mut peer = PeerProcess::spawn(command, options.timeout)
                        .map_err(|e| on_trace(seed, compare, e))?;
                    processes += 1;
                    let hello = peer
                        .hello(compare.block_tokens, options.expect_version.as_deref())
                        .map_err(|e| on_trace(seed, compare, e))?;
                    if let Some(first) = &first_hello {
                        if (&first.name, &first.version, first.answers)
                            != (&hello.name, &hello.version, hello.answers)
                        {
                            return Err(on_trace(
                                seed,
                                compare,
                                peer.fail(format!(
                                    "hello: another peer than the sweep's first process ({} {})",
                                    first.name, first.version
                                )),
                            ));
                        }
                    }
                    (peer, hello)
                }
            };
            let run = run_trace(&mut peer, &hello, &trace, &run_options(compare))
                .map_err(|e| on_trace(seed, compare, e))?;
            report.add(seed, compare, &run.report);
            if let Some(c) = &run.choice {
                choice.get_or_insert_with(ChoiceTally::default).add(c);
            }
            let last = seed + 1 == end && m + 1 == both.len();
            let reuse = hello.reset && options.processes == Processes::ResetWhenOffered;
            if reuse && !last {
                peer.reset().map_err(|e| on_trace(seed, compare, e))?;
                reset_used = true;
                first_hello.get_or_insert_with(|| hello.clone());
                live = Some((peer, hello));
            } else {
                peer.end().map_err(|e| on_trace(seed, compare, e))?;
                first_hello.get_or_insert(hello);
            }
        }
    }
    let hello = first_hello.expect("at least one seed, so one trace, so one hello");
    Ok(PeerSweep {
        hello,
        policy: options.policy,
        report,
        choice,
        processes,
        reset_used,
    })
}

impl PeerSweep {
    /// What `peer sweep` prints: the summed reuse rows by cause and the seeds with a
    /// new finding, the summed choice table when the peer answers `choice`, and how
    /// many processes served the sweep.
    pub fn table(&self) -> String {
        let mut out = self.report.summary();
        if let Some(c) = &self.choice {
            out.push_str(&c.table(self.policy, &self.hello.name, self.hello.answers.reuse));
        }
        let how = if self.reset_used {
            "reset between traces"
        } else if self.hello.reset {
            "one per trace (--process-per-trace)"
        } else {
            "one per trace (the peer offers no reset)"
        };
        out.push_str(&format!(
            "peer {} {}: {} processes for {} traces, {how}\n",
            self.hello.name, self.hello.version, self.processes, self.report.traces
        ));
        out
    }
}
