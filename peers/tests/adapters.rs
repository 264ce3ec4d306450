//! The adapters on hand-written traces: each documented cause shows up where SPEC.md §12
//! says it does, and nowhere else.

use kvroute_peers::compare::{compare, Cause, Options, Report, CROSS};
use serde_json::{json, Value};

fn workers(n: usize) -> Vec<Value> {
    (0..n)
        .map(|w| {
            json!({ "id": format!("w{w}"), "model": "m", "adapters": ["lora"],
                "prefill_rate": 16, "decode_rate": 4, "queued_prefill": 0,
                "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": [] })
        })
        .collect()
}

fn segs(keys: &[(&str, u64)]) -> Value {
    keys.iter()
        .map(|(k, t)| json!({ "key": k, "tokens": t }))
        .collect()
}

fn store(seq: u64, worker: &str, epoch: u64, keys: &[(&str, u64)]) -> Value {
    json!({ "seq": seq, "tick": seq, "type": "cache", "op": "store", "worker": worker,
        "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base", "segments": segs(keys) })
}

fn evict(seq: u64, worker: &str, epoch: u64, keys: &[&str]) -> Value {
    json!({ "seq": seq, "tick": seq, "type": "cache", "op": "evict", "worker": worker,
        "epoch": epoch, "tenant": "t", "model": "m", "adapter": "base", "keys": keys })
}

fn request(seq: u64, tenant: &str, adapter: &str, keys: &[(&str, u64)]) -> Value {
    let tokens: u64 = keys.iter().map(|(_, t)| t).sum();
    json!({ "seq": seq, "tick": seq, "type": "request", "id": format!("r{seq}"),
        "tenant": tenant, "model": "m", "adapter": adapter, "prefix": segs(keys),
        "prompt_tokens": tokens + 3, "decode_tokens": 1 })
}

fn run(workers_n: usize, events: Vec<Value>, options: Options) -> Report {
    let doc =
        json!({ "format": "kvroute-trace/1", "workers": workers(workers_n), "events": events });
    let trace = kvroute_core::parse_trace(doc.to_string().as_bytes()).expect("a valid trace");
    compare(&trace, options)
}

fn opts() -> Options {
    Options {
        block_tokens: 4,
        ..Options::default()
    }
}

fn causes(report: &Report, comparison: &str) -> Vec<(Cause, u64)> {
    let t = report.tally(comparison);
    Cause::ALL
        .iter()
        .filter(|&&c| t.count(c) > 0)
        .map(|&c| (c, t.count(c)))
        .collect()
}

#[test]
fn chains_stored_evicted_from_the_tail_and_cleared_agree_row_for_row() {
    let events = vec![
        store(1, "w0", 1, &[("a", 4), ("b", 4), ("c", 4)]),
        // A second run that continues the chain from `c`, and one from the root.
        store(2, "w0", 2, &[("d", 4)]),
        store(3, "w1", 1, &[("a", 4)]),
        request(4, "t", "base", &[("a", 4), ("b", 4), ("c", 4), ("d", 4)]),
        evict(5, "w0", 3, &["d", "c"]),
        request(6, "t", "base", &[("a", 4), ("b", 4), ("c", 4), ("d", 4)]),
        json!({ "seq": 7, "tick": 7, "type": "cache", "op": "clear", "worker": "w0", "epoch": 4 }),
        request(8, "t", "base", &[("a", 4), ("b", 4)]),
        // Another tenant and an adapter are other namespaces: nothing to reuse.
        request(9, "u", "base", &[("a", 4)]),
        request(10, "t", "lora", &[("a", 4)]),
    ];
    let report = run(2, events, opts());
    for t in &report.tallies {
        assert_eq!(t.rows_compared, 10, "{}", t.comparison);
        assert_eq!(t.rows_differing, 0, "{}: {:?}", t.comparison, report.first);
    }
}

