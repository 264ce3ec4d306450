//! Historical disagreements between core and the oracle, each replayed through the
//! differential harness with a note on what broke and why.

use kvroute_harness::differential::{compare, Agreement};

/// Both implementations' own error lines, and the harness's verdict on them.
fn assert_both_reject_with(trace: &[u8], expected: &[&str]) {
    let expected: Vec<String> = expected.iter().map(|l| l.to_string()).collect();
    let core = kvroute_core::replay_bytes(trace).map_err(|e| e.lines());
    assert_eq!(core, Err(expected.clone()), "core");
    assert_eq!(
        kvroute_oracle::replay(trace),
        Err(expected.clone()),
        "oracle"
    );
    match compare(trace) {
        Ok(Agreement::Rejected(lines)) => assert_eq!(lines, expected),
        other => panic!("expected agreement on {expected:?}, got {other:?}"),
    }
}

/// An unknown member given twice. Core reported `unknown member "x"` at both
/// occurrences; the oracle reported the second as `repeated member "x"`. The harness
/// compared rejections by path only, so it called that agreement. SPEC.md §2.2 now pins
/// that a name the object does not list is unknown at every occurrence (a repeat is
/// only reported for a listed name), and rejections must agree line for line.
#[test]
fn an_unknown_member_given_twice_is_unknown_both_times_in_both() {
    let trace = br#"{"format":"kvroute-trace/1","workers":[],"events":[],"x":1,"x":2}"#;
    assert_both_reject_with(
        trace,
        &[r#"x: unknown member "x""#, r#"x: unknown member "x""#],
    );
}

/// A listed member given twice is repeated at its second occurrence, and the same
/// name later again is repeated once more: errors at one path keep document order.
#[test]
fn a_listed_member_given_three_times_is_repeated_twice() {
    let trace = br#"{"format":"kvroute-trace/1","workers":[],"events":[],"events":[],"events":[]}"#;
    assert_both_reject_with(
        trace,
        &[
            r#"events: repeated member "events""#,
            r#"events: repeated member "events""#,
        ],
    );
}
