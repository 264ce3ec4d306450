//! `join` (SPEC.md §14.1.1–14.1.4, §14.2.1) on the Dynamo and vllm-bench fixtures and
//! the cohort case of `fixtures/join/README.md`, whose every figure was computed by
//! hand; the layout detected from the first line; and the join by position past the
//! run's last decision.

use kvroute_core::join::Attribution;
use kvroute_core::join::{join, CompletionsFormat, JoinError, JoinOptions, TraceCohorts};
use kvroute_core::join::{Counts, Goodput, JoinFigures};
use kvroute_core::{parse_trace, Policy, LAB_TRACE_JSON};

#[path = "support/lab_join.rs"]
mod lab_join;
use lab_join::{lab_receipt, lab_workers, worker, SLO};

const AIPERF: &str = include_str!("../../fixtures/join/lab.completions.jsonl");
const DYNAMO: &str = include_str!("../../fixtures/join/lab.dynamo.jsonl");
const VLLM_BENCH: &str = include_str!("../../fixtures/join/lab.vllm-bench.json");

fn options(format: Option<CompletionsFormat>) -> JoinOptions {
    JoinOptions {
        run: Some(Policy::CachePlusLoad),
        slo: Some(SLO),
        format,
        ..JoinOptions::default()
    }
}

fn counts(figures: [u64; 13]) -> Counts {
    let [decisions, routed, rejected, completion_lines, matched, dropped, rejected_served, unrouted, retried, cancelled, errors, completed, error_rate_pm] =
        figures;
    Counts {
        decisions,
        routed,
        rejected,
        completion_lines,
        matched,
        dropped,
        rejected_served,
        unrouted,
        retried,
        cancelled,
        errors,
        completed,
        error_rate_pm,
    }
}

#[test]
fn the_dynamo_fixture_joins_to_the_hand_computed_figures() {
    let receipt = lab_receipt();
    for format in [Some(CompletionsFormat::Dynamo), None] {
        let joined = join(&receipt[..], DYNAMO.as_bytes(), &options(format)).unwrap();
        assert_eq!(joined.format, CompletionsFormat::Dynamo);
        assert_eq!(
            joined.figures,
            JoinFigures {
                counts: counts([29, 28, 1, 10, 6, 22, 1, 2, 1, 0, 0, 5, 0]),
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
                // The records name their prefill worker (not one of the lab's), and none
                // carries cached tokens: attribution is written, nothing is attributed.
                attribution: Some(Attribution {
                    unknown: 5,
                    ..Attribution::default()
                }),
            }
        );
    }
}

#[test]
fn the_vllm_bench_fixture_joins_by_position_to_the_hand_computed_figures() {
    let receipt = lab_receipt();
    for format in [Some(CompletionsFormat::VllmBench), None] {
        let joined = join(&receipt[..], VLLM_BENCH.as_bytes(), &options(format)).unwrap();
        assert_eq!(joined.format, CompletionsFormat::VllmBench);
        assert_eq!(
            joined.figures,
            JoinFigures {
                counts: counts([29, 28, 1, 8, 8, 20, 0, 0, 0, 0, 2, 6, 250]),
                ttft_rank_gamma_pm: Some(-167),
                us_per_predicted_token: Some(90),
                goodput: Some(Goodput {
                    good: 3,
                    good_pm: 107,
                    span_ns: 2_500_000_000,
                    good_per_second_milli: 1200,
                }),
                workers: vec![
                    worker("w0", [3, 170_166, 7_416, 1_301_333, 130]),
                    worker("w1", [1, 50_000, 30_000, 2_600_000, 19]),
                    worker("w2", [1, 100_000, 8_500, 2_600_000, 38]),
                    worker("w3", [1, 400_250, 15_999, 2_600_000, 153]),
                ],
                cohorts: None,
                attribution: None,
            }
        );
    }
}

