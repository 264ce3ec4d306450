//! The seed sweep as an ordinary test: a fixed range of seeds through core and the
//! oracle, so `cargo test` always runs the differential check on the same cases (the
//! proptest properties explore new ones each run). `just soak` runs far more.

use kvroute_harness::sweep::{self, SweepConfig};

/// Enough seeds to kill every planted mutant, few enough for a debug `cargo test`.
const SEEDS: u64 = 400;

#[test]
fn the_first_seeds_agree_with_the_oracle() {
    let config = SweepConfig {
        start: 0,
        seeds: SEEDS,
        jobs: 2,
        shard: None,
    };
    let report = sweep::run(&config, || {});
    assert_eq!(report.seeds_run, SEEDS);
    if let Some(first) = report.failures.first() {
        panic!(
            "{} of {SEEDS} seeds diverge; first, seed {}: {}\n  reproduce: cargo run --release -- swarm --seeds 1 --start {}\n  shrunk trace: {:?}",
            report.failures.len(),
            first.seed,
            first.divergence,
            first.seed,
            first.shrunk_trace
        );
    }
}

#[test]
fn a_seed_always_builds_the_same_trace() {
    for seed in [0, 1, 99, u64::MAX] {
        assert_eq!(sweep::trace_for_seed(seed), sweep::trace_for_seed(seed));
    }
    assert_ne!(sweep::trace_for_seed(1), sweep::trace_for_seed(2));
}

#[test]
fn shards_partition_the_seeds() {
    let all = SweepConfig {
        start: 10,
        seeds: 23,
        jobs: 1,
        shard: None,
    }
    .seed_list();
    let mut union: Vec<u64> = (1..=4)
        .flat_map(|k| {
            SweepConfig {
                start: 10,
                seeds: 23,
                jobs: 1,
                shard: Some((k, 4)),
            }
            .seed_list()
        })
        .collect();
    union.sort();
    assert_eq!(union, all);
}
