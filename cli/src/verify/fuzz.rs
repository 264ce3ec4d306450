//! The `receipt_verify` fuzz target's oracle (it runs this crate's verifier, so it lives
//! here rather than in the harness, which this crate depends on): a genuine receipt is
//! accepted; after arbitrary edits it is accepted exactly when its bytes are unchanged;
//! the same receipt pretty-printed, or with its first member written twice, is
//! rejected; the genuine receipt's JSON Lines form is accepted; nothing panics.

use super::{verify, VerifyError};
use kvroute_harness::oracles::{receipt_case_bytes, ReceiptCase};

/// Panics if the verifier gets this case wrong.
pub fn receipt_verify(case: &ReceiptCase) {
    let (trace, genuine, edited) = receipt_case_bytes(case);
    if let Err(e) = verify(&trace, &genuine) {
        panic!("a genuine receipt was rejected: {e:?}");
    }
    match verify(&trace, &edited) {
        Ok(_) => assert_eq!(edited, genuine, "an edited receipt was accepted"),
        Err(VerifyError::Rejected(problem)) => {
            assert_ne!(
                edited, genuine,
                "an unchanged receipt was rejected: {problem}"
            );
            assert!(!problem.is_empty());
        }
        Err(other) => panic!("a generated trace or an in-memory receipt failed: {other:?}"),
    }
    let value: serde_json::Value = serde_json::from_slice(&edited).expect("receipts are JSON");
    let pretty = serde_json::to_vec_pretty(&value).expect("a value serialises");
    assert!(
        matches!(verify(&trace, &pretty), Err(VerifyError::Rejected(_))),
        "a pretty-printed receipt was accepted"
    );
    // The same receipt as JSON Lines (SPEC.md §6.4) is accepted with the same digest.
    let parsed = kvroute_core::parse_trace(&trace).expect("generated traces are valid");
    let digest = kvroute_core::output::trace_digest(&parsed);
    let compiled = kvroute_core::route::Compiled::new(&parsed);
    let mut lines = Vec::new();
    kvroute_core::replay::write_jsonl(&compiled, &digest, &mut lines)
        .expect("JSON Lines into memory");
    assert_eq!(
        verify(&trace, &lines).ok(),
        verify(&trace, &genuine).ok(),
        "the JSON Lines receipt of a genuine receipt"
    );
    let twice = [&br#"{"runs":[],"#[..], &edited[1..]].concat();
    assert!(
        matches!(verify(&trace, &twice), Err(VerifyError::Rejected(_))),
        "a receipt with a member written twice was accepted"
    );
}
