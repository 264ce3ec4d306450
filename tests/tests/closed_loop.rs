//! The closed-loop engine model (SPEC.md §11) and replay at scale.
//!
//! - Open-loop reproduction: the trace a policy's loop generated, written out and read
//!   back through validation, replays to exactly that policy's run: every decision and
//!   candidate row, the cache log and the metrics.
//! - Scale differential: core and the oracle agree byte for byte on a few thousand real
//!   Mooncake requests with the cache events a loop generated.

use kvroute_core::output::metrics_value;
use kvroute_core::output::{canonical_trace_bytes, jcs_bytes};
use kvroute_core::route;
use kvroute_core::route::Compiled;
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
        loss_per_mille: 0,
    };
    let runs: Vec<_> = check_reproduction(&sim, &options, "mooncake 1500")
        .into_iter()
        .map(|r| r.run)
        .collect();
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
                loss_per_mille: 0,
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
    let ids: Vec<&str> = sim.workers.iter().map(|w| &*w.id).collect();
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
    let core_metrics: Vec<Value> = Policy::runs_for(&trace.policy)
        .iter()
        .map(|&p| json!({ "policy": p.name(), "metrics": metrics_value(&route::run_metrics(&compiled, p)) }))
        .collect();
    let oracle_metrics =
        kvroute_oracle::replay_metrics(&kvroute_oracle::validated(&bytes).unwrap()).unwrap();
    assert_eq!(jcs_bytes(&Value::Array(core_metrics)), oracle_metrics);
}

/// Two workers (16 prefill tokens per tick), lag 10. r1 (acme, block a) and r2 (another
/// tenant, block a) arrive at tick 0 and go to different workers; each prefill of 512
/// tokens completes at tick 32, at the same tick, so both stores are published at 42
/// (seqs 4 and 5, epochs 1). r3 (acme, a) arrives at 50, after the store reached the
/// router, and hits w0; the engine holds a too, so r3 recomputes nothing and its
/// completion publishes nothing.
#[test]
fn a_hand_checked_loop_publishes_exactly_the_specd_events() {
    let request = |seq: u64, tick: u64, tenant: &str| {
        json!({ "seq": seq, "tick": tick, "type": "request", "id": format!("r{seq}"),
                "tenant": tenant, "model": "m", "adapter": "base",
                "prefix": [ { "key": "a", "tokens": 512 } ],
                "prompt_tokens": 512, "decode_tokens": 1 })
    };
    let worker = |id: &str| {
        json!({ "id": id, "model": "m", "adapters": [], "prefill_rate": 16, "decode_rate": 4,
                "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0,
                "cache": [] })
    };
    let trace = json!({
        "format": "kvroute-trace/1", "limits": "scale",
        "workers": [worker("w0"), worker("w1")],
        "events": [request(1, 0, "acme"), request(2, 0, "other"), request(3, 50, "acme")],
    });
    let trace = parse_trace(trace.to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let options = SimulateOptions::default();
    assert_eq!(options.publication_lag_ticks, 10);
    for policy in [Policy::RoundRobin, Policy::CachePlusLoad] {
        let run = simulate_policy(&compiled, policy, &options, true, &mut ());
        let generated: Vec<Value> = run
            .generated
            .iter()
            .map(|e| {
                let canonical = canonical_trace_bytes(&kvroute_core::Trace {
                    events: vec![e.clone()],
                    ..trace.clone()
                });
                serde_json::from_slice::<Value>(&canonical).unwrap()["events"][0].clone()
            })
            .collect();
        let store = |seq: u64, worker: &str, tenant: &str| {
            json!({ "seq": seq, "tick": 42, "type": "cache", "op": "store", "worker": worker,
                    "epoch": 1, "tenant": tenant, "model": "m", "adapter": "base",
                    "segments": [ { "key": "a", "tokens": 512 } ] })
        };
        assert_eq!(
            generated,
            [store(4, "w0", "acme"), store(5, "w1", "other")],
            "{}",
            policy.name()
        );
        assert_eq!((run.stats.store_events, run.stats.evict_events), (2, 0));
        assert_eq!(run.metrics.cache_hits, 1, "{}: r3 hits", policy.name());
        assert_eq!(run.metrics.reused_tokens, 512);
        assert_eq!(run.stats.phantom_reuse_tokens, 0);
    }
    // With a lag of 60 the store reaches the router only at tick 92: r3 routes cold,
    // although the engine it lands on holds its block.
    let late = SimulateOptions {
        publication_lag_ticks: 60,
        ..SimulateOptions::default()
    };
    let run = simulate_policy(&compiled, Policy::CachePlusLoad, &late, false, &mut ());
    assert_eq!((run.metrics.cache_hits, run.stats.store_events), (0, 2));
}

/// SPEC.md §14.4: the completion records a loop writes join its generated trace's
/// receipt exactly: every routed decision matched, nothing dropped or unrouted, every
/// record completed. On 1,500 Mooncake requests with evictions and stale events, the
/// lab trace (with a rejected request) and generated traces, at 1 and 1,000 ticks a ms.
#[test]
fn completion_records_of_a_loop_join_its_receipt_without_a_gap() {
    use kvroute_core::join::{join, JoinOptions};
    use kvroute_core::simulate::completion_lines;
    use kvroute_core::simulate::simulate_policy_with_completions;
    let options = SimulateOptions {
        capacity: Capacity::Blocks(96),
        publication_lag_ticks: 3,
        jitter_ticks: 40,
        jitter_seed: 7,
        loss_per_mille: 0,
    };
    let mut traces = vec![
        ("mooncake 1500".to_owned(), mooncake(1_500, 4)),
        (
            "lab".to_owned(),
            parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes()).unwrap(),
        ),
    ];
    for seed in 0..10 {
        let bytes = TraceRecipe::from_seed(seed).build_bytes();
        traces.push((format!("seed {seed}"), parse_trace(&bytes).unwrap()));
    }
    for (name, trace) in &traces {
        let (sim, _) = simulation_trace(trace, None).unwrap();
        let compiled = Compiled::new(&sim);
        for policy in Policy::STANDARD {
            let (run, served) =
                simulate_policy_with_completions(&compiled, policy, &options, true, &mut ());
            let generated = generated_trace(&sim, &run);
            let receipt = kvroute_core::replay_bytes(&canonical_trace_bytes(&generated)).unwrap();
            for ticks_per_ms in [1, 1000] {
                let lines = completion_lines(&served, ticks_per_ms);
                let join_options = JoinOptions {
                    run: Some(policy),
                    ..JoinOptions::default()
                };
                let what = format!("{name}, {}, {ticks_per_ms} ticks a ms", policy.name());
                let counts = match join(&receipt[..], &lines[..], &join_options) {
                    Ok(joined) => joined.figures.counts,
                    // Nothing routed, nothing written: no record to join.
                    Err(kvroute_core::join::JoinError::NoRecords) if run.metrics.routed == 0 => {
                        continue
                    }
                    Err(e) => panic!("{what}: {e:?}"),
                };
                assert_eq!(counts.routed, run.metrics.routed, "{what}");
                assert_eq!(counts.matched, counts.routed, "{what}");
                assert_eq!(counts.completed, counts.routed, "{what}");
                assert_eq!(
                    (counts.dropped, counts.unrouted, counts.retried),
                    (0, 0, 0),
                    "{what}"
                );
            }
        }
    }
}
