//! The replay driver: which runs a trace has, that each starts from a fresh state, and
//! in which order a run's records reach its sink (SPEC.md §3.5, §6.4).
//!
//! Every output is a [`RunSink`] fed from here: the in-memory receipt
//! ([`CollectSink`]), its bytes ([`RunsBytes`]), the streamed JSON, JSON Lines and
//! digest-only receipts ([`StreamedRuns`]), the CSV ([`CsvSink`]) and metrics-only runs
//! (`()`). The engine ([`crate::route::engine`]) runs one policy; `output/` only turns
//! records into bytes and never runs anything. Nothing is shared between runs: each
//! starts from [`RouterState::initial`], except under the planted bug that carries the
//! state from one run to the next, which therefore reaches every output at once.

use crate::input::trace::Trace;
use crate::mutant::{active, Mutant};
use crate::output::canonical::{digest_tag, trace_digest};
use crate::output::csv::{CsvIds, CsvSink};
use crate::output::jsonl::{Lines, StreamSummary};
use crate::output::receipt::Receipt;
use crate::output::typed::{self, RunsBytes, RunsOut, StreamedRuns, WriteOut};
use crate::route::compiled::{Compiled, Step};
use crate::route::engine::{run_events, run_with_sink};
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;
use crate::route::record::{
    CacheLogEntry, CollectSink, DecisionRef, Member, ObservationLogEntry, RunOrder, RunSink,
};
use crate::route::state::RouterState;
use sha2::{Digest, Sha256};
use std::io;

/// Replays every run the trace has ([`Policy::runs_for`]), in receipt order, into
/// `sink`, in the order the sink asks for; returns each run's metrics.
pub fn replay_runs(compiled: &Compiled, sink: &mut impl RunSink) -> Vec<(Policy, Metrics)> {
    let shared = active(Mutant::SharedState);
    let mut carried: Option<RouterState> = None;
    let mut runs = Vec::new();
    for (index, &policy) in Policy::runs_for(&compiled.trace.policy).iter().enumerate() {
        // The mutant hands each policy the state the previous one left behind.
        let start = carried
            .take()
            .unwrap_or_else(|| RouterState::initial(compiled));
        sink.run_started(index, policy);
        let (metrics, left) = match sink.order() {
            RunOrder::AsReplayed => {
                let ended = run_with_sink(compiled, policy, start, sink);
                sink.metrics_computed(&ended.0);
                ended
            }
            RunOrder::ReceiptMembers => member_passes(compiled, policy, start, sink),
        };
        sink.run_finished();
        if shared {
            carried = Some(left);
        }
        runs.push((policy, metrics));
    }
    runs
}

/// One run in receipt-member order: cache events alone (an outcome depends only on
/// epochs), the full run for its decisions, then load observations alone. Each pass
/// starts from the state the run starts from.
fn member_passes(
    compiled: &Compiled,
    policy: Policy,
    start: RouterState,
    sink: &mut impl RunSink,
) -> (Metrics, RouterState) {
    let same_start = |start: &RouterState| {
        if active(Mutant::SharedState) {
            start.clone()
        } else {
            RouterState::initial(compiled)
        }
    };
    let (cache_start, load_start) = (same_start(&start), same_start(&start));
    sink.member_started(Member::CacheLog);
    let mut only = Only {
        member: Member::CacheLog,
        sink,
    };
    let is_cache = |step: &Step| matches!(step, Step::Cache { .. });
    run_events(compiled, policy, cache_start, &mut only, is_cache);
    only.sink.member_started(Member::Decisions);
    only.member = Member::Decisions;
    let ended = run_with_sink(compiled, policy, start, &mut only);
    only.sink.member_started(Member::Metrics);
    only.sink.metrics_computed(&ended.0);
    only.sink.member_started(Member::ObservationLog);
    only.member = Member::ObservationLog;
    let is_load = |step: &Step| matches!(step, Step::Load { .. });
    run_events(compiled, policy, load_start, &mut only, is_load);
    ended
}

/// Passes on only one member's records: a pass's run produces the others too.
struct Only<'s, S: RunSink> {
    member: Member,
    sink: &'s mut S,
}

impl<S: RunSink> RunSink for Only<'_, S> {
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        if self.member == Member::CacheLog {
            self.sink.cache_logged(entry);
        }
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        if self.member == Member::ObservationLog {
            self.sink.observation_logged(entry);
        }
    }
    fn decided(&mut self, decision: &DecisionRef) {
        if self.member == Member::Decisions {
            self.sink.decided(decision);
        }
    }
    fn reads_rows(&self) -> bool {
        self.member == Member::Decisions && self.sink.reads_rows()
    }
}

