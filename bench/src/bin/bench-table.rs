//! `just bench`: kvroute's performance figures as one table, each next to its target.
//!
//! What is measured, and why:
//! - **routing throughput**: decisions per second of one policy's replay on one thread,
//!   for every policy on 8, 64 and 512 workers, without a receipt (`run_metrics`, the
//!   mode a ten-million-request trace runs in) and with the per-decision receipt work
//!   (candidate rows, JSON value, canonical bytes: what the streaming receipt does per
//!   decision). The replayed trace is Mooncake's 12,031 requests plus the cache events
//!   the closed `cache_plus_load` loop generated for them, so routes are not all cold.
//! - **core versus oracle**: the same work (parse, four policies, full canonical
//!   receipt) on a 4,096-request trace, as `oracle_time / core_time`; and core without
//!   the receipt against the same oracle time, labelled as such.
//! - **swarm**: seeds per second of the differential sweep at 1 and 2 jobs, and the
//!   scaling between them.
//! - **closed loop**: `simulate` of all four policies on 8 workers, end to end from the
//!   Mooncake file and the simulation alone; its peak memory is read from `VmHWM` in a
//!   fresh child process (this binary re-run with `--peak-memory-child`), so the other
//!   figures' allocations do not count.
//!
//! - **receipts and input**: decisions per second with a JSON Lines receipt
//!   (`write_jsonl`, all four policies, to `io::sink`) at 8, 64 and 512 workers; the
//!   cost of one differential check divided by core's parse + route alone on the same
//!   seeds; `parse_trace` throughput; and peak memory (`VmHWM` of a fresh child) of
//!   `validate`, `replay --format jsonl` and `replay --format json --out` on a generated
//!   200 MB trace and on a 1-request × 4,096-worker dominance-chain trace, both written
//!   to a temporary directory by this run and deleted after it; the children read the
//!   trace as the CLI does (`read_trace_compact`, `Compiled::from_compact`), and the
//!   200 MB trace's `validate` and `replay --format jsonl` peaks print against their
//!   targets (64 MB and 150 MB).
//!
//! - **input**: `parse_trace` (bytes) and `read_trace` (streamed from a file) on the
//!   core-versus-oracle trace, and `replay_bytes`, without the oracle's slow run.
//!
//! - **verify**: `kvroute verify` of a receipt against core's `replay
//!   --format json` of the same trace, both from files as the commands run them, on the
//!   Mooncake import at 8 workers (an 89 MB receipt) and on Mooncake plus its closed-loop
//!   cache events at 64 workers (a 670 MB receipt), as a ratio measured in the same run,
//!   with the peak memory of each in a fresh child.
//!
//! - **wide fleets**: what `kvroute replay TRACE` does (parse, trace digest,
//!   four policies streamed into the receipt digest, every row's dominance included) on
//!   1 MB `scale` traces of 4,096 workers with one cache entry each and 120 one-segment
//!   requests, with every reuse distinct and with most rows tied
//!   (`kvroute_harness::costly::wide_trace_bytes`).
//!
//! `bench-table SECTION...` runs only the named sections (`routing`, `input`,
//! `oracle`, `swarm`, `closed-loop`, `memory`, `verify`, `wide`); with none, all of
//! them.
//!
//! Each figure is the best of several timed runs after one untimed warm-up (fewer runs
//! for figures whose single run is slow; the count is printed). Importing and preparing
//! the traces is timed separately and counted in no figure. Criterion's statistics for
//! the same workloads come from `cargo bench -p kvroute-bench`.

use kvroute_bench::{
    cache_event_count, chain_trace_bytes, import, mooncake_bytes, mooncake_path,
    oracle_trace_bytes, receipt_window_trace, replay_trace, request_count, run_with_receipt,
    scale_trace_bytes, simulate_all, simulation_input, vm_hwm_kib, ORACLE_TRACE_REQUESTS,
    RECEIPT_WINDOW_REQUESTS, WORKER_COUNTS,
};
use kvroute_core::output::jcs_bytes;
use kvroute_core::output::metrics_value;
use kvroute_core::output::{trace_digest, trace_digest_of};
use kvroute_core::replay;
use kvroute_core::route::run_metrics;
use kvroute_core::route::Compiled;
use kvroute_core::{parse_trace, read_trace, read_trace_compact, replay_bytes, Policy};
use kvroute_harness::costly::{wide_trace_bytes, WideShape};
use kvroute_harness::differential;
use kvroute_harness::sweep::{self, SweepConfig};
use std::hint::black_box;
use std::process::Command;
use std::time::{Duration, Instant};

/// The hidden argument that makes this binary the peak-memory child.
const PEAK_MEMORY_CHILD: &str = "--peak-memory-child";

/// Seeds per swarm measurement, and how many times each job count is measured.
const SWARM_SEEDS: u64 = 2_000;
const SWARM_REPETITIONS: usize = 2;

/// The targets (SPEC.md / the project's performance goals).
// The routing targets: cache_plus_load, no receipt, one core, at 64 and 512 workers.
const TARGET_DECISIONS_PER_SECOND_64: f64 = 1_000_000.0;
const TARGET_DECISIONS_PER_SECOND_512: f64 = 300_000.0;
const TARGET_ORACLE_RATIO: f64 = 50.0;
const TARGET_SWARM_SCALING: f64 = 1.7;
const TARGET_CLOSED_LOOP_SECONDS: f64 = 1.0;
const TARGET_PEAK_MEMORY_BYTES: u64 = 300_000_000;
// The verify targets: verify ÷ core's replay, and verify's peak at 8 and 64 workers.
const TARGET_VERIFY_RATIO: f64 = 5.0;
const TARGET_VERIFY_PEAK_BYTES_8: u64 = 200_000_000;
const TARGET_VERIFY_PEAK_BYTES_64: u64 = 300_000_000;
// The swarm, input and receipt targets.
const TARGET_SWARM_SEEDS_PER_CORE: f64 = 1_500.0;
const TARGET_PARSE_MB_PER_SECOND: f64 = 150.0;
const TARGET_CORE_REPLAY_MS: f64 = 300.0;
const TARGET_DIFFERENTIAL_RATIO: f64 = 2.5;
const TARGET_JSONL_DECISIONS_PER_SECOND_64: f64 = 25_000.0;
const TARGET_SCALE_JSONL_PEAK_BYTES: u64 = 150_000_000;
/// `kvroute validate` of the same trace.
const TARGET_SCALE_VALIDATE_PEAK_BYTES: u64 = 64_000_000;
const TARGET_CHAIN_JSON_PEAK_BYTES: u64 = 100_000_000;
// The wide-fleet target: the replay of a wide trace, in seconds.
const TARGET_WIDE_REPLAY_SECONDS: f64 = 1.5;

