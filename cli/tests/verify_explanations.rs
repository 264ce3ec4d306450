//! The exact words `verify` gives for two doctorings its other tests only match in
//! part: a re-signed decision whose chosen worker its own rows do not justify when a
//! row is reserved out for cold traffic (SPEC.md §4.5: the reserve is a preference,
//! the cap a limit), and a member written twice deep inside a receipt, which is named
//! by its full path.

use kvroute_cli::verify::{verify, VerifyError};
use kvroute_core::output::{jcs_bytes, sha256_tag};
use kvroute_harness::fixtures;
use serde_json::Value;

fn receipt_of(topic: &str) -> (Vec<u8>, Value) {
    let trace = fixtures::trace_bytes(topic);
    let receipt = kvroute_core::replay_bytes(&trace).unwrap();
    (trace, serde_json::from_slice(&receipt).unwrap())
}

/// Re-signs a doctored receipt, so that only the semantic checks can catch it.
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

/// `cache_plus_load`'s first decision of `topic` with its chosen worker replaced.
fn chosen_swapped(topic: &str, to: &str) -> String {
    let (trace, mut receipt) = receipt_of(topic);
    let run = receipt["runs"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["policy"] == "cache_plus_load")
        .unwrap();
    run["decisions"][0]["chosen"] = Value::from(to);
    rejection(&trace, &resign(receipt))
}

#[test]
fn a_chosen_row_the_cold_reserve_turned_away_is_explained() {
    // fixtures/cold_reserve: w0 reuses its cache but is reserved out; w1 is cold and
    // chosen. Claiming w0 is wrong although w0 is the cheaper row.
    assert_eq!(
        chosen_swapped("cold_reserve", "w0"),
        "runs[3].decisions[0]: chosen is \"w0\", but its own rows justify \"w1\""
    );
}

#[test]
fn a_chosen_row_over_the_cap_when_the_reserve_falls_back_is_explained() {
    // fixtures/cold_reserve_fallback: the only row under the cap is reserved out, so
    // it comes back and is chosen; claiming the overloaded row is wrong.
    assert_eq!(
        chosen_swapped("cold_reserve_fallback", "w1"),
        "runs[3].decisions[0]: chosen is \"w1\", but its own rows justify \"w0\""
    );
}

#[test]
fn a_member_repeated_inside_a_candidate_row_is_named_by_its_full_path() {
    let (trace, receipt) = receipt_of("lab");
    let text = String::from_utf8(jcs_bytes(&receipt)).unwrap();
    // The first row's `reuse`, written twice.
    let at = text.find("\"reuse\":").unwrap();
    let doctored = format!("{}\"reuse\":7,{}", &text[..at], &text[at..]);
    assert_eq!(
        rejection(&trace, doctored.as_bytes()),
        "runs[0].decisions[0].candidates[0].reuse: repeated member \"reuse\" (byte offset 660)"
    );
}
