//! Shared set-up for kvroute's benchmarks: the criterion benches (`benches/routing.rs`)
//! and the `just bench` table (`src/bin/bench-table.rs`) measure the same workloads, so
//! both build them here.
//!
//! The workload is the public Mooncake conversation trace (12,031 requests), imported
//! onto fleets of 8, 64 and 512 identical workers. An imported trace carries requests
//! only, so replaying it open-loop would route every request cold and never exercise the
//! cache index; [`replay_trace`] therefore runs the closed-loop simulator once under
//! `cache_plus_load` and keeps the store/evict events it generated, and the routing
//! figures replay that trace. Nothing here is timed: each caller times what it measures.

use kvroute_core::input::mooncake::{import_mooncake, MooncakeOptions};
use kvroute_core::output::canonical::canonical_trace_bytes;
use kvroute_core::output::typed::push_decision_ref;
use kvroute_core::route::compiled::Compiled;
use kvroute_core::route::engine::{run_with_sink, DecisionRef, RunSink};
use kvroute_core::route::metrics::Metrics;
use kvroute_core::route::state::RouterState;
use kvroute_core::simulate::{
    generated_trace, simulate_policy, simulation_trace, SimRun, SimulateOptions,
};
use kvroute_core::{Policy, Trace};
use std::hint::black_box;
use std::io::Write;

/// The fleet sizes every routing figure is measured at.
pub const WORKER_COUNTS: [u32; 3] = [8, 64, 512];

/// How many Mooncake lines the core-versus-oracle trace keeps: the naive oracle is
/// quadratic in places, so the full trace would take it minutes.
pub const ORACLE_TRACE_REQUESTS: usize = 4_096;

/// How many Mooncake lines the with-receipt figures keep where the whole trace would be
/// too slow to repeat (512 workers in the table; 64 and 512 under criterion): receipt
/// work per decision grows with the candidate rows, so a prefix of the trace gives the
/// same per-decision cost in a fraction of the time.
pub const RECEIPT_WINDOW_REQUESTS: usize = 1_024;

/// Where the Mooncake trace is (the harness's answer, `$KVROUTE_MOONCAKE` overriding).
pub use kvroute_harness::closed_loop::mooncake_path;

/// The Mooncake file's bytes, or a panic naming the path (a benchmark without its
/// input has nothing to measure).
pub fn mooncake_bytes() -> Vec<u8> {
    let path = mooncake_path();
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the Mooncake trace at {} ({e}); set KVROUTE_MOONCAKE",
            path.display()
        )
    })
}

/// The first `lines` lines of `bytes` (all of them if there are fewer).
pub fn first_lines(bytes: &[u8], lines: usize) -> &[u8] {
    let end = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(lines.saturating_sub(1))
        .map_or(bytes.len(), |(i, _)| i + 1);
    if lines == 0 {
        &bytes[..0]
    } else {
        &bytes[..end]
    }
}

/// Imports Mooncake JSONL onto `workers` identical workers.
pub fn import(jsonl: &[u8], workers: u32) -> Trace {
    let options = MooncakeOptions {
        workers,
        ..Default::default()
    };
    import_mooncake(jsonl, &options).unwrap_or_else(|errors| {
        let first = errors.first().map(ToString::to_string).unwrap_or_default();
        panic!(
            "the Mooncake import failed ({} errors): {first}",
            errors.len()
        )
    })
}

/// The request-only trace the closed-loop simulator runs on.
pub fn simulation_input(trace: &Trace) -> Trace {
    simulation_trace(trace, None)
        .unwrap_or_else(|e| panic!("simulation_trace failed: {e}"))
        .0
}

/// The trace the routing figures replay: the imported requests plus the store/evict
/// events the closed `cache_plus_load` loop generated for them.
pub fn replay_trace(imported: &Trace) -> Trace {
    let sim = simulation_input(imported);
    let compiled = Compiled::new(&sim);
    let run = simulate_policy(
        &compiled,
        Policy::CachePlusLoad,
        &SimulateOptions::default(),
        true,
        &mut (),
    );
    generated_trace(&sim, &run)
}

