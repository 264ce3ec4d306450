//! Attribution (SPEC.md §14.7) computed twice: core's join against the oracle's, on
//! generated receipts whose workers carry Dynamo's names, so that a record's serving
//! worker can be the chosen one, another worker of the fleet or one outside it, and
//! on records in both layouts that carry the cached figure (absent, null, zero, below,
//! at and above the prompt). The documents and the gates' lines must be the same.

use kvroute_core::join::CompletionsFormat;
use kvroute_core::Policy;
use kvroute_harness::generators::TraceRecipe;
use kvroute_harness::join::{compare_gate_lines, compare_join, JoinCase};
use proptest::prelude::*;
use serde_json::Value;

/// The generated trace with every worker renamed as §13.7 names Dynamo's workers
/// (`dynamo|<id>|dp<rank>`), one of them on rank 1.
fn dynamo_named(seed: u64) -> Vec<u8> {
    let mut trace = TraceRecipe::from_seed(seed).build();
    let rename = |id: &str| -> String {
        let digits: String = id.chars().filter(char::is_ascii_digit).collect();
        let rank = u8::from(digits == "2");
        format!("dynamo|{digits}|dp{rank}")
    };
    for worker in trace["workers"].as_array_mut().unwrap() {
        let id = worker["id"].as_str().unwrap().to_owned();
        worker["id"] = Value::from(rename(&id));
    }
    for event in trace["events"].as_array_mut().unwrap() {
        if let Some(id) = event.get("worker").and_then(Value::as_str) {
            let renamed = rename(id);
            event["worker"] = Value::from(renamed);
        }
    }
    serde_json::to_vec(&trace).unwrap()
}

/// One generated record: which id, whether it completed, its cached figure (`None`:
/// absent; `Some(None)`: null), the serving worker's id and rank (`None`: no worker),
/// and whether the Dynamo line is wrapped as the file sink writes it.
type RecordPick = (
    usize,
    bool,
    Option<Option<u64>>,
    Option<(u64, Option<u64>)>,
    bool,
);

fn record() -> impl Strategy<Value = RecordPick> {
    (
        0usize..64,
        prop::bool::weighted(0.85),
        prop::option::weighted(0.85, prop::option::weighted(0.9, 0u64..3_000)),
        prop::option::weighted(
            0.7,
            (
                prop_oneof![4 => 0u64..4, 1 => Just(10u64), 1 => Just(99u64)],
                prop::option::of(0u64..2),
            ),
        ),
        any::<bool>(),
    )
}

fn id_of(ids: &[String], pick: usize) -> String {
    match ids.get(pick % (ids.len() + 1)) {
        Some(id) => serde_json::to_string(id).unwrap(),
        None => "\"unknown\"".to_owned(),
    }
}

