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

use kvroute_core::import::{import_mooncake, MooncakeOptions};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::output::push_decision_ref;
use kvroute_core::route::run_with_sink;
use kvroute_core::route::Compiled;
use kvroute_core::route::Metrics;
use kvroute_core::route::RouterState;
use kvroute_core::route::{DecisionRef, RunSink};
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
        .filter(|e| matches!(e.kind, kvroute_core::input::EventKind::Request(_)))
        .count() as u64
}

/// How many cache events a trace holds.
pub fn cache_event_count(trace: &Trace) -> u64 {
    trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, kvroute_core::input::EventKind::Cache { .. }))
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
    Policy::STANDARD
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

/// A `scale` trace of one request on `workers` workers whose caches form a dominance
/// chain: worker `k` holds `k` tokens of the request's only prefix segment, so it
/// reuses more and leaves less work than every worker before it, and worker `k` is
/// dominated by all `workers - 1 - k` after it (the O(workers²) case of the old
/// `dominated_by` list). Written as text; never committed.
pub fn chain_trace_bytes(workers: usize) -> Vec<u8> {
    let width = workers.saturating_sub(1).to_string().len();
    let mut out = String::from(
        r#"{"format":"kvroute-trace/1","limits":"scale","events":[{"seq":1,"tick":0,"type":"request","id":"r1","tenant":"t","model":"m","adapter":"base","prefix":[{"key":"k0","tokens":"#,
    );
    out.push_str(&format!(
        r#"{workers}}}],"prompt_tokens":{workers},"decode_tokens":1}}],"workers":["#
    ));
    for k in 0..workers {
        if k > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            r#"{{"id":"w{k:0width$}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":["#
        ));
        if k > 0 {
            out.push_str(&format!(
                r#"{{"tenant":"t","model":"m","adapter":"base","key":"k0","tokens":{k}}}"#
            ));
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out.into_bytes()
}

/// A valid `scale` trace of about `target_bytes` bytes: `workers` workers and request
/// events with eight-segment prefixes drawn from a small key space (so prefixes
/// repeat), one store event every 16 requests. Written as text; never committed.
pub fn scale_trace_bytes(target_bytes: usize, workers: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target_bytes + 4096);
    out.extend_from_slice(br#"{"format":"kvroute-trace/1","limits":"scale","workers":["#);
    for w in 0..workers {
        if w > 0 {
            out.push(b',');
        }
        write!(
            out,
            r#"{{"id":"w{w}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":0,"active_decode":0,"observed_tick":0,"epoch":0,"cache":[]}}"#
        )
        .expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(br#"],"events":["#);
    let mut seq = 0u64;
    let mut epochs = vec![0u64; workers];
    // A fixed linear congruential sequence: the same trace every run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    while out.len() < target_bytes {
        seq += 1;
        if seq > 1 {
            out.push(b',');
        }
        let tick = seq / 4;
        let family = next(64);
        // Every 16th event (seq divisible by 16) is a store.
        if seq.trailing_zeros() >= 4 {
            let w = next(workers as u64) as usize;
            epochs[w] += 1;
            write!(
                out,
                r#"{{"seq":{seq},"tick":{tick},"type":"cache","op":"store","worker":"w{w}","epoch":{},"tenant":"t","model":"m","adapter":"base","segments":[{{"key":"f{family}b0","tokens":64}},{{"key":"f{family}b1","tokens":64}}]}}"#,
                epochs[w]
            )
            .expect("writing to a Vec cannot fail");
            continue;
        }
        write!(
            out,
            r#"{{"seq":{seq},"tick":{tick},"type":"request","id":"r{seq}","tenant":"t","model":"m","adapter":"base","prefix":["#
        )
        .expect("writing to a Vec cannot fail");
        for b in 0..8 {
            if b > 0 {
                out.push(b',');
            }
            write!(out, r#"{{"key":"f{family}b{b}","tokens":64}}"#)
                .expect("writing to a Vec cannot fail");
        }
        write!(
            out,
            r#"],"prompt_tokens":{},"decode_tokens":{}}}"#,
            512 + next(512),
            1 + next(256)
        )
        .expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(b"]}");
    out
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
    fn generated_bench_traces_are_valid() {
        let chain = kvroute_core::parse_trace(&super::chain_trace_bytes(16)).unwrap();
        assert_eq!(chain.workers.len(), 16);
        let scale = super::scale_trace_bytes(200_000, 4);
        assert!(scale.len() >= 200_000);
        let trace = kvroute_core::parse_trace(&scale).unwrap();
        assert!(trace.request_count() > 100);
    }

    #[test]
    fn first_lines_keeps_whole_lines() {
        assert_eq!(first_lines(b"a\nb\nc\n", 2), b"a\nb\n");
        assert_eq!(first_lines(b"a\nb", 5), b"a\nb");
        assert_eq!(first_lines(b"a\nb\n", 0), b"");
    }
}
