//! Every committed fixture through the oracle: it must reproduce the golden ledger
//! byte for byte, and reject each invalid fixture at the same path as core.

use kvroute_harness::{differential, fixtures};

#[test]
fn the_oracle_reproduces_every_golden_ledger() {
    for topic in fixtures::valid_topics() {
        let receipt = kvroute_oracle::replay(&fixtures::trace_bytes(&topic))
            .unwrap_or_else(|e| panic!("the oracle rejects fixture {topic}: {e:?}"));
        let golden =
            std::fs::read_to_string(fixtures::topic_dir(&topic).join("ledger.json")).unwrap();
        assert_eq!(
            fixtures::pretty_ledger(&receipt),
            golden,
            "{topic}: {}",
            differential::first_receipt_difference(
                &receipt,
                &kvroute_core::output::jcs_bytes(&serde_json::from_str(&golden).unwrap()),
                "oracle",
                "golden"
            )
        );
    }
}

#[test]
fn the_oracle_rejects_every_invalid_fixture_with_the_same_lines() {
    for case in fixtures::invalid_cases() {
        let dir = fixtures::invalid_dir(&case);
        let trace = std::fs::read(dir.join("trace.json")).unwrap();
        let expected = std::fs::read_to_string(dir.join("expected_stderr.txt")).unwrap();
        let errors = kvroute_oracle::replay(&trace).expect_err(&case);
        assert_eq!(format!("{}\n", errors.join("\n")), expected, "{case}");
    }
}
