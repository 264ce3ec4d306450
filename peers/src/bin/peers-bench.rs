//! `peers-bench`: kvroute's index against Dynamo's on the same Mooncake-derived
//! streams, as throughput and as ratios measured in one run (part of `just bench`).
//!
//! For 8, 64 and 512 workers, the Mooncake conversation trace is imported and simulated
//! in-process (cache_plus_load, lag 10, no jitter: `kvroute simulate --events-out`'s
//! stream). Each stream is translated once, outside the timings, into what each side
//! consumes: kvroute's compiled events, Dynamo's `RouterEvent`s and block queries. Then
//! each side replays it from an empty index, best of `--repeats` runs (the sides take
//! turns, one run each per round):
//! - **kvroute index**: the epoch rule, cache index and reuse walk for every worker;
//! - **RadixTree** and **PositionalIndexer**: `apply_event` and
//!   `find_matches(early_exit = false)`;
//! - **kvroute decision**: a whole cache_plus_load run (every candidate row, cost and
//!   choice, no receipt);
//! - **Dynamo index + selector**: `RadixTree` as above, and for every request its
//!   `find_matches` scores put to Dynamo's `DefaultWorkerSelector` (temperature 0,
//!   default configuration, 512-token blocks, compiled under the crate's `bench`
//!   feature) over every worker with its load: the stream's load observations as
//!   `WorkerLoadProjection`s, and each request's prompt added to its chosen worker's
//!   prefill backlog, as kvroute places it. One `SchedulingRequest` is kept and updated
//!   in place, as the cheapest way to drive Dynamo's selector.

use dynamo_kv_router::indexer::positional::{LevelIndex, SearchMode};
use dynamo_kv_router::protocols::WorkerId;
use dynamo_kv_router::protocols::{
    KvCacheEvent, LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
};
use dynamo_kv_router::{
    DefaultWorkerSelector, PositionalIndexer, RadixTree, SchedulingRequest, SyncIndexer,
    WorkerSelectionInput, WorkerSelector,
};
use kvroute_core::import::{import_mooncake, MooncakeOptions};
use kvroute_core::route::Runner;
use kvroute_core::route::{Compiled, Step};
use kvroute_core::simulate::{generated_trace, simulate_policy, simulation_trace, SimulateOptions};
use kvroute_core::Policy;
use kvroute_peers::chains::ChainMap;
use kvroute_peers::dynamo::{dynamo_events, query_blocks};
use kvroute_peers::kvroute::KvrouteIndex;
use kvroute_peers::selector::{
    dynamo_worker, load_projection, scheduling_request, selector_config, FleetWorker, WORKER_TYPE,
};
use kvroute_peers::Peer;
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::time::Instant;

/// The Mooncake import's block size: Dynamo's query blocks and its selector's.
const BLOCK_TOKENS: u64 = 512;

#[derive(Clone)]
enum Action {
    Event(RouterEvent),
    /// A load observation: only the selector reads it.
    Load {
        worker: u32,
        queued_prefill: u64,
        active_decode: u64,
    },
    Query {
        blocks: Vec<LocalBlockHash>,
        prompt_tokens: u64,
    },
}

/// The command line: the Mooncake file, the runs per figure, and the fleet sizes of the
/// in-process and the protocol tables.
struct BenchArgs {
    mooncake: String,
    repeats: usize,
    sizes: Vec<u32>,
    protocol_sizes: Vec<u32>,
}

fn main() {
    let args = bench_args();
    let imported = imported_mooncake(&args.mooncake);
    let repeats = args.repeats;
    println!("peers-bench: Mooncake conversation trace, cache_plus_load stream, best of {repeats}");
    println!(
        "{:>7} {:>8} {:>13} {:>13} {:>13} {:>13} {:>13} {:>9} {:>9} {:>9} {:>9}",
        "workers",
        "items",
        "kvroute_idx/s",
        "radix/s",
        "positional/s",
        "kv_decide/s",
        "radix+sel/s",
        "idx/radix",
        "idx/pos",
        "dec/radix",
        "dec/r+sel"
    );
    let mut whole_decision_ratios: Vec<(u32, f64)> = Vec::new();
    for &workers in &args.sizes {
        let ratio = index_row(&imported, workers, repeats);
        whole_decision_ratios.push((workers, ratio));
    }
    protocol_table(&imported, &args.protocol_sizes, repeats.min(3));
    print_decision_target(&whole_decision_ratios);
}

