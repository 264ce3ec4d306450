//! The closed-loop engine model (SPEC.md §11) and replay at scale.
//!
//! - Open-loop reproduction: the trace a policy's loop generated, written out and read
//!   back through validation, replays to exactly that policy's run: every decision and
//!   candidate row, the cache log and the metrics.
//! - Scale differential: core and the oracle agree byte for byte on a few thousand real
//!   Mooncake requests with the cache events a loop generated.

use kvroute_core::canonical::{canonical_trace_bytes, jcs_bytes};
use kvroute_core::compiled::Compiled;
use kvroute_core::engine;
use kvroute_core::receipt::metrics_value;
use kvroute_core::simulate::{
    generated_trace, simulate_policy, simulation_trace, Capacity, SimulateOptions,
};
use kvroute_core::{parse_trace, Policy};
use kvroute_harness::closed_loop::{check_reproduction, mooncake_head as mooncake};
use kvroute_harness::differential::assert_agree;
use kvroute_harness::generators::TraceRecipe;
use serde_json::{json, Value};

#[test]
fn mooncake_loops_replay_open_loop_to_the_same_runs_with_evictions_and_stale_events() {
    let trace = mooncake(1_500, 4);
    let (sim, dropped) = simulation_trace(&trace, None).unwrap();
    assert_eq!(dropped, 0);
    // A small cache forces evictions; jitter larger than the lag reorders events.
    let options = SimulateOptions {
        capacity: Capacity::Blocks(96),
        publication_lag_ticks: 3,
        jitter_ticks: 40,
        jitter_seed: 7,
    };
    let runs = check_reproduction(&sim, &options, "mooncake 1500");
    for run in &runs {
        let name = run.policy.name();
        assert!(run.stats.evict_events > 0, "{name}: no evictions");
        assert!(
            run.metrics.stale_event_rejections > 0,
            "{name}: no stale events"
        );
        assert!(run.metrics.cache_hits > 0, "{name}: no hits");
    }
    // The router acted on evidence the engine had already dropped at least once.
    assert!(runs.iter().any(|r| r.stats.phantom_reuse_tokens > 0));
}

#[test]
fn lab_and_generated_loops_replay_open_loop_to_the_same_runs() {
    // Multi-tenant, adapters, grants, freshness and caps: the lab trace's requests and
    // workers, and generated traces, each with the loop's own events.
    let lab = parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes()).unwrap();
    let mut traces = vec![("lab".to_owned(), lab)];
    for seed in 0..40 {
        let bytes = TraceRecipe::from_seed(seed).build_bytes();
        traces.push((format!("seed {seed}"), parse_trace(&bytes).unwrap()));
    }
    for (what, trace) in &traces {
        let (sim, _) = simulation_trace(trace, None).unwrap();
        for options in [
            SimulateOptions::default(),
            SimulateOptions {
                capacity: Capacity::Tokens(1_024),
                publication_lag_ticks: 0,
                jitter_ticks: 5,
                jitter_seed: 1,
            },
        ] {
            check_reproduction(&sim, &options, what);
        }
    }
}

#[test]
fn replacing_the_workers_copies_the_first_and_pads_ids() {
    let trace = mooncake(10, 3);
    let (sim, _) = simulation_trace(&trace, Some(12)).unwrap();
    let ids: Vec<&str> = sim.workers.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(ids.first(), Some(&"w00"));
    assert_eq!(ids.last(), Some(&"w11"));
    assert!(sim
        .workers
        .iter()
        .all(|w| w.prefill_rate == trace.workers[0].prefill_rate));
    assert!(simulation_trace(&trace, Some(0)).is_err());
}

#[test]
fn core_and_oracle_agree_on_thousands_of_mooncake_requests() {
    let trace = mooncake(2_000, 8);
    let (sim, _) = simulation_trace(&trace, None).unwrap();
    let options = SimulateOptions {
        capacity: Capacity::Blocks(128),
        jitter_ticks: 20,
        ..SimulateOptions::default()
    };
    let compiled = Compiled::new(&sim);
    let run = simulate_policy(&compiled, Policy::CachePlusLoad, &options, true, &mut ());
    let bytes = canonical_trace_bytes(&generated_trace(&sim, &run));
    assert!(run.stats.evict_events > 0 && run.metrics.stale_event_rejections > 0);
    assert_agree(
        "mooncake-2000",
        &bytes,
        "cargo test -p kvroute-harness --test closed_loop",
    );
    // Runs that keep no receipt (no candidate row materialised) give the same metrics
    // as the oracle's full runs.
    let trace = parse_trace(&bytes).unwrap();
    let compiled = Compiled::new(&trace);
    let core_metrics: Vec<Value> = Policy::ALL
        .iter()
        .map(|&p| json!({ "policy": p.name(), "metrics": metrics_value(&engine::run_metrics(&compiled, p)) }))
        .collect();
    let oracle_metrics =
        kvroute_oracle::replay_metrics(&kvroute_oracle::validated(&bytes).unwrap()).unwrap();
    assert_eq!(jcs_bytes(&Value::Array(core_metrics)), oracle_metrics);
}