/// The replay trace of the first [`RECEIPT_WINDOW_REQUESTS`] Mooncake lines on
/// `workers` workers. The closed loop is causal, so its decisions are the first ones of
/// the full trace's loop.
pub fn receipt_window_trace(mooncake: &[u8], workers: u32) -> Trace {
    replay_trace(&import(
        first_lines(mooncake, RECEIPT_WINDOW_REQUESTS),
        workers,
    ))
}

/// How many requests (one decision each per policy) a trace holds.
pub fn request_count(trace: &Trace) -> u64 {
    trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, kvroute_core::input::trace::EventKind::Request(_)))
        .count() as u64
}

/// How many cache events a trace holds.
pub fn cache_event_count(trace: &Trace) -> u64 {
    trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, kvroute_core::input::trace::EventKind::Cache { .. }))
        .count() as u64
}

/// The per-decision work of the streaming receipt, minus the digest and the file:
/// every decision's candidate rows are written as canonical bytes by the typed writer
/// into one reused buffer, which goes to `std::io::sink()`.
pub struct ReceiptSink<'c> {
    worker_ids: &'c [&'c str],
    out: std::io::Sink,
    buffer: Vec<u8>,
    /// Bytes serialised so far: returned, so the serialisation cannot be optimised away.
    pub bytes_written: u64,
}

impl<'c> ReceiptSink<'c> {
    pub fn new(worker_ids: &'c [&'c str]) -> Self {
        ReceiptSink {
            worker_ids,
            out: std::io::sink(),
            buffer: Vec::new(),
            bytes_written: 0,
        }
    }
}

impl RunSink for ReceiptSink<'_> {
    fn decided(&mut self, decision: &DecisionRef) {
        self.buffer.clear();
        push_decision_ref(&mut self.buffer, self.worker_ids, decision);
        self.bytes_written += self.buffer.len() as u64;
        self.out
            .write_all(black_box(&self.buffer))
            .expect("writing to io::sink cannot fail");
    }
}

/// One policy's replay with the per-decision receipt work; returns the metrics and the
/// receipt bytes produced.
pub fn run_with_receipt(compiled: &Compiled, policy: Policy) -> (Metrics, u64) {
    let mut sink = ReceiptSink::new(&compiled.worker_ids);
    let (metrics, _) = run_with_sink(compiled, policy, RouterState::initial(compiled), &mut sink);
    (metrics, sink.bytes_written)
}

/// The closed loop of every policy over a compiled request-only trace, generated
/// events not kept (the figure SPEC.md's closed-loop target is about).
pub fn simulate_all(compiled: &Compiled) -> Vec<SimRun> {
    Policy::ALL
        .iter()
        .map(|&policy| {
            simulate_policy(
                compiled,
                policy,
                &SimulateOptions::default(),
                false,
                &mut (),
            )
        })
        .collect()
}

/// The core-versus-oracle input: the first [`ORACLE_TRACE_REQUESTS`] Mooncake lines on
/// 8 workers, closed-loop simulated so it has cache events, as canonical trace bytes.
pub fn oracle_trace_bytes(mooncake: &[u8]) -> Vec<u8> {
    let imported = import(first_lines(mooncake, ORACLE_TRACE_REQUESTS), 8);
    canonical_trace_bytes(&replay_trace(&imported))
}

/// `VmHWM` (peak resident set) of this process in KiB, from `/proc/self/status`.
pub fn vm_hwm_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::first_lines;

    #[test]
    fn first_lines_keeps_whole_lines() {
        assert_eq!(first_lines(b"a\nb\nc\n", 2), b"a\nb\n");
        assert_eq!(first_lines(b"a\nb", 5), b"a\nb");
        assert_eq!(first_lines(b"a\nb\n", 0), b"");
    }
}