/// The command line's flags, each with its default.
fn bench_args() -> BenchArgs {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let mooncake = value("--mooncake")
        .or_else(|| std::env::var("KVROUTE_MOONCAKE").ok())
        .unwrap_or_else(|| "../shared/traces/mooncake-conversation.jsonl".into());
    let repeats: usize = value("--repeats")
        .and_then(|r| r.parse().ok())
        .unwrap_or(10);
    let sizes: Vec<u32> = value("--workers")
        .map(|w| w.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 64, 512]);
    let protocol_sizes: Vec<u32> = value("--protocol-workers")
        .map(|w| w.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 64]);
    BenchArgs {
        mooncake,
        repeats,
        sizes,
        protocol_sizes,
    }
}

/// The Mooncake file imported with the default options; exits with status 2 if it
/// cannot be read or imported.
fn imported_mooncake(mooncake: &str) -> kvroute_core::Trace {
    let file = match std::fs::File::open(mooncake) {
        Ok(f) => std::io::BufReader::new(f),
        Err(e) => {
            eprintln!("{mooncake}: cannot read the Mooncake trace: {e}");
            std::process::exit(2);
        }
    };
    match import_mooncake(file, &MooncakeOptions::default()) {
        Ok(t) => t,
        Err(errors) => {
            eprintln!("{mooncake}: {} import errors", errors.len());
            std::process::exit(2);
        }
    }
}

/// One row of the in-process table: every side's replay of the fleet's stream, timed;
/// returns kvroute's whole decision against Dynamo's RadixTree + selector, as a ratio.
fn index_row(imported: &kvroute_core::Trace, workers: u32, repeats: usize) -> f64 {
    let stream = simulated_stream(imported, workers);
    let compiled = Compiled::new(&stream);
    let chains = ChainMap::new(&compiled);
    let (actions, items) = dynamo_actions(&compiled, &chains);
    let [kvroute, radix, positional, radix_selector, decide] = best_interleaved(
        repeats,
        [
            Box::new(|| kvroute_index_run(&compiled)),
            Box::new(|| radix_run(&actions)),
            Box::new(|| positional_run(&actions)),
            Box::new(|| radix_selector_run(&compiled, &actions)),
            Box::new(|| decide_run(&compiled)),
        ],
    );
    let rate = |seconds: f64| items as f64 / seconds;
    println!(
        "{:>7} {:>8} {:>13.0} {:>13.0} {:>13.0} {:>13.0} {:>13.0} {:>8.2}x {:>8.2}x {:>8.2}x {:>8.2}x",
        workers,
        items,
        rate(kvroute),
        rate(radix),
        rate(positional),
        rate(decide),
        rate(radix_selector),
        radix / kvroute,
        positional / kvroute,
        radix / decide,
        radix_selector / decide,
    );
    radix_selector / decide
}

/// The compiled stream as what Dynamo's side consumes, and the stream's items (cache
/// events and requests) that every rate is counted in.
fn dynamo_actions(compiled: &Compiled, chains: &ChainMap) -> (Vec<Action>, u64) {
    let mut actions = Vec::new();
    let mut event_id = 0;
    let mut items = 0u64;
    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, op, .. } => {
                items += 1;
                for data in dynamo_events(chains, op) {
                    actions.push(Action::Event(RouterEvent::new(
                        *worker as u64,
                        KvCacheEvent {
                            event_id,
                            data,
                            dp_rank: 0,
                        },
                    )));
                    event_id += 1;
                }
            }
            Step::Request(request) => {
                items += 1;
                actions.push(Action::Query {
                    blocks: query_blocks(chains, request, BLOCK_TOKENS),
                    prompt_tokens: request.prompt_tokens,
                });
            }
            Step::Load {
                worker,
                queued_prefill,
                active_decode,
                ..
            } => actions.push(Action::Load {
                worker: *worker,
                queued_prefill: *queued_prefill,
                active_decode: *active_decode,
            }),
        }
    }
    (actions, items)
}

/// kvroute's index side: seconds, and the reused tokens summed as its checksum.
fn kvroute_index_run(compiled: &Compiled) -> (f64, u64) {
    let mut index = KvrouteIndex::new(compiled);
    let mut reuse = Vec::new();
    let started = Instant::now();
    let mut checksum = 0u64;
    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                index.apply_cache_event(*worker, event.tick, *epoch, op);
            }
            Step::Request(request) => {
                index.reuse_tokens(request, &mut reuse);
                checksum = checksum.wrapping_add(reuse.iter().map(|&(_, t)| t).sum());
            }
            Step::Load { .. } => {}
        }
    }
    (started.elapsed().as_secs_f64(), checksum)
}

/// Dynamo's RadixTree side: seconds, and the match scores summed as its checksum.
fn radix_run(actions: &[Action]) -> (f64, u64) {
    let mut tree = RadixTree::new();
    let owned = actions.to_vec();
    let started = Instant::now();
    let mut checksum = 0u64;
    for action in owned {
        match action {
            Action::Event(e) => {
                let _ = tree.apply_event(e);
            }
            Action::Load { .. } => {}
            Action::Query { blocks, .. } => {
                let scores = tree.find_matches(blocks, false);
                checksum = checksum.wrapping_add(scores.scores.values().map(|&v| v as u64).sum());
            }
        }
    }
    (started.elapsed().as_secs_f64(), checksum)
}

