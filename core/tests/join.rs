//! `join` (SPEC.md §14) on the fixture of `fixtures/join/README.md`, whose every figure
//! was computed by hand: the counts, the prediction figures, goodput, the per-worker
//! calibration; the same from a JSON Lines receipt and with keyed ids; and each kind of
//! bad input named with its line and path.

use kvroute_core::join::ReceiptError;
use kvroute_core::join::{self, join, JoinError, JoinOptions};
use kvroute_core::join::{Counts, Goodput, JoinFigures, Slo};
use kvroute_core::{parse_trace, Policy, LAB_TRACE_JSON};

#[path = "support/lab_join.rs"]
mod lab_join;
use lab_join::{lab_receipt, lab_workers, SLO};

const COMPLETIONS: &str = include_str!("../../fixtures/join/lab.completions.jsonl");

fn options(slo: Option<Slo>) -> JoinOptions {
    JoinOptions {
        run: Some(Policy::CachePlusLoad),
        slo,
        ..JoinOptions::default()
    }
}

/// The figures of fixtures/join/README.md.
fn hand_computed() -> JoinFigures {
    JoinFigures {
        counts: Counts {
            decisions: 29,
            routed: 28,
            rejected: 1,
            completion_lines: 10,
            matched: 7,
            dropped: 21,
            rejected_served: 1,
            unrouted: 1,
            retried: 1,
            cancelled: 1,
            errors: 1,
            completed: 5,
            error_rate_pm: 142,
        },
        ttft_rank_gamma_pm: Some(-143),
        us_per_predicted_token: Some(101),
        goodput: Some(Goodput {
            good: 2,
            good_pm: 71,
            span_ns: 1_500_000_000,
            good_per_second_milli: 1333,
        }),
        workers: lab_workers(),
        cohorts: None,
        attribution: None,
    }
}

#[test]
fn the_fixture_joins_to_the_hand_computed_figures() {
    let receipt = lab_receipt();
    let joined = join(&receipt[..], COMPLETIONS.as_bytes(), &options(Some(SLO))).unwrap();
    assert_eq!(joined.figures, hand_computed());
    // Without objectives the goodput is absent and nothing else moves.
    let plain = join(&receipt[..], COMPLETIONS.as_bytes(), &options(None)).unwrap();
    assert_eq!(plain.figures.goodput, None);
    assert_eq!(plain.figures.counts, hand_computed().counts);
}

#[test]
fn the_document_is_canonical_and_says_the_figures() {
    let receipt = lab_receipt();
    let joined = join(&receipt[..], COMPLETIONS.as_bytes(), &options(Some(SLO))).unwrap();
    let bytes = join::json_bytes(&joined);
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(serde_json_canonicalizer::to_vec(&value).unwrap(), bytes);
    assert_eq!(value["format"], "kvroute-join/2");
    assert_eq!(value["run"], "cache_plus_load");
    assert_eq!(
        value["slo"],
        serde_json::json!({"ttft_us": 200_000, "tpot_us": 20_000})
    );
    assert_eq!(value["counts"]["dropped"], 21);
    assert_eq!(value["prediction"]["ttft_rank_gamma_pm"], -143);
    assert_eq!(value["goodput"]["good_per_second_milli"], 1333);
    assert_eq!(value["workers"][0]["us_per_predicted_token"], 235);
    let receipt_value: serde_json::Value = serde_json::from_slice(&receipt).unwrap();
    assert_eq!(value["receipt_digest"], receipt_value["receipt_digest"]);
}

