//! Every committed fixture through core, compared with its golden ledger and digest.
//! One test per fixture, so that the mutant check can name the fixture that kills a
//! planted bug (`fixture_inventory.rs` checks that no fixture directory lacks a test). Run with `UPDATE_EXPECT=1` to rewrite goldens after a reviewed change
//! to SPEC.md.

use expect_test::expect_file;
use kvroute_harness::fixtures;

fn check_fixture(topic: &str) {
    let bytes = fixtures::trace_bytes(topic);
    let receipt = kvroute_core::replay_bytes(&bytes)
        .unwrap_or_else(|e| panic!("fixture {topic} is invalid:\n{e}"));
    let dir = fixtures::topic_dir(topic);
    expect_file![dir.join("ledger.json")].assert_eq(&fixtures::pretty_ledger(&receipt));
    expect_file![dir.join("receipt.sha256")]
        .assert_eq(&format!("{}\n", fixtures::receipt_digest(&receipt)));
}

macro_rules! fixture_tests {
    ($($topic:ident),* $(,)?) => {
        $(
            #[test]
            fn $topic() {
                check_fixture(stringify!($topic));
            }
        )*
    };
}

fixture_tests!(
    arrival_order,
    cold_reserve,
    cold_reserve_fallback,
    dynamo_default_tie,
    evidence_gap,
    freshness_window,
    hot_worker_decode,
    key_epoch,
    lab,
    overload_escape,
    partial_prefix,
    round_robin_ineligible,
    sharing_grant,
    spec_example,
    stale_epoch,
    tenant_boundary,
);

#[test]
fn the_golden_ledger_is_the_canonical_receipt() {
    // The pretty golden must canonicalise back to exactly the bytes core exports, and
    // its digest must be the SHA-256 of those bytes without the digest member.
    for topic in fixtures::valid_topics() {
        let dir = fixtures::topic_dir(&topic);
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("ledger.json")).unwrap())
                .unwrap();
        let receipt = kvroute_core::replay_bytes(&fixtures::trace_bytes(&topic)).unwrap();
        assert_eq!(kvroute_core::output::jcs_bytes(&golden), receipt, "{topic}");
        let mut body = golden.clone();
        body.as_object_mut().unwrap().remove("receipt_digest");
        let digest = kvroute_core::output::sha256_tag(&kvroute_core::output::jcs_bytes(&body));
        assert_eq!(golden["receipt_digest"], digest.as_str(), "{topic}");
    }
}

#[test]
fn the_cli_embeds_the_lab_fixture() {
    assert_eq!(
        kvroute_core::LAB_TRACE_JSON.as_bytes(),
        fixtures::trace_bytes("lab").as_slice()
    );
}
