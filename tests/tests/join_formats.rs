//! `join`'s Dynamo and vllm-bench layouts, layout detection and cohorts (SPEC.md
//! §14.1.1–14.1.4, §14.2.1) computed twice: core's against the oracle's, on the
//! hand-checked fixtures and on generated records over generated receipts (records of
//! every kind, members of the wrong type, tool lines, entries past the last decision).
//! The document's bytes, or the errors, must be the same.
//!

use kvroute_core::join::CompletionsFormat;
use kvroute_core::join::Slo;
use kvroute_core::Policy;
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::join::{compare_join, core_join, objective_us, JoinCase as Case};
use kvroute_oracle::JoinFailure;
use proptest::prelude::*;

fn assert_same(case: &Case) {
    if let Err(difference) = compare_join(case) {
        panic!(
            "{difference}\n  completions:\n{}",
            String::from_utf8_lossy(case.completions)
        );
    }
}

const SLO: Slo = Slo {
    ttft_us: Some(200_000),
    tpot_us: Some(20_000),
};

/// The three hand-checked fixtures of `fixtures/join/`, each with its layout.
const FIXTURES: [(&[u8], CompletionsFormat); 3] = [
    (
        include_bytes!("../../fixtures/join/lab.completions.jsonl"),
        CompletionsFormat::Aiperf,
    ),
    (
        include_bytes!("../../fixtures/join/lab.dynamo.jsonl"),
        CompletionsFormat::Dynamo,
    ),
    (
        include_bytes!("../../fixtures/join/lab.vllm-bench.json"),
        CompletionsFormat::VllmBench,
    ),
];

#[test]
fn core_and_oracle_agree_on_the_fixtures_and_their_cohorts() {
    let trace = kvroute_core::LAB_TRACE_JSON.as_bytes();
    let receipt = kvroute_core::replay_bytes(trace).unwrap();
    for (completions, format) in FIXTURES {
        for named in [Some(format), None] {
            for slo in [None, Some(SLO)] {
                for with_trace in [None, Some(trace)] {
                    for run in Policy::STANDARD {
                        assert_same(&Case {
                            receipt: &receipt,
                            completions,
                            format: named,
                            run,
                            slo,
                            trace: with_trace,
                        });
                    }
                }
            }
        }
    }
    // A trace of another digest: core_and_oracle_agree_on_a_trace_that_is_not_the_receipts.
}

#[test]
fn core_and_oracle_agree_on_undetectable_and_bad_inputs() {
    let receipt = kvroute_core::replay_bytes(kvroute_core::LAB_TRACE_JSON.as_bytes()).unwrap();
    let inputs: [(&[u8], Option<CompletionsFormat>); 12] = [
        (b"\n{\"colour\":1}\n", None),
        (b"{\"metadata\":{},\"ttfts\":[]}\n", None),
        (b"{\n \"ttfts\": []\n}\n", None),
        (b"[]\n", None),
        (b"\n \r\n", None),
        (b"{\"event_type\":\"tool_start\"}\n", None),
        (
            b"{\"event\":{\"event_type\":\"request_end\",\"request\":{\"request_id\":\"\",\"ttft_ms\":-1}},\"event\":2}\n",
            None,
        ),
        (
            b"{\"event_type\":\"request_end\",\"request\":{\"request_id\":\"a\",\"x_request_id\":\"acme-01\",\"request_received_ms\":1e3,\"avg_itl_ms\":\"x\",\"total_time_ms\":9007199254740.992}}\n",
            Some(CompletionsFormat::Dynamo),
        ),
        (b"{\"event_type\":7}\n", Some(CompletionsFormat::Dynamo)),
        (
            b"{\"duration\":-1,\"ttfts\":[0.1,\"x\"],\"itls\":[[],[-2]],\"output_lens\":[1],\"errors\":[\"\",5],\"ttfts\":1}",
            None,
        ),
        (b"{\"ttfts\":[1]} {}", Some(CompletionsFormat::VllmBench)),
        (
            b"{\"duration\":1,\"ttfts\":[],\"itls\":[],\"output_lens\":[],\"errors\":[]}",
            None,
        ),
    ];
    for (completions, format) in inputs {
        assert_same(&Case {
            receipt: &receipt,
            completions,
            format,
            run: Policy::CachePlusLoad,
            slo: Some(SLO),
            trace: None,
        });
    }
}

/// Seconds or milliseconds written every way JSON allows, with a few that are not.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..2_000, 0u64..1000).prop_map(|(w, f)| format!("{w}.{f:03}")),
        2 => (0u64..5_000).prop_map(|w| w.to_string()),
        1 => (1u64..999, -9i32..4).prop_map(|(m, e)| format!("{m}e{e}")),
        1 => Just("-0".to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("\"7\"".to_owned()),
    ]
}

/// One generated Dynamo line: its key (an index into the run's ids, past them an
/// unknown one, or none), wrapped or bare, times, and now and then a tool line.
type DynamoPick = (usize, bool, u64, String, String, String, u8);

fn dynamo_line() -> impl Strategy<Value = DynamoPick> {
    (
        0usize..64,
        any::<bool>(),
        0u64..10_000_000,
        number(),
        number(),
        number(),
        0u8..12,
    )
}

