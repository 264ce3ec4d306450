//! Determinism is checked, not assumed: the same trace gives the same bytes, and
//! reordering any meaningless input array changes neither digest.

use kvroute_harness::{fixtures, reorder};

fn receipt_of(value: &serde_json::Value) -> Vec<u8> {
    kvroute_core::replay_bytes(serde_json::to_string(value).unwrap().as_bytes()).unwrap()
}

#[test]
fn replaying_twice_gives_identical_bytes() {
    for topic in fixtures::valid_topics() {
        let bytes = fixtures::trace_bytes(&topic);
        let first = kvroute_core::replay_bytes(&bytes).unwrap();
        let second = kvroute_core::replay_bytes(&bytes).unwrap();
        assert_eq!(first, second, "{topic}");
    }
}

#[test]
fn shuffling_unordered_arrays_changes_no_digest() {
    for topic in fixtures::valid_topics() {
        let original: serde_json::Value =
            serde_json::from_slice(&fixtures::trace_bytes(&topic)).unwrap();
        let expected = receipt_of(&original);
        for seed in 0..16 {
            let mut shuffled = original.clone();
            reorder::shuffle_unordered_arrays(&mut shuffled, seed);
            assert_eq!(
                receipt_of(&shuffled),
                expected,
                "{topic}, shuffle seed {seed}"
            );
        }
    }
}

#[test]
fn shuffling_does_move_things() {
    // Guards the test above against a shuffle that silently does nothing.
    let original: serde_json::Value =
        serde_json::from_slice(&fixtures::trace_bytes("lab")).unwrap();
    let mut shuffled = original.clone();
    reorder::shuffle_unordered_arrays(&mut shuffled, 7);
    assert_ne!(original["events"], shuffled["events"]);
    assert_ne!(original["workers"], shuffled["workers"]);
}

#[test]
fn reordering_a_prefix_does_change_the_trace_digest() {
    // Prefix order is meaningful: the canonical form must keep it.
    let mut trace: serde_json::Value =
        serde_json::from_slice(&fixtures::trace_bytes("tenant_boundary")).unwrap();
    let before = kvroute_core::output::trace_digest(
        &kvroute_core::parse_trace(trace.to_string().as_bytes()).unwrap(),
    );
    trace["events"][0]["prefix"]
        .as_array_mut()
        .unwrap()
        .reverse();
    let after = kvroute_core::output::trace_digest(
        &kvroute_core::parse_trace(trace.to_string().as_bytes()).unwrap(),
    );
    assert_ne!(before, after);
}