#[test]
fn entries_past_the_last_decision_are_unrouted_and_decisions_past_the_last_entry_dropped() {
    let receipt = lab_receipt();
    let entries = 31;
    let doc = format!(
        r#"{{"duration":1,"ttfts":[{ttfts}],"itls":[{itls}],"output_lens":[{lens}],"errors":[{errors}]}}"#,
        ttfts = vec!["0.001"; entries].join(","),
        itls = vec!["[]"; entries].join(","),
        lens = vec!["1"; entries].join(","),
        errors = vec!["\"\""; entries].join(","),
    );
    let joined = join(&receipt[..], doc.as_bytes(), &options(None)).unwrap();
    // 29 decisions: 28 routed matched, umbrella-01 (index 26) served though rejected.
    assert_eq!(
        joined.figures.counts,
        counts([29, 28, 1, 31, 28, 0, 1, 2, 0, 0, 0, 28, 0])
    );
    let short = r#"{"duration":1,"ttfts":[0.001],"itls":[[]],"output_lens":[1],"errors":[""]}"#;
    let joined = join(&receipt[..], short.as_bytes(), &options(None)).unwrap();
    assert_eq!(
        joined.figures.counts,
        counts([29, 28, 1, 1, 1, 27, 0, 0, 0, 0, 0, 1, 0])
    );
}

fn lab_cohorts() -> Result<TraceCohorts, Vec<String>> {
    Ok(TraceCohorts::of(
        &parse_trace(LAB_TRACE_JSON.as_bytes()).unwrap(),
        None,
    ))
}

/// The figures of a cohort whose `decisions` were all routed and none served.
fn nothing_served(decisions: u64) -> JoinFigures {
    JoinFigures {
        counts: counts([
            decisions, decisions, 0, 0, 0, decisions, 0, 0, 0, 0, 0, 0, 0,
        ]),
        ttft_rank_gamma_pm: None,
        us_per_predicted_token: None,
        goodput: Some(Goodput {
            good: 0,
            good_pm: 0,
            span_ns: 0,
            good_per_second_milli: 0,
        }),
        workers: vec![],
        cohorts: None,
        attribution: None,
    }
}

#[test]
fn cohorts_split_the_run_by_tenant_model_and_adapter() {
    let receipt = lab_receipt();
    let with_trace = JoinOptions {
        trace: Some(lab_cohorts()),
        ..options(Some(CompletionsFormat::Aiperf))
    };
    let joined = join(&receipt[..], AIPERF.as_bytes(), &with_trace).unwrap();
    let cohorts = joined.figures.cohorts.expect("--trace gives cohorts");
    let names: Vec<(&str, &str, &str)> = cohorts
        .iter()
        .map(|c| (c.tenant.as_str(), c.model.as_str(), c.adapter.as_str()))
        .collect();
    // umbrella/m9/base has only a rejected decision: not a cohort.
    assert_eq!(
        names,
        [
            ("acme", "m1", "base"),
            ("acme", "m1", "lora-support"),
            ("globex", "m1", "base"),
            ("hooli", "m1", "base"),
            ("initech", "m1", "base"),
        ]
    );
    assert_eq!(
        cohorts[0].figures,
        JoinFigures {
            counts: counts([12, 12, 0, 8, 7, 5, 0, 0, 1, 1, 1, 5, 142]),
            ttft_rank_gamma_pm: Some(-143),
            us_per_predicted_token: Some(101),
            goodput: Some(Goodput {
                good: 2,
                good_pm: 166,
                span_ns: 1_500_000_000,
                good_per_second_milli: 1333,
            }),
            workers: lab_workers(),
            cohorts: None,
            attribution: None,
        }
    );
    for (cohort, decisions) in cohorts[1..].iter().zip([1, 8, 6, 1]) {
        assert_eq!(
            cohort.figures,
            nothing_served(decisions),
            "{}",
            cohort.tenant
        );
    }
    // The run's own figures do not change with --trace.
    let without = join(&receipt[..], AIPERF.as_bytes(), &options(None)).unwrap();
    assert_eq!(
        JoinFigures {
            cohorts: None,
            attribution: None,
            ..joined.figures
        },
        without.figures
    );
}