fn dynamo_lines(ids: &[String], picks: &[DynamoPick]) -> Vec<u8> {
    let mut out = String::new();
    for (pick, wrapped, received, ttft, itl, total, shape) in picks {
        let key = match ids.get(pick % (ids.len() + 3)) {
            Some(id) => format!(r#""x_request_id":{},"#, serde_json::to_string(id).unwrap()),
            None if pick % 2 == 0 => String::new(),
            None => r#""x_request_id":"unknown","#.to_owned(),
        };
        let record = match shape {
            0 => r#"{"event_type":"tool_end","tool":{"tool_call_id":"t"}}"#.to_owned(),
            1 => r#"{"event_type":"request_end"}"#.to_owned(),
            2 => format!(r#"{{"event_type":"request_end","request":{{{key}"request_id":7}}}}"#),
            _ => format!(
                r#"{{"schema":"dynamo.request.trace.v1","event_type":"request_end","request":{{"request_id":"cmpl-{pick}",{key}"request_received_ms":{received},"ttft_ms":{ttft},"avg_itl_ms":{itl},"total_time_ms":{total},"kv_hit_rate":0.5}}}}"#
            ),
        };
        if *wrapped {
            out.push_str(&format!(r#"{{"timestamp":1,"event":{record}}}"#));
        } else {
            out.push_str(&record);
        }
        out.push('\n');
    }
    out.into_bytes()
}

/// One generated vllm-bench entry: TTFT, inter-token latencies, output tokens, failed.
type BenchPick = (String, Vec<String>, u64, bool);

fn bench_entry() -> impl Strategy<Value = BenchPick> {
    (
        number(),
        prop::collection::vec(number(), 0..4),
        0u64..6,
        prop::bool::weighted(0.2),
    )
}

fn bench_document(entries: &[BenchPick], duration: &str, cut_one: bool) -> Vec<u8> {
    let ttfts: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    let itls: Vec<String> = entries
        .iter()
        .map(|e| format!("[{}]", e.1.join(",")))
        .collect();
    let mut lens: Vec<String> = entries.iter().map(|e| e.2.to_string()).collect();
    if cut_one {
        lens.pop();
    }
    let errors: Vec<&str> = entries
        .iter()
        .map(|e| if e.3 { "\"HTTP 500\"" } else { "\"\"" })
        .collect();
    format!(
        r#"{{"duration":{duration},"ttfts":[{}],"itls":[{}],"output_lens":[{}],"errors":[{}],"input_lens":[]}}"#,
        ttfts.join(","),
        itls.join(","),
        lens.join(","),
        errors.join(",")
    )
    .into_bytes()
}

fn run_ids(receipt: &[u8], policy: usize) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_slice(receipt).unwrap();
    value["runs"][policy]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request"].as_str().unwrap().to_owned())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn core_and_oracle_agree_on_generated_dynamo_joins(
        seed in 0u64..1_000,
        picks in prop::collection::vec(dynamo_line(), 0..24),
        policy in 0usize..4,
        ttft_us in prop::option::of(objective_us()),
        with_trace in any::<bool>(),
    ) {
        let trace = TraceRecipe::from_seed(seed).build_bytes();
        let receipt = kvroute_core::replay_bytes(&trace).unwrap();
        let completions = dynamo_lines(&run_ids(&receipt, policy), &picks);
        for format in [Some(CompletionsFormat::Dynamo), None] {
            assert_same(&Case {
                receipt: &receipt,
                completions: &completions,
                format,
                run: Policy::STANDARD[policy],
                slo: Some(Slo { ttft_us, tpot_us: Some(10_000) }),
                trace: with_trace.then_some(&trace[..]),
            });
        }
    }

    #[test]
    fn core_and_oracle_agree_on_generated_vllm_bench_joins(
        seed in 0u64..1_000,
        entries in prop::collection::vec(bench_entry(), 0..40),
        duration in number(),
        cut_one in prop::bool::weighted(0.1),
        policy in 0usize..4,
        with_trace in any::<bool>(),
    ) {
        let trace = TraceRecipe::from_seed(seed).build_bytes();
        let receipt = kvroute_core::replay_bytes(&trace).unwrap();
        let completions = bench_document(&entries, &duration, cut_one);
        for format in [Some(CompletionsFormat::VllmBench), None] {
            assert_same(&Case {
                receipt: &receipt,
                completions: &completions,
                format,
                run: Policy::STANDARD[policy],
                slo: Some(SLO),
                trace: with_trace.then_some(&trace[..]),
            });
        }
    }
}

/// `--trace` naming another trace than the receipt's: both sides refuse it with the two
/// digests (SPEC.md §14.5, 5), whatever the layout.
#[test]
fn core_and_oracle_agree_on_a_trace_that_is_not_the_receipts() {
    let receipt = kvroute_core::replay_bytes(kvroute_core::LAB_TRACE_JSON.as_bytes()).unwrap();
    let other: &[u8] = include_bytes!("../../fixtures/arrival_order/trace.json");
    for (completions, format) in FIXTURES {
        let case = Case {
            receipt: &receipt,
            completions,
            format: Some(format),
            run: Policy::CachePlusLoad,
            slo: None,
            trace: Some(other),
        };
        assert!(
            matches!(core_join(&case), Err(JoinFailure::TraceDigest { .. })),
            "{:?}",
            core_join(&case)
        );
        assert_same(&case);
    }
}