#[test]
fn a_partial_tail_counts_in_kvroute_only() {
    let events = vec![
        store(1, "w0", 1, &[("a", 4), ("tail", 2)]),
        request(2, "t", "base", &[("a", 4), ("tail", 2)]),
    ];
    let report = run(1, events.clone(), opts());
    assert_eq!(causes(&report, "radix_tree"), [(Cause::PartialBlock, 1)]);
    assert_eq!(causes(&report, "positional"), [(Cause::PartialBlock, 1)]);
    let d = &report.first[0];
    assert_eq!((d.reference_tokens, d.peer_tokens), (6, 4));
    // Cut to whole blocks, both sides answer 4.
    let full = run(
        1,
        events,
        Options {
            full_blocks_only: true,
            ..opts()
        },
    );
    assert_eq!(full.tally("radix_tree").rows_differing, 0);
}

#[test]
fn a_block_stored_short_counts_whole_in_the_peer() {
    let events = vec![
        store(1, "w0", 1, &[("a", 1)]),
        request(2, "t", "base", &[("a", 4)]),
    ];
    let report = run(1, events, opts());
    assert_eq!(causes(&report, "radix_tree"), [(Cause::TokenCount, 1)]);
}

#[test]
fn a_late_event_is_dropped_by_kvroute_only_unless_withheld() {
    let events = vec![
        store(1, "w0", 2, &[("a", 4)]),
        // Epoch 1 arrives after 2: kvroute drops it, Dynamo applies it.
        evict(2, "w0", 1, &["a"]),
        request(3, "t", "base", &[("a", 4)]),
    ];
    let report = run(1, events.clone(), opts());
    assert_eq!(causes(&report, "radix_tree"), [(Cause::StaleEpoch, 1)]);
    assert_eq!(causes(&report, "positional"), [(Cause::StaleEpoch, 1)]);
    let withheld = run(
        1,
        events,
        Options {
            withhold_stale: true,
            ..opts()
        },
    );
    assert_eq!(withheld.tally("radix_tree").rows_differing, 0);
}

#[test]
fn a_run_whose_parent_is_missing_is_dropped_by_the_peer() {
    let events = vec![
        // `b` without `a`: Dynamo refuses the run; kvroute stores it.
        store(1, "w0", 1, &[("b", 4)]),
        store(2, "w0", 2, &[("a", 4)]),
        request(3, "t", "base", &[("a", 4), ("b", 4)]),
    ];
    let report = run(1, events, opts());
    assert_eq!(causes(&report, "radix_tree"), [(Cause::OrphanStore, 1)]);
}

#[test]
fn a_hole_refilled_restores_the_chain_in_kvroute_only() {
    let events = vec![
        store(1, "w0", 1, &[("a", 4), ("b", 4), ("c", 4)]),
        evict(2, "w0", 2, &["b"]),
        store(3, "w0", 3, &[("b", 4)]),
        request(4, "t", "base", &[("a", 4), ("b", 4), ("c", 4)]),
    ];
    let report = run(1, events, opts());
    // kvroute walks a, b, c again (12); RadixTree dropped `c` with `b` (8).
    assert_eq!(causes(&report, "radix_tree"), [(Cause::HoleEvicted, 1)]);
    assert_eq!(
        (
            report.first[0].reference_tokens,
            report.first[0].peer_tokens
        ),
        (12, 8)
    );
}

#[test]
fn sharing_across_tenants_is_not_representable() {
    let doc = json!({ "format": "kvroute-trace/1",
        "sharing": [{ "model": "m", "adapter": "base", "tenants": ["t", "u"] }],
        "workers": workers(1),
        "events": [store(1, "w0", 1, &[("a", 4)]), request(2, "u", "base", &[("a", 4)])] });
    let trace = kvroute_core::parse_trace(doc.to_string().as_bytes()).unwrap();
    let report = compare(&trace, opts());
    assert_eq!(causes(&report, "radix_tree"), [(Cause::SharingGrant, 1)]);
}

