//! Core and the oracle on generated traces pushed onto edges the generator's small
//! domains never reach ([`Boundary`]): ticks, observed ticks and a freshness window at
//! exactly `B`, the largest integer SPEC.md allows, and a decode load of 2^32 + 7 that
//! is the only wide load of its request. Each case must be accepted by both and give
//! the same receipt bytes; a slip at the edge in either (an exclusive bound, a wrapped
//! product, a test of the wrong load before the 32-bit row path) shows as a divergence
//! or a rejection.

use kvroute_harness::differential::{self, Agreement};
use kvroute_harness::generators::{at_boundary, Boundary, TraceRecipe, INTEGER_MAX};
use serde_json::Value;

/// Enough seeds that every boundary meets requests on several fleets and policies,
/// few enough to stay cheap.
const SEEDS: std::ops::Range<u64> = 0..24;

fn requests(trace: &Value) -> impl Iterator<Item = &Value> {
    trace["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"] == "request")
}

#[test]
fn core_and_oracle_agree_at_every_boundary() {
    for boundary in Boundary::ALL {
        let mut requests_at_edge = 0;
        for seed in SEEDS {
            let trace = at_boundary(&TraceRecipe::from_seed(seed), boundary);
            let at_edge = match boundary {
                Boundary::WideActiveDecodeOnly => requests(&trace).count(),
                _ => requests(&trace)
                    .filter(|r| r["tick"] == INTEGER_MAX)
                    .count(),
            };
            requests_at_edge += at_edge;
            let bytes = serde_json::to_vec(&trace).expect("a trace serialises");
            match differential::compare(&bytes) {
                Ok(Agreement::Accepted(_)) => {}
                Ok(Agreement::Rejected(errors)) => {
                    panic!("{boundary:?}, seed {seed}: both reject a valid trace: {errors:?}")
                }
                Err(divergence) => panic!("{boundary:?}, seed {seed}: {divergence}"),
            }
        }
        // Guards the cases against a recipe that stopped reaching its edge.
        assert!(requests_at_edge >= 10, "{boundary:?}: {requests_at_edge}");
    }
}

#[test]
fn the_wide_decode_load_is_the_only_load_past_32_bits() {
    let mut wide_rows = 0;
    for seed in SEEDS {
        let trace = at_boundary(
            &TraceRecipe::from_seed(seed),
            Boundary::WideActiveDecodeOnly,
        );
        let bytes = serde_json::to_vec(&trace).expect("a trace serialises");
        let receipt: Value = match differential::compare(&bytes) {
            Ok(Agreement::Accepted(receipt)) => serde_json::from_slice(&receipt).unwrap(),
            Ok(Agreement::Rejected(errors)) => panic!("seed {seed}: {errors:?}"),
            Err(divergence) => panic!("seed {seed}: {divergence}"),
        };
        // Only the first worker's decode load may be wide (until a load event replaces
        // it), and no prefill load is: so only that load can send the row builder to
        // its wide path.
        let first_worker = trace["workers"][0]["id"].as_str().unwrap();
        for decision in receipt["runs"][0]["decisions"].as_array().unwrap() {
            for row in decision["candidates"].as_array().unwrap() {
                assert!(
                    row["queued_prefill"].as_u64().unwrap() < 1 << 32,
                    "seed {seed}: {row}"
                );
                if row["active_decode"].as_u64().unwrap() >= 1 << 32 {
                    assert_eq!(row["worker"], first_worker, "seed {seed}: {row}");
                    wide_rows += 1;
                }
            }
        }
    }
    assert!(wide_rows >= 10, "{wide_rows}");
}