/// Seeds of the differential-cost ratio, and the memory figures' generated traces.
const DIFFERENTIAL_SEEDS: u64 = 400;
const SCALE_TRACE_BYTES: usize = 200_000_000;
const SCALE_TRACE_WORKERS: usize = 8;
const CHAIN_WORKERS: usize = 4_096;
/// The wide traces: workers (one cache entry each) and one-segment requests.
const WIDE_WORKERS: usize = 4_096;
const WIDE_REQUESTS: usize = 120;

/// A figure's best time and how many timed runs it was the best of.
#[derive(Clone, Copy)]
struct Measured {
    best: Duration,
    runs: usize,
}

impl Measured {
    fn per_second(self, count: u64) -> f64 {
        count as f64 / self.best.as_secs_f64()
    }

    fn elapsed_ms(self) -> f64 {
        self.best.as_secs_f64() * 1e3
    }
}

/// One warm-up run, then the best of 5 runs (3 if the warm-up took over 0.5 s, 2 if it
/// took over 2 s). The result of every run goes through `black_box`; the last one is
/// returned, for checking.
fn measure<T>(mut f: impl FnMut() -> T) -> (Measured, T) {
    let (mut last, warm_up) = timed(&mut f);
    let runs = if warm_up > Duration::from_secs(2) {
        2
    } else if warm_up > Duration::from_millis(500) {
        3
    } else {
        5
    };
    let mut best = Duration::MAX;
    for _ in 0..runs {
        let (value, elapsed) = timed(&mut f);
        // The previous result is dropped outside the timed region.
        last = value;
        best = best.min(elapsed);
    }
    (Measured { best, runs }, last)
}

fn timed<T>(f: &mut impl FnMut() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = black_box(f());
    (value, started.elapsed())
}

