//! The model causes of SPEC.md §12 (`evict_unseen`, `ancestors_implied`) through
//! `peer run`: a scripted peer (`tests/peers/scripted_peer.py`, answers chosen by the
//! test) on the Ray fixtures, so the classification a protocol peer gets is the one the
//! rules state, and a figure neither model holds stays a finding.

use kvroute_core::input::Trace;
use kvroute_core::Policy;
use kvroute_peer_core::classify::{Cause, Options};
use kvroute_peer_core::run::{run_peer, RunOptions};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

fn fixture(name: &str) -> Trace {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fixtures/{name}/trace.json"));
    kvroute_core::parse_trace(&std::fs::read(path).unwrap()).unwrap()
}

/// `peer run` of the scripted peer answering `answers` on `trace`: its cause counts
/// above 0, in the table's order.
fn causes(trace: &Trace, answers: &str) -> Vec<(Cause, u64)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/scripted_peer.py");
    let command: Vec<OsString> = vec!["python3".into(), script.into(), answers.into()];
    let run = run_peer(
        trace,
        &command,
        &RunOptions {
            compare: Options {
                block_tokens: 16,
                ..Options::default()
            },
            timeout: Duration::from_secs(20),
            expect_version: None,
            policy: Policy::CachePlusLoad,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let tally = &run.report.tallies[0];
    let requests = trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, kvroute_core::input::EventKind::Request(_)))
        .count();
    assert_eq!(tally.rows_compared, (trace.workers.len() * requests) as u64);
    Cause::ALL
        .iter()
        .map(|&c| (c, tally.count(c)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

#[test]
fn a_peer_keeping_an_evicted_block_is_evict_unseen() {
    // ray_evict_unseen: w0 stores k0 k1 (seq 2) and evicts k1 (seq 3); r2 (seq 4) asks
    // for [k0, k1]. kvroute: 16 on w0. Keeping k1: 32.
    let trace = fixture("ray_evict_unseen");
    assert_eq!(causes(&trace, r#"{"4": {"w0": 16}}"#), vec![]);
    assert_eq!(
        causes(&trace, r#"{"4": {"w0": 32}}"#),
        vec![(Cause::EvictUnseen, 1)]
    );
    // More than any model holds (the prompt's 40 tokens, of a 32-token prefix), and a
    // worker that never stored anything: findings both.
    assert_eq!(
        causes(&trace, r#"{"4": {"w0": 40, "w1": 16}}"#),
        vec![(Cause::NewFinding, 2)]
    );
}

#[test]
fn a_peer_holding_a_stored_blocks_ancestors_is_ancestors_implied() {
    // ray_ancestors_implied: w1 stores only k1 (seq 2), whose chain parent is k0; r2
    // (seq 3) asks for [k0, k1]. kvroute: 0 on w1. k0 implied with k1: 32.
    let trace = fixture("ray_ancestors_implied");
    assert_eq!(
        causes(&trace, r#"{"3": {"w1": 32}}"#),
        vec![(Cause::AncestorsImplied, 1)]
    );
    // k0 alone is no model's figure (the ancestor model holds k1 too), nor is 40.
    assert_eq!(
        causes(&trace, r#"{"3": {"w1": 16}}"#),
        vec![(Cause::NewFinding, 1)]
    );
    assert_eq!(
        causes(&trace, r#"{"3": {"w1": 40}}"#),
        vec![(Cause::NewFinding, 1)]
    );
}

#[test]
fn a_key_an_evict_names_first_is_placed_by_its_next_occurrence() {
    // ray_evict_names_key_first (seed 601, shrunk): w0 evicts k2 (seq 5) before anything
    // names it, r6 (seq 6) asks for [k0, k2], w0 stores only k2 (seq 10), r11 (seq 11)
    // asks for [k0]. kvroute: 0 on w0. k2's ancestor k0 implied with it: 16, the
    // ancestor model's figure only if k2 is placed after k0 (by r6), not at the root
    // (by the evict, as before SPEC.md §15.2 said an eviction places nothing).
    let trace = fixture("ray_evict_names_key_first");
    assert_eq!(
        causes(&trace, r#"{"11": {"w0": 16}}"#),
        vec![(Cause::AncestorsImplied, 1)]
    );
}
