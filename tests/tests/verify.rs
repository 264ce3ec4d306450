//! `verify` accepts a genuine receipt and rejects doctored ones, each for its own reason.

use kvroute_core::output::canonical::{jcs_bytes, sha256_tag};
use kvroute_harness::fixtures;
use kvroute_harness::verify::{verify, VerifyError};
use serde_json::Value;

fn genuine() -> (Vec<u8>, Value) {
    let trace = fixtures::trace_bytes("lab");
    let receipt = kvroute_core::replay_bytes(&trace).unwrap();
    (trace, serde_json::from_slice(&receipt).unwrap())
}

/// Re-signs a doctored receipt, as a careful forger would, so that only the semantic
/// checks can catch it.
fn resign(mut receipt: Value) -> Vec<u8> {
    let object = receipt.as_object_mut().unwrap();
    object.remove("receipt_digest");
    let digest = sha256_tag(&jcs_bytes(&receipt));
    receipt["receipt_digest"] = Value::String(digest);
    jcs_bytes(&receipt)
}

fn rejection(trace: &[u8], receipt: &[u8]) -> String {
    match verify(trace, receipt) {
        Err(VerifyError::Rejected(problem)) => problem,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn a_genuine_receipt_is_accepted() {
    let (trace, receipt) = genuine();
    let digest = verify(&trace, &jcs_bytes(&receipt)).unwrap();
    assert_eq!(receipt["receipt_digest"], digest.as_str());
}

#[test]
fn removed_candidate_rows_are_rejected() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][3]["decisions"][0]["candidates"]
        .as_array_mut()
        .unwrap()
        .retain(|row| row["worker"] == "w0");
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains("no candidate row for worker \"w1\""),
        "{problem}"
    );
}

#[test]
fn a_changed_metric_is_rejected() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][1]["metrics"]["routed"] = Value::from(99);
    let problem = rejection(&trace, &resign(receipt));
    assert!(problem.contains("least_load"), "{problem}");
    assert!(problem.contains(".metrics.routed"), "{problem}");
}

#[test]
fn a_swapped_chosen_worker_is_rejected() {
    let (trace, mut receipt) = genuine();
    let decision = &mut receipt["runs"][3]["decisions"][0];
    assert_eq!(decision["chosen"], "w0");
    decision["chosen"] = Value::from("w2");
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains("chosen is \"w2\", but its own rows justify \"w0\""),
        "{problem}"
    );
}

#[test]
fn an_altered_digest_is_rejected() {
    let (trace, mut receipt) = genuine();
    let digest = receipt["receipt_digest"].as_str().unwrap().to_owned();
    let flipped = format!(
        "{}{}",
        &digest[..digest.len() - 1],
        if digest.ends_with('0') { '1' } else { '0' }
    );
    receipt["receipt_digest"] = Value::from(flipped);
    let problem = rejection(&trace, &jcs_bytes(&receipt));
    assert!(
        problem.starts_with("receipt_digest is sha256:"),
        "{problem}"
    );
}

#[test]
fn a_receipt_for_another_trace_is_rejected() {
    let (_, receipt) = genuine();
    let other = fixtures::trace_bytes("stale_epoch");
    let problem = rejection(&other, &jcs_bytes(&receipt));
    assert!(problem.starts_with("trace_digest is"), "{problem}");
}

#[test]
fn an_invalid_trace_is_not_a_verdict_on_the_receipt() {
    let (_, receipt) = genuine();
    let result = verify(b"{}", &jcs_bytes(&receipt));
    assert!(
        matches!(result, Err(VerifyError::InvalidTrace(_))),
        "{result:?}"
    );
}

#[test]
fn a_changed_dominance_count_is_rejected() {
    let (trace, mut receipt) = genuine();
    // The first row of any decision, whatever its dominance, gets one more dominator.
    let row = &mut receipt["runs"][0]["decisions"][0]["candidates"][0];
    let count = row["dominated_count"].as_u64().unwrap();
    row["dominated_count"] = Value::from(count + 1);
    let problem = rejection(&trace, &resign(receipt));
    assert!(
        problem.contains(&format!("dominated_count {}", count + 1)),
        "{problem}"
    );
    assert!(
        problem.contains("but its decision's rows give"),
        "{problem}"
    );
}

// ---- issue 12 item 7: type errors and reorders are named as such (SPEC.md §7) ----

#[test]
fn a_type_error_is_reported_at_its_path() {
    let (trace, mut receipt) = genuine();
    receipt["runs"][3]["decisions"][0]["candidates"][1]["cost_milli"] = Value::from("x");
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs[3].decisions[0].candidates[1].cost_milli: expected a non-negative integer, found \"x\""
    );
}

#[test]
fn runs_of_the_wrong_type_are_named() {
    let (trace, mut receipt) = genuine();
    receipt["runs"] = Value::from(5);
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs: expected an array, found 5"
    );
    let (trace, mut receipt) = genuine();
    receipt.as_object_mut().unwrap().remove("runs");
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        "runs: missing required member \"runs\""
    );
}

#[test]
fn reordered_decisions_are_reported_as_a_reorder() {
    let (trace, mut receipt) = genuine();
    let decisions = receipt["runs"][2]["decisions"].as_array_mut().unwrap();
    let (first, third) = (decisions[0]["seq"].clone(), decisions[2]["seq"].clone());
    decisions.swap(0, 2);
    assert_ne!(first, third);
    assert_eq!(
        rejection(&trace, &resign(receipt)),
        format!("runs[2].decisions[0]: decision for seq {third} is out of order: it belongs at decisions[2]")
    );
}