/// How many decisions one replay of every run routes, as counted into
/// [`Compiled::decisions_routed`] by [`stream_digest`], [`write_jsonl`], [`write_csv`]
/// and [`metrics`]; [`write_json`] replays twice (the digest first), so twice this.
pub fn decisions_per_replay(compiled: &Compiled) -> u64 {
    compiled.request_count() * Policy::runs_for(&compiled.trace.policy).len() as u64
}

/// Replays the trace under every policy and keeps the receipt in memory.
pub fn receipt(trace: &Trace) -> Receipt {
    let compiled = Compiled::new(trace);
    let mut sink = CollectSink::default();
    replay_runs(&compiled, &mut sink);
    Receipt {
        trace_digest: trace_digest(trace),
        worker_ids: compiled.worker_ids.iter().map(|w| w.to_string()).collect(),
        runs: sink.runs,
    }
}

/// The full canonical receipt in memory: one replay per policy, each writing its
/// records' bytes as they are produced (no record is kept).
pub fn receipt_bytes(compiled: &Compiled, trace_digest: &str) -> Vec<u8> {
    let mut sink = RunsBytes::new(&compiled.worker_ids);
    replay_runs(compiled, &mut sink);
    typed::assemble_receipt(&sink.finish(), trace_digest)
}

/// Every run's metrics, with no receipt kept: no candidate row is ever materialised.
pub fn metrics(compiled: &Compiled) -> Vec<(Policy, Metrics)> {
    replay_runs(compiled, &mut ())
}

/// Sends the receipt's `runs` array to `out` as the runs replay.
fn stream_runs<O: RunsOut + ?Sized>(compiled: &Compiled, out: &mut O) -> Vec<(Policy, Metrics)> {
    let mut sink = StreamedRuns::new(out, &compiled.worker_ids);
    let runs = replay_runs(compiled, &mut sink);
    sink.finish();
    runs
}

/// The receipt digest and each run's metrics, with nothing written: the receipt's
/// bytes go straight into SHA-256.
pub fn stream_digest(compiled: &Compiled, trace_digest: &str) -> (String, Vec<(Policy, Metrics)>) {
    let (head, tail) = typed::body_around_runs(trace_digest);
    let mut hasher = Sha256::new();
    hasher.update(&head);
    let runs = stream_runs(compiled, &mut hasher);
    hasher.update(&tail);
    (digest_tag(&hasher.finalize()), runs)
}

/// Writes the full canonical receipt and one `\n` to `out` without holding it: one
/// streamed replay into the digest (the `receipt_digest` member sorts before `runs`),
/// then one into `out`. Replaying is cheap next to writing. Returns the digest.
pub fn write_json<W: io::Write + ?Sized>(
    compiled: &Compiled,
    trace_digest: &str,
    out: &mut W,
) -> io::Result<String> {
    let (digest, _) = stream_digest(compiled, trace_digest);
    let mut writer = WriteOut::new(out);
    writer.write(&typed::full_head(&digest));
    stream_runs(compiled, &mut writer);
    let (_, tail) = typed::body_around_runs(trace_digest);
    writer.write(&tail);
    writer.write(b"\n");
    writer.finish()?;
    Ok(digest)
}

/// Replays every policy and writes the receipt as JSON Lines to `out` (SPEC.md §6.4).
pub fn write_jsonl<W: io::Write + ?Sized>(
    compiled: &Compiled,
    trace_digest: &str,
    out: &mut W,
) -> io::Result<StreamSummary> {
    let mut lines = Lines::start(out, trace_digest);
    let runs = stream_runs(compiled, &mut lines);
    lines.finish(runs)
}

/// Writes the candidate rows as CSV (SPEC.md §6.3) while the runs replay; returns each
/// run's metrics.
pub fn write_csv<W: io::Write + ?Sized>(
    compiled: &Compiled,
    out: &mut W,
    mode: CsvIds,
) -> Result<Vec<(Policy, Metrics)>, csv::Error> {
    let mut sink = CsvSink::start(out, &compiled.worker_ids, mode)?;
    let runs = replay_runs(compiled, &mut sink);
    sink.finish()?;
    Ok(runs)
}