/// Dynamo's PositionalIndexer side: seconds, and the match scores summed as its
/// checksum.
fn positional_run(actions: &[Action]) -> (f64, u64) {
    let indexer = PositionalIndexer::new_with_mode(8, SearchMode::Strided);
    let mut worker_blocks: FxHashMap<WorkerWithDpRank, LevelIndex> = FxHashMap::default();
    let owned = actions.to_vec();
    let started = Instant::now();
    let mut checksum = 0u64;
    for action in owned {
        match action {
            Action::Event(e) => {
                let _ = indexer.apply_event(&mut worker_blocks, e, None);
            }
            Action::Load { .. } => {}
            Action::Query { blocks, .. } => {
                let scores = indexer.find_matches(&blocks, false);
                checksum = checksum.wrapping_add(scores.scores.values().map(|&v| v as u64).sum());
            }
        }
    }
    (started.elapsed().as_secs_f64(), checksum)
}

/// Dynamo's RadixTree + DefaultWorkerSelector side: seconds, and the decisions made as
/// its checksum (Dynamo breaks ties at random, so the checksum counts decisions, not
/// picks).
fn radix_selector_run(compiled: &Compiled, actions: &[Action]) -> (f64, u64) {
    let mut tree = RadixTree::new();
    let selector = DefaultWorkerSelector::new(Some(selector_config()), WORKER_TYPE);
    let fleet: HashMap<WorkerId, FleetWorker> = (0..compiled.worker_count() as u32)
        .map(|w| (w as WorkerId, FleetWorker::default()))
        .collect();
    let mut request = scheduling_request(0);
    for (w, worker) in compiled.workers.iter().enumerate() {
        request.worker_loads.insert(
            dynamo_worker(w as u32),
            load_projection(worker.queued_prefill, worker.active_decode, BLOCK_TOKENS),
        );
    }
    let owned = actions.to_vec();
    let started = Instant::now();
    let mut decisions = 0u64;
    for action in owned {
        match action {
            Action::Event(e) => {
                let _ = tree.apply_event(e);
            }
            Action::Load {
                worker,
                queued_prefill,
                active_decode,
            } => {
                request.worker_loads.insert(
                    dynamo_worker(worker),
                    load_projection(queued_prefill, active_decode, BLOCK_TOKENS),
                );
            }
            Action::Query {
                blocks,
                prompt_tokens,
            } => {
                let scores = tree.find_matches(blocks, false);
                select_and_place(&selector, &fleet, &mut request, &scores, prompt_tokens);
                decisions += 1;
            }
        }
    }
    (started.elapsed().as_secs_f64(), decisions)
}

/// One request through Dynamo's selector: its overlap scores and prompt set on the one
/// kept `request`, and the prompt added to the chosen worker's prefill backlog.
fn select_and_place(
    selector: &DefaultWorkerSelector,
    fleet: &HashMap<WorkerId, FleetWorker>,
    request: &mut SchedulingRequest,
    scores: &OverlapScores,
    prompt_tokens: u64,
) {
    let overlap = &mut request.overlap.effective_overlap_blocks;
    overlap.clear();
    overlap.extend(scores.scores.iter().map(|(&w, &b)| (w, b as f64)));
    request.isl_tokens = prompt_tokens as usize;
    let chosen = selector
        .select_worker(WorkerSelectionInput::configured(
            fleet,
            &*request,
            request.eligibility(),
            BLOCK_TOKENS as u32,
        ))
        .expect("a fleet of idle-or-busy workers always yields a pick")
        .worker;
    request
        .worker_loads
        .entry(chosen)
        .or_default()
        .active_prefill_tokens += prompt_tokens as usize;
}

/// kvroute's whole decision: a cache_plus_load run without a receipt; seconds, and the
/// requests placed as its checksum.
fn decide_run(compiled: &Compiled) -> (f64, u64) {
    let mut runner = Runner::new(compiled, Policy::CachePlusLoad);
    let started = Instant::now();
    let mut placed = 0u64;
    for event in &compiled.events {
        if runner.step(event, &mut ()).is_some() {
            placed += 1;
        }
    }
    (started.elapsed().as_secs_f64(), placed)
}