fn dynamo_lines(ids: &[String], picks: &[RecordPick]) -> Vec<u8> {
    let mut out = String::new();
    for (n, (pick, completed, cached, worker, wrapped)) in picks.iter().enumerate() {
        let id = id_of(ids, *pick);
        let mut request = format!(
            r#"{{"request_id": "dyn-{n}", "x_request_id": {id}, "request_received_ms": {}"#,
            1_000 + n
        );
        if *completed {
            request.push_str(r#", "ttft_ms": 12.5, "avg_itl_ms": 3, "total_time_ms": 40"#);
        }
        match cached {
            Some(Some(tokens)) => request.push_str(&format!(r#", "cached_tokens": {tokens}"#)),
            Some(None) => request.push_str(r#", "cached_tokens": null"#),
            None => {}
        }
        if let Some((worker, rank)) = worker {
            let rank = rank.map_or(String::new(), |r| format!(r#", "prefill_dp_rank": {r}"#));
            request.push_str(&format!(
                r#", "worker": {{"prefill_worker_id": {worker}{rank}, "decode_worker_id": 5}}"#
            ));
        }
        request.push('}');
        let record = format!(r#"{{"event_type": "request_end", "request": {request}}}"#);
        if *wrapped {
            out.push_str(&format!(r#"{{"timestamp": {n}, "event": {record}}}"#));
        } else {
            out.push_str(&record);
        }
        out.push('\n');
    }
    out.into_bytes()
}

fn aiperf_lines(ids: &[String], picks: &[RecordPick]) -> Vec<u8> {
    let mut out = String::new();
    for (n, (pick, completed, cached, _, _)) in picks.iter().enumerate() {
        let id = id_of(ids, *pick);
        let mut metrics = String::from(r#""time_to_first_token": {"value": 7.25, "unit": "ms"}"#);
        if *completed {
            metrics.push_str(r#", "inter_token_latency": {"value": 2, "unit": "ms"}"#);
        }
        if let Some(Some(tokens)) = cached {
            metrics.push_str(&format!(
                r#", "usage_prompt_cache_read_tokens": {{"value": {tokens}, "unit": "tokens"}}"#
            ));
        }
        out.push_str(&format!(
            r#"{{"metadata": {{"x_request_id": {id}, "request_start_ns": {n}}}, "metrics": {{{metrics}}}, "error": null}}"#
        ));
        out.push('\n');
    }
    out.into_bytes()
}

fn request_ids(receipt: &[u8]) -> Vec<String> {
    let value: Value = serde_json::from_slice(receipt).unwrap();
    value["runs"][0]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["request"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_same(case: &JoinCase, gates: (Option<u64>, Option<u64>), completions: &[u8]) {
    let show = || String::from_utf8_lossy(completions).into_owned();
    if let Err(difference) = compare_join(case) {
        panic!("{difference}\n  completions:\n{}", show());
    }
    if let Err(difference) = compare_gate_lines(case, gates.0, gates.1) {
        panic!("{difference}\n  completions:\n{}", show());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn core_and_oracle_attribute_alike(
        seed in 0u64..1_000,
        picks in prop::collection::vec(record(), 0..20),
        policy in 0usize..4,
        dynamo in any::<bool>(),
        cohorts in any::<bool>(),
        max_drift_pm in prop::option::of(0u64..=1000),
        max_elsewhere_pm in prop::option::of(0u64..=1000),
    ) {
        let trace = dynamo_named(seed);
        let receipt = kvroute_core::replay_bytes(&trace).unwrap();
        let ids = request_ids(&receipt);
        let (completions, format) = if dynamo {
            (dynamo_lines(&ids, &picks), CompletionsFormat::Dynamo)
        } else {
            (aiperf_lines(&ids, &picks), CompletionsFormat::Aiperf)
        };
        let case = JoinCase {
            receipt: &receipt,
            completions: &completions,
            format: Some(format),
            run: Policy::STANDARD[policy],
            slo: None,
            trace: cohorts.then_some(&trace[..]),
        };
        assert_same(&case, (max_drift_pm, max_elsewhere_pm), &completions);
    }
}

/// The attribution members the generated records must make above 0.
const REACHED: [&str; 10] = [
    "served_elsewhere",
    "served_outside_fleet",
    "served_unknown",
    "phantom",
    "missed",
    "workload",
    "routing_paid_for_load",
    "routing_other",
    "elsewhere_lost",
    "elsewhere_gained",
];

/// The generator reaches every case the proptest above should: records served on the
/// chosen worker, elsewhere in the fleet and outside it, and drift, so that agreement
/// is not agreement on empty attribution.
#[test]
fn the_generated_records_reach_every_part() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..40u64 {
        let trace = dynamo_named(seed);
        let receipt = kvroute_core::replay_bytes(&trace).unwrap();
        let ids = request_ids(&receipt);
        if ids.is_empty() {
            continue;
        }
        let picks: Vec<RecordPick> = (0..ids.len())
            .map(|i| {
                let worker = [
                    None,
                    Some((0, None)),
                    Some((2, Some(1))),
                    Some((99, Some(0))),
                ];
                (
                    i,
                    true,
                    Some(Some((i as u64 * 131) % 2_000)),
                    worker[i % 4],
                    i % 2 == 0,
                )
            })
            .collect();
        let completions = dynamo_lines(&ids, &picks);
        for run in Policy::STANDARD {
            let case = JoinCase {
                receipt: &receipt,
                completions: &completions,
                format: Some(CompletionsFormat::Dynamo),
                run,
                slo: None,
                trace: None,
            };
            let document = compare_join(&case).unwrap().expect("the join succeeds");
            let document: Value = serde_json::from_slice(&document).unwrap();
            let attribution = &document["attribution"];
            for part in REACHED {
                if attribution[part].as_u64().unwrap_or(0) > 0 {
                    seen.insert(part);
                }
            }
        }
    }
    let missing: Vec<&str> = REACHED
        .into_iter()
        .filter(|part| !seen.contains(part))
        .collect();
    assert!(
        missing.is_empty(),
        "never reached: {missing:?} (reached {seen:?})"
    );
}
