//! The engine-model differential (SPEC.md §11): core's closed loop against the oracle's
//! independent one on the lab trace, on the head of the real Mooncake trace with
//! evictions and jitter, and on generated traces under generated engine settings.

use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::simulate::{Capacity, SimulateOptions};
use kvroute_harness::closed_loop::mooncake_head;
use kvroute_harness::engine_model::{
    assert_simulations_agree, check_closed_loop_seed, settings_for_seed, SimSettings,
};
use kvroute_harness::generators::TraceRecipe;
use serde_json::Value;

fn settings(
    capacity: Capacity,
    lag: u64,
    jitter: u64,
    seed: u64,
    workers: Option<u32>,
) -> SimSettings {
    SimSettings {
        workers,
        ticks_per_ms: 1,
        worker_names: kvroute_core::simulate::WorkerNames::W,
        options: SimulateOptions {
            capacity,
            publication_lag_ticks: lag,
            jitter_ticks: jitter,
            jitter_seed: seed,
            loss_per_mille: 0,
        },
    }
}

/// A figure of one policy's row in a `kvroute-simulate/1` document.
fn figure(document: &[u8], policy: &str, name: &str) -> u64 {
    let value: Value = serde_json::from_slice(document).expect("the document is JSON");
    value["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["policy"] == policy)
        .and_then(|r| r[name].as_u64())
        .unwrap_or_else(|| panic!("no {name} for {policy}"))
}

#[test]
fn the_lab_trace_agrees_under_default_and_tight_engines() {
    let lab = kvroute_core::LAB_TRACE_JSON.as_bytes();
    for s in [
        SimSettings {
            workers: None,
            options: SimulateOptions::default(),
            ticks_per_ms: 1,
            worker_names: kvroute_core::simulate::WorkerNames::W,
        },
        settings(Capacity::Blocks(3), 2, 7, 5, None),
        settings(Capacity::Tokens(700), 0, 0, 0, Some(3)),
    ] {
        assert_simulations_agree("engine-model-lab", lab, &s);
    }
}

/// 2,000 Mooncake requests on 8 workers whose caches hold 16 blocks each, with events
/// delivered 30 ticks plus up to 40 ticks late: evictions, stale epochs and phantom
/// reuse all occur, and the test says so, so it cannot pass vacuously.
#[test]
fn mooncake_with_evictions_and_jitter_agrees() {
    let trace = canonical_trace_bytes(&mooncake_head(2_000, 8));
    let s = settings(Capacity::Blocks(16), 30, 40, 1, None);
    let document = assert_simulations_agree("engine-model-mooncake", &trace, &s);
    let policy = "cache_plus_load";
    assert!(
        figure(&document, policy, "evicts") > 100,
        "evictions happen"
    );
    assert!(
        figure(&document, policy, "stale") > 10,
        "jitter makes stale events"
    );
    assert!(
        figure(&document, policy, "phantom") > 0,
        "the router believes evicted blocks"
    );
    assert_eq!(figure(&document, policy, "routed"), 2_000);
}

#[test]
fn generated_traces_agree_under_generated_engines() {
    for seed in 0..150u64 {
        if let Err(divergence) = check_closed_loop_seed(seed) {
            let trace = TraceRecipe::from_seed(seed).build_bytes();
            assert_simulations_agree(
                &format!("engine-model-seed-{seed}"),
                &trace,
                &settings_for_seed(seed),
            );
            panic!("seed {seed}: {divergence}");
        }
    }
}

/// SPEC.md §14.4: both engine models write the same completion records, on the lab
/// trace (a rejected request, several tenants) and 2,000 Mooncake requests with
/// evictions and jitter, at 1, 7 and 1,000 ticks a ms. Every comparison of the two
/// engine models compares them (`compare_simulate`), so the generated seeds of
/// `generated_traces_agree_under_generated_engines` and `swarm --closed-loop` do too.
#[test]
fn the_completion_records_agree() {
    let lab = kvroute_core::LAB_TRACE_JSON.as_bytes();
    let mooncake = canonical_trace_bytes(&mooncake_head(2_000, 8));
    let cases = [
        (lab, settings(Capacity::Blocks(3), 2, 7, 5, None)),
        (
            &mooncake[..],
            settings(Capacity::Blocks(16), 30, 40, 1, None),
        ),
    ];
    for (trace, s) in cases {
        for ticks_per_ms in [1, 7, 1000] {
            let s = SimSettings {
                ticks_per_ms,
                worker_names: kvroute_core::simulate::WorkerNames::W,
                ..s.clone()
            };
            assert_simulations_agree("engine-model-completions", trace, &s);
        }
    }
}