/// Objectives below a millisecond, or between two, are written in microseconds in the
/// document (§14.3: what `kvroute-join/1`'s whole milliseconds could not say) and in
/// milliseconds with the fewest decimals that say them exactly in the table's goodput
/// line; an objective not declared is `null` and left out of the line.
#[test]
fn objectives_with_decimals_are_microseconds_in_the_document_and_exact_in_the_table() {
    let receipt = lab_receipt();
    for (slo, members, objectives) in [
        (
            Slo {
                ttft_us: Some(500),
                tpot_us: Some(50_000),
            },
            r#""slo":{"tpot_us":50000,"ttft_us":500}"#,
            "ttft <= 0.5 ms, tpot <= 50 ms",
        ),
        (
            Slo {
                ttft_us: Some(300_125),
                tpot_us: None,
            },
            r#""slo":{"tpot_us":null,"ttft_us":300125}"#,
            "ttft <= 300.125 ms",
        ),
        (
            Slo {
                ttft_us: None,
                tpot_us: Some(20_010),
            },
            r#""slo":{"tpot_us":20010,"ttft_us":null}"#,
            "tpot <= 20.01 ms",
        ),
    ] {
        let joined = join(&receipt[..], COMPLETIONS.as_bytes(), &options(Some(slo))).unwrap();
        let document = String::from_utf8(join::json_bytes(&joined)).unwrap();
        assert!(document.contains(members), "{document}");
        let table = join::table(&joined, &|id: &str| id.to_owned());
        let goodput_line = table
            .lines()
            .find(|line| line.starts_with("goodput"))
            .expect("a goodput line");
        assert!(
            goodput_line.starts_with(&format!("goodput ({objectives}): good ")),
            "{goodput_line}"
        );
    }
    // Without objectives the document says so, and the table has no goodput line.
    let plain = join(&receipt[..], COMPLETIONS.as_bytes(), &options(None)).unwrap();
    let document = String::from_utf8(join::json_bytes(&plain)).unwrap();
    assert!(document.contains(r#""goodput":null"#));
    assert!(document.contains(r#""slo":{"tpot_us":null,"ttft_us":null}"#));
    let table = join::table(&plain, &|id: &str| id.to_owned());
    assert!(!table.contains("goodput"));
}

#[test]
fn a_json_lines_receipt_and_keyed_ids_join_the_same() {
    let trace = parse_trace(LAB_TRACE_JSON.as_bytes()).unwrap();
    let compiled = kvroute_core::route::Compiled::new(&trace);
    let digest = kvroute_core::output::trace_digest(&trace);
    let mut lines = Vec::new();
    kvroute_core::replay::write_jsonl(&compiled, &digest, &mut lines).unwrap();
    let joined = join(&lines[..], COMPLETIONS.as_bytes(), &options(Some(SLO))).unwrap();
    assert_eq!(joined.figures, hand_computed());
    // A receipt of keyed ids joins plain completion ids through the same key.
    let key = b"join-test-key".to_vec();
    let mut keyed = trace.clone();
    kvroute_core::output::key_request_ids(&mut keyed, &key);
    let keyed_receipt =
        kvroute_core::replay::receipt_bytes(&kvroute_core::route::Compiled::new(&keyed), &digest);
    let keyed_options = JoinOptions {
        id_key: Some(key),
        ..options(Some(SLO))
    };
    let joined = join(&keyed_receipt[..], COMPLETIONS.as_bytes(), &keyed_options).unwrap();
    assert_eq!(joined.figures.counts, hand_computed().counts);
}

fn completion_errors(text: &str) -> Vec<String> {
    let receipt = lab_receipt();
    match join(&receipt[..], text.as_bytes(), &options(None)) {
        Err(JoinError::Completions(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        other => panic!("expected completion errors, got {other:?}"),
    }
}

#[test]
fn a_line_that_is_not_the_layout_names_its_line_and_path() {
    let good = COMPLETIONS.lines().next().unwrap();
    let text = [
        good.to_owned(),
        good.replace(r#""x_request_id": "acme-01""#, r#""x_request_id": 5"#),
        good.replace(r#""unit": "ms"}, "inter"#, r#""unit": "s"}, "inter"#),
        good.replace(r#""x_request_id": "acme-01", "#, ""),
        good.replace("120.5", "-3"),
        good.replace(r#""was_cancelled": false"#, r#""was_cancelled": 0"#),
        "[1]".to_owned(),
        "{".to_owned(),
    ]
    .join("\n");
    assert_eq!(
        completion_errors(&text),
        [
            "line 2: metadata.x_request_id: expected a non-empty string, found 5",
            "line 3: metrics.time_to_first_token.unit: expected \"ms\", found \"s\"",
            "line 4: metadata: missing required member \"x_request_id\"",
            "line 5: metrics.time_to_first_token.value: expected a non-negative number, found -3",
            "line 6: metadata.was_cancelled: expected a boolean, found 0",
            "line 7: $: expected an object, found [1]",
            "line 8: invalid JSON: EOF while parsing an object at column 1",
        ]
    );
}

#[test]
fn a_join_that_matches_nothing_or_names_no_run_is_an_error() {
    let receipt = lab_receipt();
    let renamed = COMPLETIONS.replace("\"x_request_id\": \"", "\"x_request_id\": \"other-");
    assert_eq!(
        join(&receipt[..], renamed.as_bytes(), &options(None)),
        Err(JoinError::NothingMatched {
            completion_id: "other-acme-01".to_owned(),
            request_id: "acme-01".to_owned(),
        })
    );
    let dynamo = JoinOptions {
        run: Some(Policy::DynamoDefault),
        ..options(None)
    };
    assert_eq!(
        join(&receipt[..], COMPLETIONS.as_bytes(), &dynamo),
        Err(JoinError::Receipt(ReceiptError::NoSuchRun(
            [
                "round_robin",
                "least_load",
                "longest_prefix",
                "cache_plus_load"
            ]
            .map(str::to_owned)
            .to_vec()
        )))
    );
    assert!(matches!(
        join(
            &b"{\"format\":\"other\"}"[..],
            COMPLETIONS.as_bytes(),
            &options(None)
        ),
        Err(JoinError::Receipt(ReceiptError::NotAReceipt(_)))
    ));
}

#[test]
fn a_figure_past_the_bound_is_written_as_the_bound() {
    let receipt = lab_receipt();
    // Records decades apart: a span of about 10^19 ns, past 2^53 - 1.
    let far = COMPLETIONS
        .lines()
        .take(1)
        .map(|l| {
            l.replace("1759813207000000000", "0")
                .replace("1759813207150000000", "9999999999999999999")
        })
        .collect::<String>();
    let joined = join(&receipt[..], far.as_bytes(), &options(Some(SLO))).unwrap();
    let goodput = joined.figures.goodput.unwrap();
    assert_eq!(goodput.span_ns, (1 << 53) - 1);
    // From the exact span: floor(1 · 10^12 / 9,999,999,999,999,999,999) = 0.
    assert_eq!(goodput.good_per_second_milli, 0);
}
