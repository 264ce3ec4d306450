//! Reordering a trace's meaningless arrays, to check that no digest depends on them.
//!
//! The contract says the order of `workers`, `events`, `adapters`, `cache`, `sharing`,
//! grant `tenants` and evict `keys` carries no meaning. These helpers shuffle exactly
//! those arrays (never a request `prefix` or store `segments`) with a seeded RNG.

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::Value;

/// A deterministic RNG for `seed`.
pub fn seeded_rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

fn shuffle(items: &mut [Value], rng: &mut TestRng) {
    for i in (1..items.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

fn shuffle_member(object: &mut Value, name: &str, rng: &mut TestRng) {
    if let Some(Value::Array(items)) = object.get_mut(name) {
        shuffle(items, rng);
    }
}

/// Shuffles every array of `trace` whose order carries no meaning.
pub fn shuffle_unordered_arrays(trace: &mut Value, seed: u64) {
    let mut rng = seeded_rng(seed);
    shuffle_member(trace, "workers", &mut rng);
    shuffle_member(trace, "events", &mut rng);
    shuffle_member(trace, "sharing", &mut rng);
    if let Some(Value::Array(workers)) = trace.get_mut("workers") {
        for worker in workers {
            shuffle_member(worker, "adapters", &mut rng);
            shuffle_member(worker, "cache", &mut rng);
        }
    }
    if let Some(Value::Array(grants)) = trace.get_mut("sharing") {
        for grant in grants {
            shuffle_member(grant, "tenants", &mut rng);
        }
    }
    if let Some(Value::Array(events)) = trace.get_mut("events") {
        for event in events {
            shuffle_member(event, "keys", &mut rng);
        }
    }
}
