//! Criterion statistics for kvroute's hot paths (`cargo bench -p kvroute-bench`); the
//! one-table summary with targets is `just bench` (`src/bin/bench-table.rs`).
//!
//! Groups, each with `Throughput::Elements(decisions)` so criterion reports decisions
//! per second:
//! - `decisions`: one policy's replay of the Mooncake requests plus the cache events
//!   the closed `cache_plus_load` loop generated, on 8, 64 and 512 workers. `no_receipt`
//!   is `run_metrics` (no candidate row materialised); `receipt` adds the streaming
//!   receipt's per-decision work (candidate rows, JSON value, canonical bytes). Receipt
//!   cost grows with the candidate rows, so at 64 and 512 workers it is measured on the
//!   first 1,024 requests (`receipt_first1024`), and at 512 for `cache_plus_load` only.
//! - `oracle_ratio`: the core-versus-oracle comparison on 4,096 requests: core's
//!   `replay_bytes` and the oracle's `replay` do the same work (parse, four policies,
//!   full receipt); `core_no_receipt` is parse + compile + `run_metrics` for each
//!   policy. Divide the oracle's time by core's for the ratio.
//! - `closed_loop`: `simulate` (no events kept) of each policy and of all four on 8
//!   workers over the full Mooncake trace.
//!
//! Sample counts and times are small (10 samples, flat sampling) so the whole run fits
//! in about five minutes on 2 cores; use the statistics for comparisons between builds.
//! Criterion's "Unable to complete 10 samples" warning for the slowest benches (a run
//! of several seconds) is expected: they take the minimum of 10 runs.
//!
//! A replay allocates and frees its cache index, so its speed depends on what else is on
//! the heap; each fleet's traces are built, measured and dropped in turn so that only
//! the measured trace is resident, as in the table.

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use kvroute_bench::{
    import, mooncake_bytes, oracle_trace_bytes, receipt_window_trace, replay_trace, request_count,
    run_with_receipt, simulate_all, simulation_input, ORACLE_TRACE_REQUESTS, WORKER_COUNTS,
};
use kvroute_core::route::run_metrics;
use kvroute_core::route::Compiled;
use kvroute_core::simulate::{simulate_policy, SimulateOptions};
use kvroute_core::{parse_trace, replay_bytes, Policy};
use std::hint::black_box;
use std::time::Duration;

fn decisions(c: &mut Criterion) {
    let mooncake = mooncake_bytes();
    let mut group = c.benchmark_group("decisions");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1));
    for workers in WORKER_COUNTS {
        let trace = replay_trace(&import(&mooncake, workers));
        {
            let compiled = Compiled::new(&trace);
            group
                .throughput(Throughput::Elements(request_count(&trace)))
                .measurement_time(Duration::from_secs(3));
            for policy in Policy::STANDARD {
                let id = BenchmarkId::new(format!("{}/no_receipt", policy.name()), workers);
                group.bench_with_input(id, &compiled, |b, compiled| {
                    b.iter(|| run_metrics(black_box(compiled), policy))
                });
            }
        }
        // With receipt: the full trace at 8 workers, the first 1,024 requests above. Only
        // the measured trace stays on the heap, as in the table: what else is allocated
        // changes the replay's speed.
        let (trace, receipt_name) = if workers == 8 {
            (trace, "receipt")
        } else {
            drop(trace);
            (
                receipt_window_trace(&mooncake, workers),
                "receipt_first1024",
            )
        };
        let compiled = Compiled::new(&trace);
        group
            .throughput(Throughput::Elements(request_count(&trace)))
            .measurement_time(Duration::from_secs(if workers == 512 { 12 } else { 6 }));
        for policy in Policy::STANDARD {
            if workers == 512 && policy != Policy::CachePlusLoad {
                continue;
            }
            let id = BenchmarkId::new(format!("{}/{receipt_name}", policy.name()), workers);
            group.bench_with_input(id, &compiled, |b, compiled| {
                b.iter(|| run_with_receipt(black_box(compiled), policy))
            });
        }
    }
    group.finish();
}

fn oracle_ratio(c: &mut Criterion) {
    let mooncake = mooncake_bytes();
    let bytes = oracle_trace_bytes(&mooncake);
    let mut group = c.benchmark_group("oracle_ratio");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(4 * ORACLE_TRACE_REQUESTS as u64));
    group.bench_function("core_replay_bytes", |b| {
        b.iter(|| replay_bytes(black_box(&bytes)).expect("validates"))
    });
    group.bench_function("oracle_replay", |b| {
        b.iter(|| kvroute_oracle::replay(black_box(&bytes)).expect("validates"))
    });
    group.bench_function("core_no_receipt", |b| {
        b.iter(|| {
            let trace = parse_trace(black_box(&bytes)).expect("validates");
            let compiled = Compiled::new(&trace);
            Policy::STANDARD.map(|policy| run_metrics(&compiled, policy))
        })
    });
    group.finish();
}

fn closed_loop(c: &mut Criterion) {
    let mooncake = mooncake_bytes();
    let sim = simulation_input(&import(&mooncake, 8));
    let compiled = Compiled::new(&sim);
    let requests = request_count(&sim);
    let mut group = c.benchmark_group("closed_loop");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(requests));
    for policy in Policy::STANDARD {
        group.bench_function(BenchmarkId::new("simulate", policy.name()), |b| {
            b.iter(|| {
                simulate_policy(
                    black_box(&compiled),
                    policy,
                    &SimulateOptions::default(),
                    false,
                    &mut (),
                )
            })
        });
    }
    group
        .throughput(Throughput::Elements(4 * requests))
        .measurement_time(Duration::from_secs(6));
    group.bench_function("simulate/all_four_policies", |b| {
        b.iter(|| simulate_all(black_box(&compiled)))
    });
    group.finish();
}

criterion_group!(benches, decisions, oracle_ratio, closed_loop);
criterion_main!(benches);
