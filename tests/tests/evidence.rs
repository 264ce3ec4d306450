//! Cache evidence under reordering and loss in the closed loop (SPEC.md §3.2, §3.6,
//! §11): loss before delivery, the re-query that answers a detected gap, and the
//! `missed` residency error, each checked by hand on a tiny trace, then lossy loops under
//! every stale rule replayed open-loop to the same runs.

use kvroute_core::harness::is_lost;
use kvroute_core::input::{EpochsMode, StaleRule, Trace};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::route::CollectSink;
use kvroute_core::route::Compiled;
use kvroute_core::simulate::{simulate_policy, simulation_trace, Capacity, SimulateOptions};
use kvroute_core::{parse_trace, Policy};
use kvroute_harness::closed_loop::{check_reproduction, mooncake_head as mooncake};
use serde_json::{json, Value};

fn request(seq: u64, tick: u64, keys: &[&str]) -> Value {
    let prefix: Vec<Value> = keys
        .iter()
        .map(|k| json!({ "key": k, "tokens": 512 }))
        .collect();
    json!({ "seq": seq, "tick": tick, "type": "request", "id": format!("r{seq}"),
            "tenant": "acme", "model": "m", "adapter": "base", "prefix": prefix,
            "prompt_tokens": 512 * keys.len() as u64, "decode_tokens": 1 })
}

/// One worker (16 prefill tokens a tick), lag 10, four requests.
fn one_worker_trace(policy: Value, events: Vec<Value>) -> Trace {
    let trace = json!({
        "format": "kvroute-trace/1", "limits": "scale", "policy": policy,
        "workers": [ { "id": "w0", "model": "m", "adapters": [], "prefill_rate": 16,
                       "decode_rate": 4, "queued_prefill": 0, "active_decode": 0,
                       "observed_tick": 0, "epoch": 0, "cache": [] } ],
        "events": events,
    });
    parse_trace(trace.to_string().as_bytes()).unwrap()
}

fn event_values(trace: &Trace, run: &kvroute_core::simulate::SimRun) -> Vec<Value> {
    run.generated
        .iter()
        .map(|e| {
            let one = Trace {
                events: vec![e.clone()],
                ..trace.clone()
            };
            serde_json::from_slice::<Value>(&canonical_trace_bytes(&one)).unwrap()["events"][0]
                .clone()
        })
        .collect()
}

/// The generated store of `keys` (512 tokens each) on w0, as the canonical trace
/// writes it.
fn store(seq: u64, tick: u64, epoch: u64, keys: &[&str]) -> Value {
    let segments: Vec<Value> = keys
        .iter()
        .map(|k| json!({ "key": k, "tokens": 512 }))
        .collect();
    json!({ "seq": seq, "tick": tick, "type": "cache", "op": "store",
            "worker": "w0", "epoch": epoch, "tenant": "acme", "model": "m",
            "adapter": "base", "segments": segments })
}

/// r1 (block a) completes at tick 32 and its store, epoch 1, is lost on the bus (a seed
/// is picked so that epoch 1 of worker 0 is lost and epoch 2 is not). r2 (block b)
/// arrives at 100, completes at 132; its store, epoch 2, arrives at 142: epoch 1 is
/// missing, a gap. The router re-queries w0, which answers at 142 + 10 = 152 with a
/// clear (epoch 3) and a store of everything it holds, a and b in key order (epoch 4).
/// r3 (a) at 145 finds w0 in a gap: `evidence_gap`, reuse 0, while the engine holds a:
/// 512 tokens missed. r4 (a, b) at 160 comes after the resync: reuse 1024, no error.
#[test]
fn a_lost_event_opens_a_gap_that_the_requery_answers() {
    let mut options = SimulateOptions {
        loss_per_mille: 500,
        ..SimulateOptions::default()
    };
    options.jitter_seed = (0..)
        .find(|&seed| {
            let o = SimulateOptions {
                jitter_seed: seed,
                ..options.clone()
            };
            is_lost(&o, 0, 1) && !is_lost(&o, 0, 2)
        })
        .unwrap();
    for rule in ["worker_epoch", "key_epoch"] {
        let trace = one_worker_trace(
            json!({ "stale_rule": rule, "epochs": "sequential" }),
            vec![
                request(1, 0, &["a"]),
                request(2, 100, &["b"]),
                request(3, 145, &["a"]),
                request(4, 160, &["a", "b"]),
            ],
        );
        let compiled = Compiled::new(&trace);
        for policy in Policy::STANDARD {
            let mut sink = CollectSink::default();
            let run = simulate_policy(&compiled, policy, &options, true, &mut sink);
            let what = format!("{rule} {}", policy.name());
            let s = run.stats;
            assert_eq!(
                (s.store_events, s.evict_events, s.lost_events, s.resyncs),
                (2, 0, 1, 1),
                "{what}"
            );
            assert_eq!(
                (s.phantom_reuse_tokens, s.missed_reuse_tokens),
                (0, 512),
                "{what}"
            );
            // The lost store took seq 5 and epoch 1.
            assert_eq!(
                event_values(&trace, &run),
                [
                    store(6, 142, 2, &["b"]),
                    json!({ "seq": 7, "tick": 152, "type": "cache", "op": "clear",
                            "worker": "w0", "epoch": 3 }),
                    store(8, 152, 4, &["a", "b"]),
                ],
                "{what}"
            );
            let r3 = &sink.decisions[2].candidates[0];
            let reasons: Vec<&str> = r3.reasons.iter().map(|r| r.name()).collect();
            assert_eq!((reasons, r3.reuse), (vec!["evidence_gap"], 0), "{what}");
            assert_eq!(sink.decisions[3].candidates[0].reuse, 1024, "{what}");
            let m = &run.metrics;
            assert_eq!(
                (m.evidence_gaps, m.evidence_gap_rows),
                (Some(1), Some(1)),
                "{what}"
            );
            assert_eq!(m.stale_event_rejections, 0, "{what}");
        }
    }
}

