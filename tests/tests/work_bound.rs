//! SPEC.md §1.5: one policy's replay of a valid trace does at most
//! `W·C + E·max(K, C) + R·(W + K·W·C)` entry operations, whatever the trace's size.
//! Generated worst cases at the `lab` work limits (every entry under the one key the
//! requests repeat, grants that never match) are counted with core's operation counter,
//! not timed.

use kvroute_core::harness::reset_entry_operations;
use kvroute_core::input::LimitsProfile;
use kvroute_core::route::run_metrics;
use kvroute_core::route::Compiled;
use kvroute_core::{parse_trace, Policy};
use kvroute_harness::costly::{costly_trace, CostlyShape};
use proptest::prelude::*;

/// The entry operations of each of `policies` on `trace_json`, which must be valid.
fn operations_per_policy(trace_json: &[u8], policies: &[Policy]) -> (Vec<u64>, u128) {
    let trace = parse_trace(trace_json).expect("the worst case is a valid trace");
    let bound = LimitsProfile::Lab.work_bound(
        trace.workers.len() as u64,
        trace.events.len() as u64,
        trace.request_count() as u64,
    );
    let compiled = Compiled::new(&trace);
    let counts = policies
        .iter()
        .map(|&policy| {
            reset_entry_operations();
            run_metrics(&compiled, policy);
            reset_entry_operations()
        })
        .collect();
    (counts, bound)
}

#[test]
fn the_worst_case_at_every_lab_limit_stays_within_the_bound() {
    let trace = costly_trace(&CostlyShape::LAB_LIMITS).to_string();
    let (counts, bound) = operations_per_policy(trace.as_bytes(), &Policy::STANDARD);
    // W·C + E·max(K, C) + R·(W + K·W·C) with E = 64 + 8·2·2 = 96 events.
    assert_eq!(bound, 8 * 256 + 96 * 256 + 64 * (8 + 32 * 8 * 256));
    for count in &counts {
        assert!(u128::from(*count) <= bound, "{count} > {bound}");
        // The shape is a worst case: it does most of what the bound allows.
        assert!(
            u128::from(*count) * 10 >= bound * 9,
            "{count} is far below {bound}"
        );
    }
}

#[test]
fn the_issue_12_trace_is_rejected_by_the_work_limits() {
    let trace = costly_trace(&CostlyShape::ISSUE_12_LAB).to_string();
    assert!(trace.len() > 1_300_000, "{} bytes", trace.len());
    let errors = parse_trace(trace.as_bytes()).unwrap_err().lines();
    assert_eq!(
        errors[0],
        "sharing[0].tenants: 20000 tenants exceed the lab limit of 8 per grant"
    );
    assert!(errors.contains(
        &"workers[0].cache: 1000 cache entries exceed the lab limit of 256 per worker".to_owned()
    ));
    assert!(errors
        .contains(&"events[0].prefix: 400 keys exceed the lab limit of 32 per event".to_owned()));
}

fn shapes() -> impl Strategy<Value = CostlyShape> {
    (
        1usize..=8,
        0usize..=256,
        0usize..=64,
        0usize..=32,
        (0usize..=8, 0usize..=8, 0usize..=8),
        (0usize..=4, 0usize..=32),
    )
        .prop_map(
            |(
                workers,
                entries,
                requests,
                segments,
                (grants, tenants, adapters),
                (stores, store_segments),
            )| {
                CostlyShape {
                    workers,
                    entries_per_worker: entries,
                    requests,
                    segments_per_request: segments,
                    grants,
                    tenants_per_grant: tenants,
                    adapters_per_worker: adapters,
                    stores_per_worker: stores,
                    segments_per_store: store_segments,
                }
            },
        )
}

proptest! {
    // Each case replays up to a few million entry operations in a debug build; the
    // fixed worst case above covers every policy at every limit at once.
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn generated_worst_cases_stay_within_the_bound(shape in shapes(), policy in 0usize..4) {
        let trace = costly_trace(&shape).to_string();
        let (counts, bound) = operations_per_policy(trace.as_bytes(), &[Policy::STANDARD[policy]]);
        for count in counts {
            prop_assert!(u128::from(count) <= bound, "{:?}: {} > {}", shape, count, bound);
        }
    }
}
