//! The stale-rule, epoch and cold-reserve policy members (SPEC.md §1, §2.2, §6.1):
//! `stale_rule`, `epochs` and `cold_reserve_milli` are validated with their stated paths
//! and reasons, and at their defaults they leave the canonical trace, and so every digest,
//! unchanged.

use kvroute_core::output::{canonical_trace_bytes, trace_digest};
use kvroute_core::parse_trace;
use serde_json::{json, Value};

fn base() -> Value {
    json!({
        "format": "kvroute-trace/1",
        "workers": [
            { "id": "w0", "model": "m1", "adapters": [], "prefill_rate": 100,
              "decode_rate": 10, "queued_prefill": 0, "active_decode": 0,
              "observed_tick": 0, "epoch": 0, "cache": [] }
        ],
        "events": []
    })
}

fn errors_with_policy(policy: Value) -> Vec<String> {
    let mut trace = base();
    trace["policy"] = policy;
    match parse_trace(trace.to_string().as_bytes()) {
        Ok(_) => vec![],
        Err(e) => e.errors,
    }
}

fn digest_with_policy(policy: Option<Value>) -> String {
    let mut trace = base();
    if let Some(policy) = policy {
        trace["policy"] = policy;
    }
    trace_digest(&parse_trace(trace.to_string().as_bytes()).unwrap())
}

#[test]
fn every_allowed_value_is_accepted() {
    for rule in ["worker_epoch", "key_epoch", "arrival_order"] {
        assert_eq!(
            errors_with_policy(json!({ "stale_rule": rule })),
            Vec::<String>::new()
        );
    }
    for mode in ["any", "sequential"] {
        assert_eq!(
            errors_with_policy(json!({ "epochs": mode })),
            Vec::<String>::new()
        );
    }
    for reserve in [json!(null), json!(0), json!(9007199254740991u64)] {
        let errors = errors_with_policy(json!({ "cold_reserve_milli": reserve }));
        assert_eq!(errors, Vec::<String>::new());
    }
}

#[test]
fn wrong_values_name_the_path_and_the_allowed_spellings() {
    let rule = r#"expected "worker_epoch", "key_epoch" or "arrival_order", found"#;
    for (value, quoted) in [
        (json!("Key_Epoch"), r#""Key_Epoch""#),
        (json!(null), "null"),
        (json!(1), "1"),
        (json!(["key_epoch"]), r#"["key_epoch"]"#),
    ] {
        assert_eq!(
            errors_with_policy(json!({ "stale_rule": value })),
            vec![format!("policy.stale_rule: {rule} {quoted}")]
        );
    }
    assert_eq!(
        errors_with_policy(json!({ "epochs": "strict" })),
        vec![r#"policy.epochs: expected "any" or "sequential", found "strict""#.to_owned()]
    );
    assert_eq!(
        errors_with_policy(json!({ "cold_reserve_milli": -1 })),
        vec![
            "policy.cold_reserve_milli: expected a non-negative integer or null, found -1"
                .to_owned()
        ]
    );
    assert_eq!(
        errors_with_policy(json!({ "cold_reserve_milli": "5" })),
        vec![
            r#"policy.cold_reserve_milli: expected a non-negative integer or null, found "5""#
                .to_owned()
        ]
    );
}

/// Shape errors come in the policy table's member order, not document order.
#[test]
fn policy_errors_follow_the_table_order() {
    let errors = errors_with_policy(json!({
        "cold_reserve_milli": "x", "epochs": 1, "stale_rule": 2, "max_queued_work": "y"
    }));
    let paths: Vec<&str> = errors
        .iter()
        .map(|e| e.split(':').next().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "policy.max_queued_work",
            "policy.stale_rule",
            "policy.epochs",
            "policy.cold_reserve_milli"
        ]
    );
}

#[test]
fn defaults_leave_the_canonical_trace_and_its_digest_unchanged() {
    let absent = digest_with_policy(None);
    let spelled_out = digest_with_policy(Some(json!({
        "stale_rule": "worker_epoch", "epochs": "any", "cold_reserve_milli": null
    })));
    assert_eq!(absent, spelled_out);
    let trace = parse_trace(base().to_string().as_bytes()).unwrap();
    let bytes = String::from_utf8(canonical_trace_bytes(&trace)).unwrap();
    assert!(bytes.contains(
        r#""policy":{"decode_weight_milli":1000,"freshness_ticks":null,"imbalance_penalty_milli":0,"max_queued_work":null}"#
    ));
}

#[test]
fn off_default_members_are_written_in_canonical_order() {
    let mut trace = base();
    trace["policy"] = json!({ "stale_rule": "key_epoch", "epochs": "sequential",
                              "cold_reserve_milli": 7 });
    let trace = parse_trace(trace.to_string().as_bytes()).unwrap();
    let bytes = String::from_utf8(canonical_trace_bytes(&trace)).unwrap();
    assert!(bytes.contains(
        r#""policy":{"cold_reserve_milli":7,"decode_weight_milli":1000,"epochs":"sequential","freshness_ticks":null,"imbalance_penalty_milli":0,"max_queued_work":null,"stale_rule":"key_epoch"}"#
    ));
    for rule in ["key_epoch", "arrival_order"] {
        assert_ne!(
            digest_with_policy(Some(json!({ "stale_rule": rule }))),
            digest_with_policy(None)
        );
    }
}