/// With `epochs: "any"` nothing is re-queried: the router never learns of a, so r3
/// misses 512 tokens and r4 (a, b) 1024: its walk stops at the missing a, while the
/// engine holds both.
#[test]
fn without_gap_detection_a_lost_store_is_missed_until_the_block_is_stored_again() {
    let mut options = SimulateOptions {
        loss_per_mille: 500,
        ..SimulateOptions::default()
    };
    options.jitter_seed = (0..)
        .find(|&seed| {
            let o = SimulateOptions {
                jitter_seed: seed,
                ..options.clone()
            };
            is_lost(&o, 0, 1) && !is_lost(&o, 0, 2)
        })
        .unwrap();
    let trace = one_worker_trace(
        json!({}),
        vec![
            request(1, 0, &["a"]),
            request(2, 100, &["b"]),
            request(3, 145, &["a"]),
            request(4, 160, &["a", "b"]),
        ],
    );
    let compiled = Compiled::new(&trace);
    let run = simulate_policy(&compiled, Policy::CachePlusLoad, &options, true, &mut ());
    assert_eq!((run.stats.lost_events, run.stats.resyncs), (1, 0));
    assert_eq!(run.stats.missed_reuse_tokens, 1536);
    assert_eq!(run.metrics.evidence_gaps, None);
    assert_eq!(event_values(&trace, &run).len(), 1);
}

/// A store still in flight is missed too: with a lag of 60, r3 (block a, at 50) routes
/// cold on the engine that holds a since tick 32 — 512 tokens held, not believed.
#[test]
fn evidence_in_flight_is_missed_on_a_cold_row() {
    let trace = one_worker_trace(
        json!({}),
        vec![request(1, 0, &["a"]), request(3, 50, &["a"])],
    );
    let compiled = Compiled::new(&trace);
    for (lag, missed) in [(60, 512), (10, 0)] {
        let options = SimulateOptions {
            publication_lag_ticks: lag,
            ..SimulateOptions::default()
        };
        let run = simulate_policy(&compiled, Policy::CachePlusLoad, &options, false, &mut ());
        assert_eq!(run.stats.missed_reuse_tokens, missed, "lag {lag}");
        assert_eq!(run.stats.phantom_reuse_tokens, 0, "lag {lag}");
    }
}

/// Lossy, jittered loops under every stale rule, with and without gap detection: each
/// generated trace (lost events left out, re-query answers in) replays open-loop to
/// exactly the loop's runs.
#[test]
fn lossy_loops_replay_open_loop_under_every_rule() {
    let trace = mooncake(250, 4);
    let (base, _) = simulation_trace(&trace, None).unwrap();
    let options = SimulateOptions {
        capacity: Capacity::Blocks(96),
        publication_lag_ticks: 3,
        jitter_ticks: 40,
        jitter_seed: 7,
        loss_per_mille: 100,
    };
    for rule in StaleRule::ALL {
        for epochs in [EpochsMode::Any, EpochsMode::Sequential] {
            let mut sim = base.clone();
            sim.policy.stale_rule = rule;
            sim.policy.epochs = epochs;
            let what = format!("{} {}", rule.name(), epochs.name());
            let runs = check_reproduction(&sim, &options, &what);
            for r in &runs {
                let s = r.run.stats;
                assert!(s.lost_events > 0, "{what}: nothing lost");
                assert_eq!(s.resyncs > 0, epochs == EpochsMode::Sequential, "{what}");
            }
            // Without gap detection, lost events leave the router's copy wrong.
            if epochs == EpochsMode::Any {
                let error = |r: &&kvroute_harness::closed_loop::Reproduced| {
                    r.run.stats.missed_reuse_tokens + r.run.stats.phantom_reuse_tokens
                };
                assert!(runs.iter().map(|r| error(&r)).sum::<u64>() > 0, "{what}");
            }
        }
    }
}