/// `1234567.8` as `1,234,568`.
fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn status(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// One line of the closing targets table.
struct TargetRow {
    figure: String,
    measured: String,
    target: String,
    status: String,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(PEAK_MEMORY_CHILD) {
        peak_memory_child(&args[1..]);
        return;
    }
    let wants = |section: &str| args.is_empty() || args.iter().any(|a| a == section);
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mooncake = mooncake_bytes();
    print_header(cores, &mooncake);
    let mut targets = Vec::new();
    if wants("routing") {
        routing_section(&mooncake, &mut targets);
    }
    if wants("input") {
        // The oracle section measures and prints the same target when it runs too.
        input_section(&mooncake, !wants("oracle"), &mut targets);
    }
    if wants("oracle") {
        oracle_section(&mooncake, &mut targets);
    }
    if wants("swarm") {
        swarm_section(cores, &mut targets);
    }
    if wants("closed-loop") {
        closed_loop_section(&mooncake, &mut targets);
    }
    if wants("memory") {
        memory_section(&mut targets);
    }
    if wants("verify") {
        verify_section(&mooncake, &mut targets);
    }
    if wants("wide") {
        wide_section(&mut targets);
    }
    print_targets(&targets);
    println!();
    println!("load average at end: {}", load_average());
    println!(
        "bench-table elapsed_ms: {:.0}",
        started.elapsed().as_secs_f64() * 1e3
    );
}

/// The run's opening lines: the machine, the trace, how figures are taken, the load.
fn print_header(cores: usize, mooncake: &[u8]) {
    println!("kvroute benchmarks (bench-table)");
    println!("machine: {cores} cores (std::thread::available_parallelism); release build");
    println!(
        "trace: {} ({} lines)",
        mooncake_path().display(),
        grouped(mooncake.iter().filter(|&&b| b == b'\n').count() as f64)
    );
    println!("every figure: best of N timed runs after one warm-up run (N in the runs column)");
    println!(
        "load average at start: {} (other processes on the machine slow every figure)",
        load_average()
    );
}

/// One policy's routing figures on one fleet.
struct PolicyRates {
    policy: Policy,
    /// Decisions per second without a receipt, and the runs it is the best of.
    plain_rate: f64,
    plain_runs: usize,
    /// Decisions that reused a cached prefix, from the no-receipt run.
    cache_hits: u64,
    /// The with-receipt rate and runs as printed, once measured.
    receipt: Option<(String, String)>,
}

/// What the routing section gathers across fleets before it prints.
#[derive(Default)]
struct RoutingTally {
    setup_rows: Vec<String>,
    routing_rows: Vec<String>,
    /// cache_plus_load's no-receipt rate at each fleet that has a target.
    cache_plus_load_rates: Vec<(u32, f64)>,
    /// Runs whose metrics differ with and without the receipt (there should be none).
    mismatches: Vec<String>,
    jsonl_rows: Vec<JsonlRow>,
}

/// Routing throughput, one fleet at a time, then its tables and targets.
fn routing_section(mooncake: &[u8], targets: &mut Vec<TargetRow>) {
    // Only the fleet's own trace is alive while it is measured: a replay allocates and
    // frees its cache index, so its speed depends on what else is on the heap (holding
    // the other fleets' traces costs about a third).
    let mut tally = RoutingTally::default();
    for workers in WORKER_COUNTS {
        routing_fleet(mooncake, workers, &mut tally);
    }
    print_routing_tables(&tally);
    print_jsonl_rows(&tally.jsonl_rows, targets);
    push_routing_targets(&tally.cache_plus_load_rates, targets);
}

/// Measures every policy on one fleet and adds its set-up, throughput and JSON Lines
/// rows to `tally`.
fn routing_fleet(mooncake: &[u8], workers: u32, tally: &mut RoutingTally) {
    let (imported, import_time) = timed(&mut || import(mooncake, workers));
    let (trace, events_time) = timed(&mut || replay_trace(&imported));
    drop(imported);
    let (compiled, compile_time) = timed(&mut || Compiled::new(&trace));
    let decisions = request_count(&trace);
    tally.setup_rows.push(format!(
        "{workers:>7}  {:>9.1}  {:>21.1}  {:>10.1}  {:>8}  {:>12}",
        import_time.as_secs_f64() * 1e3,
        events_time.as_secs_f64() * 1e3,
        compile_time.as_secs_f64() * 1e3,
        grouped(decisions as f64),
        grouped(cache_event_count(&trace) as f64),
    ));
    let mut rows = Vec::new();
    for policy in Policy::STANDARD {
        rows.push(policy_rates(&compiled, workers, policy, decisions, tally));
    }
    if workers != 512 {
        tally
            .jsonl_rows
            .push(jsonl_row(workers, &compiled, decisions, None));
    }
    drop(compiled);
    drop(trace);
    // 512 workers with receipt: every policy, on the first requests only (a full
    // run writes about 150 KB of receipt per decision).
    if workers == 512 {
        receipt_window_rates(mooncake, workers, &mut rows, tally);
    }
    for row in rows {
        let (receipt_rate, receipt_runs) = row.receipt.expect("set for every fleet");
        tally.routing_rows.push(format!(
            "{:<16} {:>7}  {:>10}  {:>31} {:>4}  {:>33} {:>4}",
            row.policy.name(),
            workers,
            grouped(row.cache_hits as f64),
            grouped(row.plain_rate),
            row.plain_runs,
            receipt_rate,
            receipt_runs
        ));
    }
}

/// One policy's no-receipt rate on a fleet and, below 512 workers, its with-receipt
/// rate; a difference between the two runs' metrics is noted in `tally`.
fn policy_rates(
    compiled: &Compiled,
    workers: u32,
    policy: Policy,
    decisions: u64,
    tally: &mut RoutingTally,
) -> PolicyRates {
    let (plain, metrics) = measure(|| run_metrics(black_box(compiled), policy));
    let plain_rate = plain.per_second(decisions);
    if policy == Policy::CachePlusLoad {
        tally.cache_plus_load_rates.push((workers, plain_rate));
    }
    let receipt = (workers != 512).then(|| {
        let (m, (receipt_metrics, _)) = measure(|| run_with_receipt(black_box(compiled), policy));
        if receipt_metrics != metrics {
            tally
                .mismatches
                .push(format!("{} at {workers} workers", policy.name()));
        }
        (grouped(m.per_second(decisions)), m.runs.to_string())
    });
    PolicyRates {
        policy,
        plain_rate,
        plain_runs: plain.runs,
        cache_hits: metrics.cache_hits,
        receipt,
    }
}

/// The with-receipt rates and the JSON Lines row of a fleet measured on its trace's
/// first requests only.
fn receipt_window_rates(
    mooncake: &[u8],
    workers: u32,
    rows: &mut [PolicyRates],
    tally: &mut RoutingTally,
) {
    let window = receipt_window_trace(mooncake, workers);
    let compiled = Compiled::new(&window);
    tally.jsonl_rows.push(jsonl_row(
        workers,
        &compiled,
        request_count(&window),
        Some(RECEIPT_WINDOW_REQUESTS),
    ));
    for row in rows {
        let policy = row.policy;
        let (m, (receipt_metrics, _)) = measure(|| run_with_receipt(black_box(&compiled), policy));
        if receipt_metrics != run_metrics(&compiled, policy) {
            tally
                .mismatches
                .push(format!("{} at {workers} workers", policy.name()));
        }
        let rate = m.per_second(request_count(&window));
        row.receipt = Some((
            format!(
                "{} (first {} requests)",
                grouped(rate),
                grouped(RECEIPT_WINDOW_REQUESTS as f64)
            ),
            m.runs.to_string(),
        ));
    }
}

/// The set-up and routing throughput tables, and whether receipts changed any metrics.
fn print_routing_tables(tally: &RoutingTally) {
    println!();
    println!("## Set-up (counted in no figure below)");
    println!(
        "{:>7}  {:>9}  {:>21}  {:>10}  {:>8}  {:>12}",
        "workers", "import_ms", "closed_loop_events_ms", "compile_ms", "requests", "cache_events"
    );
    for row in &tally.setup_rows {
        println!("{row}");
    }
    println!();
    println!("## Routing throughput: decisions per second, one policy's replay on one thread");
    println!("   (replay of the Mooncake requests plus the cache_plus_load loop's cache events;");
    println!("    with receipt = candidate rows + JSON value + canonical bytes per decision;");
    println!("    cache_hits = decisions that reused a cached prefix, from the no-receipt run)");
    println!(
        "{:<16} {:>7}  {:>10}  {:>31} {:>4}  {:>33} {:>4}",
        "policy",
        "workers",
        "cache_hits",
        "no_receipt_decisions_per_second",
        "runs",
        "with_receipt_decisions_per_second",
        "runs"
    );
    for row in &tally.routing_rows {
        println!("{row}");
    }
    if tally.mismatches.is_empty() {
        println!("metrics with and without receipt: identical for every run measured both ways");
    } else {
        println!(
            "metrics with and without receipt DIFFER for: {}",
            tally.mismatches.join(", ")
        );
    }
}

/// The JSON Lines receipt table, and its target at 64 workers.
fn print_jsonl_rows(jsonl_rows: &[JsonlRow], targets: &mut Vec<TargetRow>) {
    println!();
    println!("## JSON Lines receipt: write_jsonl (4 policies, 3 passes each) to io::sink");
    println!(
        "{:>7}  {:>26}  {:>4}  trace",
        "workers", "decisions_per_second", "runs"
    );
    for row in jsonl_rows {
        println!(
            "{:>7}  {:>26}  {:>4}  {}",
            row.workers,
            grouped(row.rate),
            row.runs,
            row.window
                .map_or("all 12,031 requests".to_owned(), |n| format!(
                    "first {} requests",
                    grouped(n as f64)
                ))
        );
        if row.workers == 64 {
            targets.push(TargetRow {
                figure: "replay with JSON Lines receipt, 64 workers".into(),
                measured: format!("{} decisions/s", grouped(row.rate)),
                target: format!(
                    ">= {} decisions/s",
                    grouped(TARGET_JSONL_DECISIONS_PER_SECOND_64)
                ),
                status: status(row.rate >= TARGET_JSONL_DECISIONS_PER_SECOND_64).into(),
            });
        }
    }
}

/// The cache_plus_load no-receipt targets, for the fleets that have one.
fn push_routing_targets(cache_plus_load_rates: &[(u32, f64)], targets: &mut Vec<TargetRow>) {
    for &(workers, rate) in cache_plus_load_rates {
        let target = match workers {
            64 => TARGET_DECISIONS_PER_SECOND_64,
            512 => TARGET_DECISIONS_PER_SECOND_512,
            _ => continue,
        };
        targets.push(TargetRow {
            figure: format!("cache_plus_load, {workers} workers, no receipt, 1 core"),
            measured: format!("{} decisions/s", grouped(rate)),
            target: format!(">= {} decisions/s", grouped(target)),
            status: if rate >= target {
                status(true).into()
            } else {
                format!("{} ({:.1}x short)", status(false), target / rate)
            },
        });
    }
}

/// Reading a trace alone, on the core-versus-oracle trace: from bytes in memory
/// (`parse_trace`, the figure the target is set on), streamed from a file as the CLI
/// reads it (`read_trace`), and `replay_bytes` for scale. No oracle, so this section is
/// quick to re-run while working on the input side.
fn input_section(mooncake: &[u8], with_parse_target: bool, targets: &mut Vec<TargetRow>) {
    println!();
    println!("## Reading a trace (the core-versus-oracle trace, no oracle)");
    let trace_bytes = oracle_trace_bytes(mooncake);
    let path =
        std::env::temp_dir().join(format!("kvroute-bench-input-{}.json", std::process::id()));
    std::fs::write(&path, &trace_bytes).expect("the trace is written");
    let parse = measure(|| parse_trace(black_box(&trace_bytes)).map(|t| t.events.len())).0;
    let streamed = measure(|| {
        let file = std::fs::File::open(&path).expect("the trace file is readable");
        read_trace(file).map(|t| t.events.len()).expect("validates")
    })
    .0;
    let replay = measure(|| replay_bytes(black_box(&trace_bytes))).0;
    let _ = std::fs::remove_file(&path);
    let mb = trace_bytes.len() as f64 / 1e6;
    println!(
        "{:<58} {:>10} {:>8} {:>4}",
        "", "elapsed_ms", "MB/s", "runs"
    );
    if with_parse_target {
        targets.push(parse_target(trace_bytes.len(), parse));
    }
    for (label, m) in [
        ("parse_trace (bytes in memory)", parse),
        ("read_trace (streamed from a file)", streamed),
        ("replay_bytes (parse + 4 policies + receipt)", replay),
    ] {
        println!(
            "{label:<58} {:>10.1} {:>8.1} {:>4}",
            m.elapsed_ms(),
            mb / m.best.as_secs_f64(),
            m.runs
        );
    }
}

/// The core-versus-oracle timings of one trace.
struct OracleFigures {
    /// `replay_bytes` and the oracle's `replay`: parse, four policies, receipt.
    core: Measured,
    oracle: Measured,
    /// Core's parse, compile and four `run_metrics`, without a receipt.
    core_metrics_only: Measured,
    parse_only: Measured,
    /// Routing alone from each side's validated trace, and whether the metrics agree.
    core_routing: Measured,
    oracle_routing: Measured,
    metrics_agree: bool,
}

/// Core versus oracle on the same trace: receipts and metrics compared, then timed.
fn oracle_section(mooncake: &[u8], targets: &mut Vec<TargetRow>) {
    println!();
    println!(
        "## Core versus oracle: {} Mooncake requests on 8 workers with closed-loop cache events",
        grouped(ORACLE_TRACE_REQUESTS as f64)
    );
    let (trace_bytes, prep_time) = timed(&mut || oracle_trace_bytes(mooncake));
    println!(
        "   trace: {} bytes of canonical JSON, prepared in {:.1} ms (not counted)",
        grouped(trace_bytes.len() as f64),
        prep_time.as_secs_f64() * 1e3
    );
    let core_receipt = replay_bytes(&trace_bytes).expect("the trace validates in core");
    let oracle_receipt = kvroute_oracle::replay(&trace_bytes).expect("the trace validates");
    let identical = core_receipt == oracle_receipt;
    println!(
        "   receipts identical: {identical} ({} bytes)",
        grouped(core_receipt.len() as f64)
    );
    drop((core_receipt, oracle_receipt));
    let figures = oracle_figures(&trace_bytes);
    print_oracle_figures(&figures);
    push_oracle_targets(&figures, trace_bytes.len(), targets);
}

/// Times core and the oracle on `trace_bytes`, whole and routing alone; prints whether
/// the routing-only metrics agree.
fn oracle_figures(trace_bytes: &[u8]) -> OracleFigures {
    let core = measure(|| replay_bytes(black_box(trace_bytes))).0;
    let oracle = measure(|| kvroute_oracle::replay(black_box(trace_bytes))).0;
    let core_metrics_only = measure(|| {
        let trace = parse_trace(black_box(trace_bytes)).expect("validates");
        let compiled = Compiled::new(&trace);
        Policy::STANDARD.map(|policy| run_metrics(&compiled, policy))
    })
    .0;
    let parse_only = measure(|| parse_trace(black_box(trace_bytes)).map(|t| t.events.len())).0;
    // Routing alone: both sides start from their own validated trace and compute the
    // same decisions and metrics (checked below) without writing a receipt.
    let validated_core = parse_trace(trace_bytes).expect("validates");
    let validated_oracle = kvroute_oracle::validated(trace_bytes).expect("validates");
    let metrics_agree = core_routing_metrics(&validated_core)
        == kvroute_oracle::replay_metrics(&validated_oracle).expect("replays");
    println!("   routing-only metrics identical: {metrics_agree}");
    let core_routing = measure(|| core_routing_metrics(black_box(&validated_core))).0;
    let oracle_routing = measure(|| kvroute_oracle::replay_metrics(black_box(&validated_oracle))).0;
    OracleFigures {
        core,
        oracle,
        core_metrics_only,
        parse_only,
        core_routing,
        oracle_routing,
        metrics_agree,
    }
}

/// Core's four policies' metrics on a validated trace, as the canonical bytes the
/// oracle's `replay_metrics` returns.
fn core_routing_metrics(trace: &kvroute_core::Trace) -> Vec<u8> {
    let compiled = Compiled::new(trace);
    let runs: Vec<serde_json::Value> = Policy::STANDARD
        .iter()
        .map(|&p| {
            serde_json::json!({
                "policy": p.name(),
                "metrics": metrics_value(&run_metrics(&compiled, p)),
            })
        })
        .collect();
    jcs_bytes(&serde_json::Value::Array(runs))
}

/// The core-versus-oracle timings table.
fn print_oracle_figures(f: &OracleFigures) {
    println!("{:<58} {:>10} {:>4}", "", "elapsed_ms", "runs");
    for (label, m) in [
        ("core replay_bytes (parse + 4 policies + receipt)", f.core),
        ("oracle replay (parse + 4 policies + receipt)", f.oracle),
        (
            "core without receipt (parse + compile + 4x run_metrics)",
            f.core_metrics_only,
        ),
        ("core parse_trace alone (for reference)", f.parse_only),
        (
            "core routing only (compile + 4 policies, no receipt)",
            f.core_routing,
        ),
        (
            "oracle routing only (4 policies in memory, no receipt)",
            f.oracle_routing,
        ),
    ] {
        println!("{label:<58} {:>10.1} {:>4}", m.elapsed_ms(), m.runs);
    }
}

/// The oracle-to-core ratios and parse throughput, printed and added to the targets.
fn push_oracle_targets(f: &OracleFigures, trace_len: usize, targets: &mut Vec<TargetRow>) {
    let ratio = f.oracle.best.as_secs_f64() / f.core.best.as_secs_f64();
    let ratio_metrics_only = f.oracle.best.as_secs_f64() / f.core_metrics_only.best.as_secs_f64();
    println!("oracle_time / core_time: {ratio:.2}x (with receipt, like for like)");
    println!("oracle_time / core_without_receipt_time: {ratio_metrics_only:.2}x");
    let ratio_routing = f.oracle_routing.best.as_secs_f64() / f.core_routing.best.as_secs_f64();
    println!("oracle_routing_time / core_routing_time: {ratio_routing:.2}x (validated input, same metrics)");
    let requests = grouped(ORACLE_TRACE_REQUESTS as f64);
    let ratio_row = |figure: String, ratio: f64, valid: bool| TargetRow {
        figure,
        measured: format!("{ratio:.2}x"),
        target: format!(">= {TARGET_ORACLE_RATIO:.0}x"),
        status: if valid {
            status(ratio >= TARGET_ORACLE_RATIO).into()
        } else {
            "INVALID: metrics differ".into()
        },
    };
    let parse_mb_per_second = trace_len as f64 / 1e6 / f.parse_only.best.as_secs_f64();
    println!("parse_trace throughput: {parse_mb_per_second:.1} MB/s");
    targets.push(parse_target(trace_len, f.parse_only));
    targets.push(TargetRow {
        figure: format!("core replay_bytes with receipt, {requests} requests"),
        measured: format!("{:.1} ms", f.core.elapsed_ms()),
        target: format!("<= {TARGET_CORE_REPLAY_MS:.0} ms"),
        status: status(f.core.elapsed_ms() <= TARGET_CORE_REPLAY_MS).into(),
    });
    targets.push(ratio_row(
        format!("core vs oracle routing, {requests} requests, validated input"),
        ratio_routing,
        f.metrics_agree,
    ));
    targets.push(ratio_row(
        format!("core vs oracle, {requests} requests, like for like"),
        ratio,
        true,
    ));
    targets.push(ratio_row(
        "core without receipt vs oracle (not like for like)".into(),
        ratio_metrics_only,
        true,
    ));
}

/// The swarm's seeds per second at 1 and 2 jobs, then the differential check's cost.
fn swarm_section(cores: usize, targets: &mut Vec<TargetRow>) {
    println!();
    println!(
        "## Swarm: {} seeds through the differential oracle, best of {SWARM_REPETITIONS}",
        grouped(SWARM_SEEDS as f64)
    );
    let (best_rate, failures) = swarm_best_rates();
    let scaling = best_rate[1] / best_rate[0];
    println!("{:<8} {:>16}", "jobs", "seeds_per_second");
    println!("{:<8} {:>16.1}", 1, best_rate[0]);
    println!("{:<8} {:>16.1}", 2, best_rate[1]);
    println!("scaling (jobs 2 / jobs 1): {scaling:.2}x; divergent seeds: {failures}");
    let per_core = best_rate[0].max(best_rate[1] / 2.0);
    targets.push(TargetRow {
        figure: "swarm seeds/s per core (jobs 1; jobs 2 / 2)".into(),
        measured: format!(
            "{:.0} ({:.0}; {:.0})",
            per_core,
            best_rate[0],
            best_rate[1] / 2.0
        ),
        target: format!(">= {TARGET_SWARM_SEEDS_PER_CORE:.0}"),
        status: status(per_core >= TARGET_SWARM_SEEDS_PER_CORE).into(),
    });
    differential_cost(targets);
    targets.push(TargetRow {
        figure: format!("swarm scaling, jobs 2 / jobs 1 ({cores} cores)"),
        measured: format!("{scaling:.2}x"),
        target: format!(">= {TARGET_SWARM_SCALING}x"),
        status: status(scaling >= TARGET_SWARM_SCALING).into(),
    });
}

/// The best seeds per second at 1 and 2 jobs after a warm-up sweep, and the divergent
/// seeds found in all the sweeps.
fn swarm_best_rates() -> ([f64; 2], usize) {
    let warm_up = SweepConfig {
        start: 0,
        seeds: 200,
        jobs: 2,
        shard: None,
    };
    black_box(sweep::run(&warm_up, || {}).expect("a valid sweep configuration"));
    let mut best_rate = [0.0f64; 2];
    let mut failures = 0;
    for _ in 0..SWARM_REPETITIONS {
        for (slot, jobs) in [1usize, 2].into_iter().enumerate() {
            let config = SweepConfig {
                start: 0,
                seeds: SWARM_SEEDS,
                jobs,
                shard: None,
            };
            let report = sweep::run(&config, || {}).expect("a valid sweep configuration");
            failures += report.failures.len();
            best_rate[slot] = best_rate[slot].max(report.seeds_per_second());
        }
    }
    (best_rate, failures)
}

/// One differential check against core's parse + route alone, same seeds, one thread;
/// the trace bytes are built before either is timed.
fn differential_cost(targets: &mut Vec<TargetRow>) {
    let seeds: Vec<Vec<u8>> = (0..DIFFERENTIAL_SEEDS).map(sweep::trace_for_seed).collect();
    let differential_time = measure(|| {
        seeds
            .iter()
            .filter(|bytes| differential::compare(black_box(bytes)).is_ok())
            .count()
    })
    .0;
    let core_alone = measure(|| {
        seeds
            .iter()
            .map(|bytes| {
                let trace = parse_trace(black_box(bytes)).expect("generated traces are valid");
                let compiled = Compiled::new(&trace);
                Policy::STANDARD.map(|policy| run_metrics(&compiled, policy).routed)
            })
            .count()
    })
    .0;
    let differential_ratio = differential_time.best.as_secs_f64() / core_alone.best.as_secs_f64();
    println!(
        "differential check of {DIFFERENTIAL_SEEDS} seeds: {:.1} ms; core parse + compile + \
         4x run_metrics: {:.1} ms; ratio {differential_ratio:.2}x",
        differential_time.elapsed_ms(),
        core_alone.elapsed_ms()
    );
    targets.push(TargetRow {
        figure: format!("differential check / core parse+route ({DIFFERENTIAL_SEEDS} seeds)"),
        measured: format!("{differential_ratio:.2}x"),
        target: format!("<= {TARGET_DIFFERENTIAL_RATIO}x"),
        status: status(differential_ratio <= TARGET_DIFFERENTIAL_RATIO).into(),
    });
}

/// `simulate` of all four policies on 8 workers: alone, end to end, and the end-to-end
/// path's peak memory in a fresh child.
fn closed_loop_section(mooncake: &[u8], targets: &mut Vec<TargetRow>) {
    println!();
    println!("## Closed loop: simulate all four policies on 8 workers (no events kept)");
    let imported = import(mooncake, 8);
    let sim = simulation_input(&imported);
    let compiled = Compiled::new(&sim);
    let simulate_only = measure(|| simulate_all(black_box(&compiled))).0;
    let end_to_end = measure(|| {
        let imported = import(black_box(mooncake), 8);
        let sim = simulation_input(&imported);
        let compiled = Compiled::new(&sim);
        simulate_all(&compiled).len()
    })
    .0;
    let peak_bytes = peak_memory_bytes(&["closed-loop"]);
    println!("{:<58} {:>10} {:>4}", "", "elapsed_ms", "runs");
    println!(
        "{:<58} {:>10.1} {:>4}",
        "simulate x4 alone (compiled trace given)",
        simulate_only.elapsed_ms(),
        simulate_only.runs
    );
    println!(
        "{:<58} {:>10.1} {:>4}",
        "end to end (import + compile + simulate x4)",
        end_to_end.elapsed_ms(),
        end_to_end.runs
    );
    match peak_bytes {
        Some(bytes) => println!(
            "peak memory (VmHWM of a fresh process running only the end-to-end path): {:.1} MB",
            bytes as f64 / 1e6
        ),
        None => println!("peak memory: could not be read (no /proc/self/status?)"),
    }
    push_closed_loop_targets(simulate_only, end_to_end, peak_bytes, targets);
}

/// The closed loop's end-to-end time and peak memory targets.
fn push_closed_loop_targets(
    simulate_only: Measured,
    end_to_end: Measured,
    peak_bytes: Option<u64>,
    targets: &mut Vec<TargetRow>,
) {
    let seconds = end_to_end.best.as_secs_f64();
    targets.push(TargetRow {
        figure: "closed loop, 4 policies, 8 workers, end to end".into(),
        measured: format!(
            "{:.3} s ({:.3} s simulate alone)",
            seconds,
            simulate_only.best.as_secs_f64()
        ),
        target: format!("< {TARGET_CLOSED_LOOP_SECONDS} s"),
        status: status(seconds < TARGET_CLOSED_LOOP_SECONDS).into(),
    });
    targets.push(TargetRow {
        figure: "closed loop peak memory (fresh process)".into(),
        measured: peak_bytes.map_or("unknown".into(), |b| format!("{:.1} MB", b as f64 / 1e6)),
        target: format!("< {} MB", TARGET_PEAK_MEMORY_BYTES / 1_000_000),
        status: peak_bytes.map_or("unknown".into(), |b| {
            status(b < TARGET_PEAK_MEMORY_BYTES).into()
        }),
    });
}

/// The closing table: every figure next to its target.
fn print_targets(targets: &[TargetRow]) {
    println!();
    println!("## Targets");
    // Widths in characters, as `{:<width$}` pads: some figures are not ASCII (`×`, `≤`).
    let chars = |text: &String| text.chars().count();
    let width = targets.iter().map(|t| chars(&t.figure)).max().unwrap_or(0);
    let measured_width = targets
        .iter()
        .map(|t| chars(&t.measured))
        .max()
        .unwrap_or(0);
    let target_width = targets.iter().map(|t| chars(&t.target)).max().unwrap_or(0);
    println!(
        "{:<width$}  {:<measured_width$}  {:<target_width$}  status",
        "figure", "measured", "target"
    );
    for t in targets {
        println!(
            "{:<width$}  {:<measured_width$}  {:<target_width$}  {}",
            t.figure, t.measured, t.target, t.status
        );
    }
}

/// The `parse_trace` target line for `bytes` parsed as `parse`.
fn parse_target(bytes: usize, parse: Measured) -> TargetRow {
    let mb_per_second = bytes as f64 / 1e6 / parse.best.as_secs_f64();
    TargetRow {
        figure: format!("parse_trace, {} MB canonical trace", bytes / 1_000_000),
        measured: format!("{mb_per_second:.1} MB/s ({:.1} ms)", parse.elapsed_ms()),
        target: format!(">= {TARGET_PARSE_MB_PER_SECOND:.0} MB/s"),
        status: status(mb_per_second >= TARGET_PARSE_MB_PER_SECOND).into(),
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Runs this binary again as the peak-memory child with `args` and reads the bytes it
/// reports.
fn peak_memory_bytes(args: &[&str]) -> Option<u64> {
    let exe = std::env::current_exe().ok()?;
    let output = Command::new(exe)
        .arg(PEAK_MEMORY_CHILD)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        eprintln!(
            "the peak-memory child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        return None;
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM_kib "))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
}

/// The child: one workload, nothing else, then its `VmHWM`. `closed-loop` is the
/// closed loop end to end; `validate FILE`, `jsonl FILE` and `json FILE OUT` do what
/// `kvroute validate`, `kvroute replay --format jsonl` and `kvroute replay --format
/// json --out OUT` do (stream the file through `read_trace`, digest, write).
fn peak_memory_child(args: &[String]) {
    // As the CLI reads a trace: streamed from the file, never held as text, its events
    // held compactly.
    let file = || {
        let file = std::fs::File::open(&args[1]).expect("the child's trace file is readable");
        read_trace_compact(file).expect("the trace validates")
    };
    match args.first().map(String::as_str) {
        Some("closed-loop") => {
            let mooncake = mooncake_bytes();
            let imported = import(&mooncake, 8);
            drop(mooncake);
            let sim = simulation_input(&imported);
            let compiled = Compiled::new(&sim);
            black_box(simulate_all(black_box(&compiled)));
        }
        Some("validate") => {
            let (trace, events) = file();
            black_box(trace_digest_of(&trace, &events));
        }
        Some("verify") => {
            black_box(verify_receipt_file(&args[1], &args[2]));
        }
        Some("jsonl") => {
            let (trace, events) = file();
            let digest = trace_digest_of(&trace, &events);
            let mut out = std::io::BufWriter::new(std::io::sink());
            let compiled = Compiled::from_compact(&trace, &events);
            replay::write_jsonl(&compiled, &digest, &mut out).expect("sink");
        }
        Some("json") => {
            let (trace, events) = file();
            let digest = trace_digest_of(&trace, &events);
            let out = std::fs::File::create(&args[2]).expect("the child's output is writable");
            let mut out = std::io::BufWriter::new(out);
            let compiled = Compiled::from_compact(&trace, &events);
            replay::write_json(&compiled, &digest, &mut out).expect("written");
        }
        other => panic!("unknown peak-memory workload {other:?}"),
    }
    match vm_hwm_kib() {
        Some(kib) => println!("VmHWM_kib {kib}"),
        None => std::process::exit(1),
    }
}

/// What `kvroute replay TRACE --format json --out RECEIPT` does: the trace streamed
/// from its file, digested, compiled, and the receipt written through a buffer.
fn replay_json_file(trace: &std::path::Path, receipt: &std::path::Path) {
    use std::io::Write;
    let file = std::fs::File::open(trace).expect("the trace file is readable");
    let trace = read_trace(file).expect("the trace validates");
    let digest = trace_digest(&trace);
    let out = std::fs::File::create(receipt).expect("the receipt file is writable");
    let mut out = std::io::BufWriter::new(out);
    replay::write_json(&Compiled::new(&trace), &digest, &mut out).expect("written");
    out.flush().expect("written");
}

/// What `kvroute verify --trace TRACE RECEIPT` does; the receipt digest on a match.
fn verify_receipt_file(trace: &str, receipt: &str) -> String {
    let trace_bytes = std::fs::read(trace).expect("the trace file is readable");
    let file = std::fs::File::open(receipt).expect("the receipt file is readable");
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, file);
    match kvroute_cli::verify::verify_stream(&trace_bytes, &mut reader, None, &|_| {}) {
        Ok(verified) => verified.receipt_digest,
        Err(e) => panic!("core's receipt must verify: {e:?}"),
    }
}

/// The verify figures: verify against core's replay of the same trace, in one run.
/// Each side is timed once after one warm-up at 8 workers, and once at 64 (a run there
/// takes tens of seconds); peaks come from fresh children.
fn verify_section(mooncake: &[u8], targets: &mut Vec<TargetRow>) {
    println!();
    println!("## verify: the streamed check against core's replay --format json");
    println!(
        "{:<44}  {:>9}  {:>11}  {:>10}  {:>10}  {:>6}  {:>11}  {:>11}  runs",
        "trace",
        "trace MB",
        "receipt MB",
        "replay ms",
        "verify ms",
        "ratio",
        "replay peak",
        "verify peak"
    );
    let dir = std::env::temp_dir().join(format!("kvroute-bench-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let fleets: [(u32, &str, u64); 2] = [
        (8, "Mooncake import, 8 workers", TARGET_VERIFY_PEAK_BYTES_8),
        (
            64,
            "Mooncake + closed-loop events, 64 workers",
            TARGET_VERIFY_PEAK_BYTES_64,
        ),
    ];
    for (workers, name, target_peak) in fleets {
        verify_fleet(mooncake, &dir, workers, name, target_peak, targets);
    }
    let _ = std::fs::remove_dir(&dir);
}

/// One verify row: core's replay of the fleet's trace into a receipt file, that receipt
/// verified, both timed and their peaks read from fresh children; the files in `dir`
/// are removed after.
fn verify_fleet(
    mooncake: &[u8],
    dir: &std::path::Path,
    workers: u32,
    name: &str,
    target_peak: u64,
    targets: &mut Vec<TargetRow>,
) {
    let imported = import(mooncake, workers);
    let trace = if workers == 8 {
        imported
    } else {
        replay_trace(&imported)
    };
    let trace_path = dir.join(format!("verify-{workers}.trace.json"));
    let receipt_path = dir.join(format!("verify-{workers}.receipt.json"));
    let trace_bytes = kvroute_core::output::canonical_trace_bytes(&trace);
    std::fs::write(&trace_path, &trace_bytes).expect("the trace is written");
    let trace_len = trace_bytes.len();
    drop((trace, trace_bytes));
    let warm = workers == 8;
    let once = |f: &mut dyn FnMut()| {
        if warm {
            f();
        }
        let started = Instant::now();
        f();
        started.elapsed()
    };
    let replay = once(&mut || replay_json_file(&trace_path, &receipt_path));
    let receipt_len = std::fs::metadata(&receipt_path).map_or(0, |m| m.len());
    let (t, r) = (
        trace_path.display().to_string(),
        receipt_path.display().to_string(),
    );
    let verify = once(&mut || {
        black_box(verify_receipt_file(&t, &r));
    });
    let replay_peak = peak_memory_bytes(&["json", &t, &format!("{r}.child")]);
    let verify_peak = peak_memory_bytes(&["verify", &t, &r]);
    let _ = std::fs::remove_file(format!("{r}.child"));
    let ratio = verify.as_secs_f64() / replay.as_secs_f64();
    let mb = |b: Option<u64>| b.map_or("unknown".into(), |b| format!("{:.0} MB", b as f64 / 1e6));
    println!(
        "{name:<44}  {:>9.1}  {:>11.1}  {:>10.0}  {:>10.0}  {:>5.1}x  {:>11}  {:>11}  {}",
        trace_len as f64 / 1e6,
        receipt_len as f64 / 1e6,
        replay.as_secs_f64() * 1e3,
        verify.as_secs_f64() * 1e3,
        ratio,
        mb(replay_peak),
        mb(verify_peak),
        if warm { "1 after a warm-up" } else { "1" }
    );
    targets.push(TargetRow {
        figure: format!("verify / replay --format json, {workers} workers"),
        measured: format!("{ratio:.2}x"),
        target: format!("<= {TARGET_VERIFY_RATIO}x"),
        status: status(ratio <= TARGET_VERIFY_RATIO).into(),
    });
    targets.push(TargetRow {
        figure: format!("verify peak memory, {workers} workers"),
        measured: mb(verify_peak),
        target: format!("<= {} MB", target_peak / 1_000_000),
        status: verify_peak.map_or("unknown".into(), |b| status(b <= target_peak).into()),
    });
    let _ = std::fs::remove_file(&receipt_path);
    let _ = std::fs::remove_file(&trace_path);
}

/// The wide-fleet figure: what `kvroute replay TRACE` does (the table's metrics and both
/// digests, every row's dominance streamed into the receipt digest) on each wide
/// trace, from its bytes in memory.
fn wide_section(targets: &mut Vec<TargetRow>) {
    println!();
    println!(
        "## Wide fleets: replay of {} workers × {WIDE_REQUESTS} requests, one cache entry per \
         worker",
        grouped(WIDE_WORKERS as f64)
    );
    println!(
        "{:<58} {:>9} {:>10} {:>4}",
        "trace", "trace MB", "elapsed_s", "runs"
    );
    for shape in WideShape::ALL {
        let bytes = wide_trace_bytes(WIDE_WORKERS, WIDE_REQUESTS, shape);
        let (m, _) = measure(|| {
            let trace = parse_trace(black_box(&bytes)).expect("the wide trace validates");
            let digest = trace_digest(&trace);
            replay::stream_digest(&Compiled::new(&trace), &digest).0
        });
        let seconds = m.best.as_secs_f64();
        let figure = format!(
            "{} workers × {WIDE_REQUESTS} requests, replay ({})",
            grouped(WIDE_WORKERS as f64),
            shape.name()
        );
        println!(
            "{figure:<58} {:>9.1} {seconds:>10.3} {:>4}",
            bytes.len() as f64 / 1e6,
            m.runs
        );
        targets.push(TargetRow {
            figure,
            measured: format!("{seconds:.3} s"),
            target: format!("≤ {TARGET_WIDE_REPLAY_SECONDS} s"),
            status: status(seconds <= TARGET_WIDE_REPLAY_SECONDS).into(),
        });
    }
}

/// Decisions per second of a JSON Lines receipt on one fleet.
struct JsonlRow {
    workers: u32,
    rate: f64,
    runs: usize,
    window: Option<usize>,
}

fn jsonl_row(workers: u32, compiled: &Compiled, requests: u64, window: Option<usize>) -> JsonlRow {
    let (m, _) = measure(|| {
        let mut sink = std::io::sink();
        replay::write_jsonl(black_box(compiled), "sha256:bench", &mut sink)
            .expect("io::sink cannot fail")
            .runs
            .len()
    });
    JsonlRow {
        workers,
        rate: m.per_second(4 * requests),
        runs: m.runs,
        window,
    }
}

/// Peak memory of validating and replaying the two generated traces, each in a fresh
/// child process.
fn memory_section(targets: &mut Vec<TargetRow>) {
    println!();
    println!("## Peak memory (VmHWM of a fresh child process per workload)");
    let dir = std::env::temp_dir().join(format!("kvroute-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let scale_path = dir.join("scale.trace.json");
    let chain_path = dir.join("chain.trace.json");
    let out_path = dir.join("receipt.json");
    let scale = scale_trace_bytes(SCALE_TRACE_BYTES, SCALE_TRACE_WORKERS);
    std::fs::write(&scale_path, &scale).expect("the scale trace is written");
    let scale_len = scale.len();
    drop(scale);
    let chain = chain_trace_bytes(CHAIN_WORKERS);
    std::fs::write(&chain_path, &chain).expect("the chain trace is written");
    let chain_len = chain.len();
    drop(chain);
    let path = |p: &std::path::Path| p.display().to_string();
    let scale_name = format!(
        "scale trace ({:.1} MB, {SCALE_TRACE_WORKERS} workers)",
        scale_len as f64 / 1e6
    );
    let chain_name = format!(
        "chain trace (1 request x {CHAIN_WORKERS} workers, {:.1} MB)",
        chain_len as f64 / 1e6
    );
    let workloads: [(&str, &str, Vec<String>, Option<u64>); 5] = [
        (
            "validate",
            &scale_name,
            vec![path(&scale_path)],
            Some(TARGET_SCALE_VALIDATE_PEAK_BYTES),
        ),
        (
            "jsonl",
            &scale_name,
            vec![path(&scale_path)],
            Some(TARGET_SCALE_JSONL_PEAK_BYTES),
        ),
        ("validate", &chain_name, vec![path(&chain_path)], None),
        ("jsonl", &chain_name, vec![path(&chain_path)], None),
        (
            "json",
            &chain_name,
            vec![path(&chain_path), path(&out_path)],
            Some(TARGET_CHAIN_JSON_PEAK_BYTES),
        ),
    ];
    println!(
        "{:<10} {:<48} {:>12} {:>10}",
        "workload", "input", "peak_MB", "elapsed_s"
    );
    for (mode, name, files, target) in workloads {
        memory_workload(mode, name, &files, target, targets);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One peak-memory row: the child running `mode` on `files`, and its target if it has
/// one.
fn memory_workload(
    mode: &str,
    name: &str,
    files: &[String],
    target: Option<u64>,
    targets: &mut Vec<TargetRow>,
) {
    let mut args = vec![mode];
    args.extend(files.iter().map(String::as_str));
    let started = Instant::now();
    let peak = peak_memory_bytes(&args);
    let elapsed = started.elapsed().as_secs_f64();
    let shown = peak.map_or("unknown".to_owned(), |b| format!("{:.1}", b as f64 / 1e6));
    println!("{mode:<10} {name:<48} {shown:>12} {elapsed:>10.1}");
    if let Some(limit) = target {
        let label = match mode {
            "json" => "replay --format json --out",
            "validate" => "validate",
            _ => "replay --format jsonl",
        };
        targets.push(TargetRow {
            figure: format!("peak memory, {label}, {name}"),
            measured: format!("{shown} MB"),
            target: format!("<= {} MB", limit / 1_000_000),
            status: peak.map_or("unknown".into(), |b| status(b <= limit).into()),
        });
    }
}