#[test]
fn a_key_reached_from_two_parents_is_a_fork() {
    let events = vec![
        request(1, "t", "base", &[("a", 4), ("x", 4)]),
        store(2, "w0", 1, &[("b", 4), ("x", 4)]),
        request(3, "t", "base", &[("b", 4), ("x", 4)]),
    ];
    let report = run(1, events, opts());
    assert_eq!(report.forked_keys, 1);
    assert!(causes(&report, "radix_tree")
        .iter()
        .all(|(c, _)| matches!(c, Cause::ChainFork | Cause::OrphanStore)));
    assert_eq!(report.tally(CROSS).rows_compared, 2);
}

/// kvroute's answers from a walk over a scratch reset for every worker (what the adapter
/// did before it reset only the workers its last walk changed), as a sparse answer.
fn fully_reset_answers(trace: &kvroute_core::Trace) -> Vec<Vec<(u32, u64)>> {
    use kvroute_core::route::Reasons;
    use kvroute_core::route::RouterState;
    use kvroute_core::route::{reuse_walk, WalkScratch};
    use kvroute_core::route::{Compiled, Step};
    use kvroute_core::route::{NamespaceRule, Sharing};
    let compiled = Compiled::new(trace);
    let n = compiled.worker_count();
    let mut state = RouterState::initial(&compiled);
    let mut rule = NamespaceRule::new(Sharing::new(compiled.sharing));
    let mut answers = Vec::new();
    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                state.apply_cache_event(*worker, event.tick, *epoch, op);
            }
            Step::Load { .. } => {}
            Step::Request(request) => {
                let mut scratch = WalkScratch::new(n);
                for w in 0..n {
                    scratch.set_walking(w, true);
                }
                let mut reuse = vec![0u64; n];
                let mut boundary = vec![Reasons::default(); n];
                reuse_walk(
                    request,
                    &state.cache,
                    &compiled.tables,
                    &mut rule,
                    &mut scratch,
                    &mut reuse,
                    &mut boundary,
                );
                answers.push(
                    (0..n as u32)
                        .map(|w| (w, reuse[w as usize].min(request.prompt_tokens)))
                        .filter(|&(_, tokens)| tokens > 0)
                        .collect(),
                );
            }
        }
    }
    answers
}

fn adapter_answers(trace: &kvroute_core::Trace) -> Vec<Vec<(u32, u64)>> {
    use kvroute_core::route::{Compiled, Step};
    use kvroute_peers::kvroute::KvrouteIndex;
    use kvroute_peers::Peer;
    let compiled = Compiled::new(trace);
    let mut index = KvrouteIndex::new(&compiled);
    let mut answers = Vec::new();
    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                index.apply_cache_event(*worker, event.tick, *epoch, op);
            }
            Step::Load { .. } => {}
            Step::Request(request) => {
                let mut answer = vec![(99, 99)];
                index.reuse_tokens(request, &mut answer);
                answers.push(answer);
            }
        }
    }
    answers
}

/// The kvroute adapter resets only the workers its previous walk changed, so a request
/// costs O(holders), not O(workers). On the sweep's chain traces and on the harness's
/// generated traces (tenant boundaries, 0-token segments, partial blocks), every answer
/// is the one a walk over a fully reset scratch gives.
#[test]
fn the_kvroute_adapter_resetting_only_walked_workers_answers_as_a_full_reset() {
    let mut traces: Vec<kvroute_core::Trace> =
        (0..200).map(kvroute_peers::sweep::trace_of).collect();
    for seed in 0..200 {
        let doc = kvroute_harness::generators::TraceRecipe::from_seed(seed).build();
        traces.push(kvroute_core::parse_trace(doc.to_string().as_bytes()).expect("valid"));
    }
    let (mut requests, mut holders) = (0, 0);
    for (i, trace) in traces.iter().enumerate() {
        let expected = fully_reset_answers(trace);
        let answers = adapter_answers(trace);
        assert_eq!(answers, expected, "trace {i}");
        requests += answers.len();
        holders += answers.iter().filter(|a| !a.is_empty()).count();
    }
    assert!(
        requests > 5_000 && holders > 2_000,
        "{requests} requests, {holders} with reuse"
    );
}
