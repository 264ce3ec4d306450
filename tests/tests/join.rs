//! `join` (SPEC.md §14) computed twice: core's against the oracle's, written from SPEC
//! alone, on the hand-checked fixture and on generated receipts and completion records
//! (dropped, retried, cancelled, failed, unknown and rejected-but-served requests,
//! milliseconds written every way JSON allows, and lines that are not the layout). The
//! document's bytes, or the errors, must be the same.

use kvroute_core::join::CompletionsFormat;
use kvroute_core::join::Slo;
use kvroute_core::Policy;
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::join::{compare_join, objective_us, JoinCase};
use proptest::prelude::*;

fn assert_same(receipt: &[u8], completions: &[u8], run: Policy, slo: Option<Slo>) {
    let case = JoinCase {
        receipt,
        completions,
        // The generated lines include ones of no layout: named, never detected.
        format: Some(CompletionsFormat::Aiperf),
        run,
        slo,
        trace: None,
    };
    if let Err(difference) = compare_join(&case) {
        panic!(
            "{difference}\n  completions:\n{}",
            String::from_utf8_lossy(completions)
        );
    }
}

#[test]
fn core_and_oracle_agree_on_the_fixture() {
    let receipt = kvroute_core::replay_bytes(kvroute_core::LAB_TRACE_JSON.as_bytes()).unwrap();
    let completions = include_bytes!("../../fixtures/join/lab.completions.jsonl");
    for slo in [
        None,
        Some(Slo {
            ttft_us: Some(200_000),
            tpot_us: Some(20_000),
        }),
        Some(Slo {
            ttft_us: None,
            tpot_us: Some(9_000),
        }),
        Some(Slo {
            ttft_us: Some(0),
            tpot_us: None,
        }),
        // acme-08 exactly at both objectives, then one microsecond over TTFT's.
        Some(Slo {
            ttft_us: Some(400_250),
            tpot_us: Some(15_999),
        }),
        Some(Slo {
            ttft_us: Some(400_249),
            tpot_us: Some(15_999),
        }),
    ] {
        for run in Policy::STANDARD {
            assert_same(&receipt, completions, run, slo);
        }
    }
}

/// What one generated line is: its kind (cancelled, failed, no TPOT, completed), start
/// and length in ns, TTFT and TPOT as written, and its shape (a few are broken).
type RecordPick = (u8, u64, u64, String, String, u8);

fn record_line() -> impl Strategy<Value = RecordPick> {
    (
        0u8..10,
        0u64..5_000_000_000,
        0u64..5_000_000_000,
        milliseconds(),
        milliseconds(),
        0u8..16,
    )
}

/// Milliseconds written every way JSON allows, with a few that are not milliseconds.
fn milliseconds() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..2_000, 0u64..1000).prop_map(|(w, f)| format!("{w}.{f:03}")),
        2 => (0u64..5_000).prop_map(|w| w.to_string()),
        1 => (1u64..999, -6i32..4).prop_map(|(m, e)| format!("{m}e{e}")),
        1 => (1u64..99, 0u32..20).prop_map(|(m, z)| format!("0.{}{m}", "0".repeat(z as usize))),
        1 => Just("-0".to_owned()),
        1 => Just("4.8984369999999995".to_owned()),
    ]
}

fn completions_for(ids: &[String], picks: &[(usize, RecordPick)]) -> Vec<u8> {
    let mut out = String::new();
    for (pick, (kind, start, length, ttft, tpot, shape)) in picks {
        let id = match ids.get(pick % (ids.len() + 2)) {
            Some(id) => serde_json::to_string(id).unwrap(),
            None => format!("\"unknown-{}\"", pick % 3),
        };
        let end = start + length;
        let metrics = format!(
            r#"{{"time_to_first_token": {{"value": {ttft}, "unit": "ms"}}, "inter_token_latency": {{"value": {tpot}, "unit": "ms"}}}}"#
        );
        let line = match kind {
            0 => format!(
                r#"{{"metadata": {{"x_request_id": {id}, "request_start_ns": {start}, "request_end_ns": null, "was_cancelled": true}}, "metrics": null, "error": {{"code": 499}}}}"#
            ),
            1 => format!(
                r#"{{"metadata": {{"x_request_id": {id}, "request_start_ns": {start}, "request_end_ns": {end}}}, "metrics": {{}}, "error": {{"code": 500}}}}"#
            ),
            2 => format!(
                r#"{{"metadata": {{"x_request_id": {id}, "request_start_ns": {start}}}, "metrics": {{"time_to_first_token": {{"value": {ttft}, "unit": "ms"}}}}}}"#
            ),
            _ => format!(
                r#"{{"metadata": {{"session_num": 1, "x_request_id": {id}, "request_start_ns": {start}, "request_end_ns": {end}, "was_cancelled": false}}, "metrics": {metrics}, "error": null}}"#
            ),
        };
        // Now and then a line that is not the layout, or a blank one.
        let line = match shape {
            0 => line.replacen(r#""unit": "ms""#, r#""unit": "s""#, 1),
            1 => line.replacen(r#""x_request_id": "#, r#""x_request_id": 7, "y": "#, 1),
            2 => String::new(),
            3 => line.replacen("\"metadata\"", "\"meta\"", 1),
            4 => line.replacen("\"metadata\": {", "\"metadata\": 3, \"metadata\": {", 1),
            5 => line
                .replacen(
                    r#""x_request_id": "#,
                    r#""x_request_id": 5, "x_request_id": "#,
                    1,
                )
                .replacen("\"metrics\": ", "\"metrics\": 1, \"metrics\": ", 1),
            6 => line
                .replacen(
                    r#""unit": "ms"}"#,
                    r#""unit": "ms", "value": "x", "unit": 2}"#,
                    1,
                )
                .replacen("\"metadata\"", "\"meta\"", 1),
            7 => line.replacen("\"error\": ", "\"error\": [], \"error\": ", 1),
            _ => line,
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn core_and_oracle_agree_on_generated_joins(
        seed in 0u64..1_000,
        picks in prop::collection::vec((0usize..64, record_line()), 0..24),
        policy in 0usize..4,
        ttft_us in prop::option::of(objective_us()),
        tpot_us in prop::option::of(objective_us()),
    ) {
        let receipt = kvroute_core::replay_bytes(&TraceRecipe::from_seed(seed).build_bytes()).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&receipt).unwrap();
        let ids: Vec<String> = value["runs"][0]["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["request"].as_str().unwrap().to_owned())
            .collect();
        let completions = completions_for(&ids, &picks);
        let slo = (ttft_us.is_some() || tpot_us.is_some()).then_some(Slo { ttft_us, tpot_us });
        assert_same(&receipt, &completions, Policy::STANDARD[policy], slo);
    }
}