#[test]
fn a_trace_of_another_digest_or_without_the_receipts_ids_is_an_error() {
    let receipt = lab_receipt();
    let mut other = lab_cohorts().unwrap();
    other.trace_digest = "sha256:0".to_owned();
    let wrong_digest = JoinOptions {
        trace: Some(Ok(other)),
        ..options(None)
    };
    assert!(matches!(
        join(&receipt[..], AIPERF.as_bytes(), &wrong_digest),
        Err(JoinError::TraceDigest { .. })
    ));
    let keyed = TraceCohorts::of(&parse_trace(LAB_TRACE_JSON.as_bytes()).unwrap(), Some(b"k"));
    let keyed_trace = JoinOptions {
        trace: Some(Ok(TraceCohorts {
            trace_digest: lab_cohorts().unwrap().trace_digest,
            ..keyed
        })),
        ..options(None)
    };
    assert_eq!(
        join(&receipt[..], AIPERF.as_bytes(), &keyed_trace),
        Err(JoinError::UnknownRequest("acme-01".to_owned()))
    );
    // The trace's own errors come after the receipt's.
    let invalid = JoinOptions {
        trace: Some(Err(vec!["TRACE: bad".to_owned()])),
        ..options(None)
    };
    assert_eq!(
        join(&receipt[..], AIPERF.as_bytes(), &invalid),
        Err(JoinError::Trace(vec!["TRACE: bad".to_owned()]))
    );
    assert!(matches!(
        join(&b"{}"[..], AIPERF.as_bytes(), &invalid),
        Err(JoinError::Receipt(_))
    ));
}

#[test]
fn a_layout_that_cannot_be_told_names_its_first_non_blank_line() {
    let receipt = lab_receipt();
    for (text, line) in [
        ("\n  \n{\"metadata\":{},\"ttfts\":[]}\n", 3),
        ("{\n", 1),
        ("[1]\n", 1),
        ("\r\n{\"colour\":1}", 2),
    ] {
        assert_eq!(
            join(&receipt[..], text.as_bytes(), &options(None)),
            Err(JoinError::Undetected { line }),
            "{text:?}"
        );
    }
    assert_eq!(
        join(&receipt[..], &b"\n\n"[..], &options(None)),
        Err(JoinError::NoRecords)
    );
    // Dynamo lines that are all tool events hold no record.
    let tools = "{\"event_type\":\"tool_start\"}\n{\"event_type\":\"tool_end\"}\n";
    assert_eq!(
        join(&receipt[..], tools.as_bytes(), &options(None)),
        Err(JoinError::NoRecords)
    );
}

#[test]
fn bad_dynamo_lines_and_vllm_members_are_named() {
    let receipt = lab_receipt();
    let lines =
        "{\"event_type\":\"request_end\",\"request\":{\"request_id\":\"a\",\"avg_itl_ms\":true}}\n\
                 {\"event_type\":\"tool_end\"}\n\
                 {\"event\":{\"event_type\":\"request_end\"},\"event\":1}\n";
    let Err(JoinError::Completions(errors)) = join(&receipt[..], lines.as_bytes(), &options(None))
    else {
        panic!("expected line errors");
    };
    let errors: Vec<(usize, String)> = errors.into_iter().map(|e| (e.line, e.reason)).collect();
    assert_eq!(
        errors,
        [
            (
                1,
                "request.avg_itl_ms: expected a non-negative number or null, found true".to_owned()
            ),
            (3, "event: repeated member \"event\"".to_owned()),
            (3, "event: missing required member \"request\"".to_owned()),
        ]
    );
    let doc = r#"{"duration":1,"ttfts":[1e-9,9007199.254740992],"itls":[[],[]],"output_lens":[1,-1],"errors":["",""],"ttfts":[]}"#;
    assert_eq!(
        join(&receipt[..], doc.as_bytes(), &options(None)),
        Err(JoinError::Document {
            reasons: vec![
                "ttfts: repeated member \"ttfts\"".to_owned(),
                "ttfts[1]: expected a number of seconds below 9007199.254740992, found \
                 9007199.254740992"
                    .to_owned(),
                "output_lens[1]: expected a non-negative integer, found -1".to_owned(),
            ],
            more: 0,
        })
    );
    let Err(JoinError::Document { reasons, .. }) = join(
        &receipt[..],
        &b"{\"ttfts\":[1] x"[..],
        &options(Some(CompletionsFormat::VllmBench)),
    ) else {
        panic!("expected a document error");
    };
    assert!(reasons[0].starts_with("invalid JSON: "), "{reasons:?}");
}
