//! `peers-bench`: kvroute's index against Dynamo's on the same Mooncake-derived
//! streams, as throughput and as ratios measured in one run (part of `just bench`).
//!
//! For 8, 64 and 512 workers, the Mooncake conversation trace is imported and simulated
//! in-process (cache_plus_load, lag 10, no jitter: `kvroute simulate --events-out`'s
//! stream). Each stream is translated once, outside the timings, into what each side
//! consumes: kvroute's compiled events, Dynamo's `RouterEvent`s and block queries. Then
//! each side replays it from an empty index, best of `--repeats` runs:
//! - **kvroute index**: the epoch rule, cache index and reuse walk for every worker;
//! - **RadixTree** and **PositionalIndexer**: `apply_event` and
//!   `find_matches(early_exit = false)`;
//! - **kvroute decision**: a whole cache_plus_load run (every candidate row, cost and
//!   choice, no receipt).
//!
//! Dynamo's default selector is compiled only under its `bench` feature and was not
//! wired in (docs/peers.md); "Dynamo index" below is the index alone, a lower bound on
//! index plus selector, so a decision ratio ≥ 1 against it meets the target too.

use dynamo_kv_router::indexer::positional::{LevelIndex, SearchMode};
use dynamo_kv_router::protocols::{KvCacheEvent, LocalBlockHash, RouterEvent, WorkerWithDpRank};
use dynamo_kv_router::{PositionalIndexer, RadixTree, SyncIndexer};
use kvroute_core::input::mooncake::{import_mooncake, MooncakeOptions};
use kvroute_core::route::compiled::{Compiled, Step};
use kvroute_core::route::engine::Runner;
use kvroute_core::simulate::{generated_trace, simulate_policy, simulation_trace, SimulateOptions};
use kvroute_core::Policy;
use kvroute_peers::chains::ChainMap;
use kvroute_peers::dynamo::{dynamo_events, query_blocks};
use kvroute_peers::kvroute::KvrouteIndex;
use kvroute_peers::Peer;
use rustc_hash::FxHashMap;
use std::time::Instant;

enum Action {
    Event(RouterEvent),
    Query(Vec<LocalBlockHash>),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let mooncake = value("--mooncake")
        .or_else(|| std::env::var("KVROUTE_MOONCAKE").ok())
        .unwrap_or_else(|| "../shared/traces/mooncake-conversation.jsonl".into());
    let repeats: usize = value("--repeats").and_then(|r| r.parse().ok()).unwrap_or(3);
    let sizes: Vec<u32> = value("--workers")
        .map(|w| w.split(',').filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 64, 512]);
    let file = match std::fs::File::open(&mooncake) {
        Ok(f) => std::io::BufReader::new(f),
        Err(e) => {
            eprintln!("{mooncake}: cannot read the Mooncake trace: {e}");
            std::process::exit(2);
        }
    };
    let imported = match import_mooncake(file, &MooncakeOptions::default()) {
        Ok(t) => t,
        Err(errors) => {
            eprintln!("{mooncake}: {} import errors", errors.len());
            std::process::exit(2);
        }
    };
    println!("peers-bench: Mooncake conversation trace, cache_plus_load stream, best of {repeats}");
    println!(
        "{:>7} {:>8} {:>13} {:>13} {:>13} {:>13} {:>9} {:>9} {:>9}",
        "workers",
        "items",
        "kvroute_idx/s",
        "radix/s",
        "positional/s",
        "kv_decide/s",
        "idx/radix",
        "idx/pos",
        "dec/radix"
    );
    for workers in sizes {
        let (sim, _) = simulation_trace(&imported, Some(workers)).expect("a valid fleet size");
        let compiled = Compiled::new(&sim);
        let run = simulate_policy(
            &compiled,
            Policy::CachePlusLoad,
            &SimulateOptions::default(),
            true,
            &mut (),
        );
        let stream = generated_trace(&sim, &run);
        let compiled = Compiled::new(&stream);
        let chains = ChainMap::new(&compiled);
        let mut actions = Vec::new();
        let mut event_id = 0;
        let mut items = 0u64;
        for event in &compiled.events {
            match &event.step {
                Step::Cache { worker, op, .. } => {
                    items += 1;
                    for data in dynamo_events(&chains, op) {
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
                    actions.push(Action::Query(query_blocks(&chains, request, 512)));
                }
                Step::Load { .. } => {}
            }
        }
        let kvroute = best(repeats, || {
            let mut index = KvrouteIndex::new(&compiled);
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
        });
        let radix = best(repeats, || {
            let mut tree = RadixTree::new();
            let owned = clone_actions(&actions);
            let started = Instant::now();
            let mut checksum = 0u64;
            for action in owned {
                match action {
                    Action::Event(e) => {
                        let _ = tree.apply_event(e);
                    }
                    Action::Query(q) => {
                        let scores = tree.find_matches(q, false);
                        checksum =
                            checksum.wrapping_add(scores.scores.values().map(|&v| v as u64).sum());
                    }
                }
            }
            (started.elapsed().as_secs_f64(), checksum)
        });
        let positional = best(repeats, || {
            let indexer = PositionalIndexer::new_with_mode(8, SearchMode::Strided);
            let mut worker_blocks: FxHashMap<WorkerWithDpRank, LevelIndex> = FxHashMap::default();
            let owned = clone_actions(&actions);
            let started = Instant::now();
            let mut checksum = 0u64;
            for action in owned {
                match action {
                    Action::Event(e) => {
                        let _ = indexer.apply_event(&mut worker_blocks, e, None);
                    }
                    Action::Query(q) => {
                        let scores = indexer.find_matches(&q, false);
                        checksum =
                            checksum.wrapping_add(scores.scores.values().map(|&v| v as u64).sum());
                    }
                }
            }
            (started.elapsed().as_secs_f64(), checksum)
        });
        let decide = best(repeats, || {
            let mut runner = Runner::new(&compiled, Policy::CachePlusLoad);
            let started = Instant::now();
            let mut placed = 0u64;
            for event in &compiled.events {
                if runner.step(event, &mut ()).is_some() {
                    placed += 1;
                }
            }
            (started.elapsed().as_secs_f64(), placed)
        });
        let rate = |seconds: f64| items as f64 / seconds;
        println!(
            "{:>7} {:>8} {:>13.0} {:>13.0} {:>13.0} {:>13.0} {:>8.2}x {:>8.2}x {:>8.2}x",
            workers,
            items,
            rate(kvroute),
            rate(radix),
            rate(positional),
            rate(decide),
            radix / kvroute,
            positional / kvroute,
            radix / decide,
        );
    }
    println!("targets: idx/radix >= 3x at every size; dec/radix (kvroute decision vs Dynamo index alone) >= 1x");
}

fn clone_actions(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .map(|a| match a {
            Action::Event(e) => Action::Event(e.clone()),
            Action::Query(q) => Action::Query(q.clone()),
        })
        .collect()
}

/// The shortest of `repeats` timed runs, in seconds; the runs' checksums must agree.
fn best(repeats: usize, mut run: impl FnMut() -> (f64, u64)) -> f64 {
    let mut shortest = f64::INFINITY;
    let mut first_checksum = None;
    for _ in 0..repeats.max(1) {
        let (seconds, checksum) = run();
        assert_eq!(*first_checksum.get_or_insert(checksum), checksum);
        shortest = shortest.min(seconds);
    }
    shortest
}