/// The targets line, and whether the whole-decision target holds at every size.
fn print_decision_target(whole_decision_ratios: &[(u32, f64)]) {
    println!(
        "targets: idx/radix >= 3x at every size; dec/r+sel (kvroute's whole decision vs \
         Dynamo's RadixTree + DefaultWorkerSelector) >= 3x at every size; \
         dec/radix is against the index alone"
    );
    // The target holds only if it holds at every size, so the lowest whole-decision
    // ratio decides it.
    if let Some(&(workers, lowest)) = whole_decision_ratios
        .iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
    {
        let status = if lowest >= 3.0 { "met" } else { "NOT met" };
        println!(
            "dec/r+sel >= 3x at every size: {status} (lowest {lowest:.2}x, at {workers} workers)"
        );
    }
}

/// The events `cache_plus_load`'s closed loop publishes on `workers` workers, with the
/// requests: the stream both tables replay.
fn simulated_stream(imported: &kvroute_core::Trace, workers: u32) -> kvroute_core::Trace {
    let (sim, _) = simulation_trace(imported, Some(workers)).expect("a valid fleet size");
    let run = simulate_policy(
        &Compiled::new(&sim),
        Policy::CachePlusLoad,
        &SimulateOptions::default(),
        true,
        &mut (),
    );
    generated_trace(&sim, &run)
}

/// The comparison through the peer protocol against the same comparison in-process, on
/// the same canonical stream: `kvroute peer run STREAM --block-tokens 512 --
/// kvroute-peer-dynamo` (kvroute's answers, the classification, and RadixTree in a child
/// process fed one JSON line per event) against `kvroute-peers dynamo STREAM` (kvroute's
/// answers, the classification, RadixTree and PositionalIndexer in-process). Best of
/// `repeats`; the tallies of both must agree for RadixTree, or the figures mean nothing.
fn protocol_table(imported: &kvroute_core::Trace, sizes: &[u32], repeats: usize) {
    use kvroute_peer_core::run::{run_peer, RunOptions};
    use kvroute_peers::compare::{compare, Options};
    let adapter = std::env::current_exe()
        .expect("the bench knows where it is")
        .with_file_name("kvroute-peer-dynamo");
    if !adapter.exists() {
        println!(
            "(no {}: build it to measure the protocol)",
            adapter.display()
        );
        return;
    }
    println!("through the protocol (kvroute-peer-dynamo, RadixTree) vs in-process (kvroute-peers dynamo), best of {repeats}");
    println!(
        "{:>7} {:>8} {:>8} {:>12} {:>12} {:>12} {:>12} {:>9}",
        "workers",
        "events",
        "requests",
        "inproc_ev/s",
        "proto_ev/s",
        "inproc_req/s",
        "proto_req/s",
        "proto/in"
    );
    for &workers in sizes {
        let stream = simulated_stream(imported, workers);
        // As `simulate --events-out` writes it, and as the protocol sends it.
        let stream =
            kvroute_core::parse_trace(&kvroute_core::output::canonical_trace_bytes(&stream))
                .expect("a generated stream is valid");
        let options = Options {
            block_tokens: BLOCK_TOKENS,
            ..Options::default()
        };
        let run_options = RunOptions {
            compare: options,
            timeout: std::time::Duration::from_secs(60),
            expect_version: None,
            policy: Policy::CachePlusLoad,
        };
        let command = [adapter.clone().into_os_string()];
        let (mut in_process, mut protocol) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            let report = compare(&stream, options);
            in_process = in_process.min(started.elapsed().as_secs_f64());
            let started = Instant::now();
            let peer = run_peer(&stream, &command, &run_options).expect("the adapter runs");
            protocol = protocol.min(started.elapsed().as_secs_f64());
            let (a, b) = (&peer.report.tallies[0], report.tally("radix_tree"));
            assert_eq!(
                (a.rows_compared, a.rows_differing, a.by_cause),
                (b.rows_compared, b.rows_differing, b.by_cause)
            );
        }
        let events = stream.events.len() as f64;
        let requests = stream.request_count() as f64;
        println!(
            "{:>7} {:>8} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>8.2}x",
            workers,
            events,
            requests,
            events / in_process,
            events / protocol,
            requests / in_process,
            requests / protocol,
            protocol / in_process
        );
    }
}

/// Each side's shortest of `repeats` timed runs, in seconds; a side's runs must agree
/// on their checksum. The sides take turns, one run each per round, so a burst of load
/// on a shared machine is as likely to fall on either side of a ratio, instead of on
/// the whole series of one side.
fn best_interleaved<const N: usize>(
    repeats: usize,
    mut sides: [Box<dyn FnMut() -> (f64, u64) + '_>; N],
) -> [f64; N] {
    let mut shortest = [f64::INFINITY; N];
    let mut checksums = [None; N];
    for _ in 0..repeats.max(1) {
        for (side, run) in sides.iter_mut().enumerate() {
            let (seconds, checksum) = run();
            assert_eq!(*checksums[side].get_or_insert(checksum), checksum);
            shortest[side] = shortest[side].min(seconds);
        }
    }
    shortest
}
