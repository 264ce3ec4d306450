//! SPEC.md §8, the worked example, asserted number by number against core. The
//! figures here were computed by hand in SPEC.md, not copied from an output.

use serde_json::Value;

fn receipt(trace: &Value) -> Value {
    let bytes = kvroute_core::replay_bytes(trace.to_string().as_bytes()).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn example() -> Value {
    serde_json::from_slice(&kvroute_harness::fixtures::trace_bytes("spec_example")).unwrap()
}

fn row<'a>(decision: &'a Value, worker: &str) -> &'a Value {
    decision["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["worker"] == worker)
        .unwrap()
}

#[test]
fn rows_decisions_and_metrics_match_the_hand_computation() {
    let r = receipt(&example());
    let runs = r["runs"].as_array().unwrap();
    let d = &runs[3]["decisions"][0];
    let w0 = row(d, "w0");
    assert_eq!(
        (
            &w0["reuse"],
            &w0["recomputed"],
            &w0["queued_prefill"],
            &w0["active_decode"]
        ),
        (
            &Value::from(1024),
            &Value::from(176),
            &Value::from(1000),
            &Value::from(0)
        )
    );
    assert_eq!(w0["work_milli"], 1_000_000);
    assert_eq!(w0["after_milli"], 1_276_000);
    assert_eq!(w0["cost_milli"], 1_176_000);
    let w1 = row(d, "w1");
    assert_eq!(w1["reasons"], serde_json::json!(["tenant_mismatch"]));
    assert_eq!(w1["after_milli"], 1_300_000);
    assert_eq!(w1["cost_milli"], 1_206_000);
    assert_eq!(w1["dominated_by"], "w0");
    assert_eq!(w1["dominated_count"], 1);
    let w2 = row(d, "w2");
    assert_eq!(w2["eligible"], false);
    assert_eq!(w2["reasons"], serde_json::json!(["model_not_served"]));
    assert_eq!(w2["cost_milli"], 1_206_000);
    assert_eq!(w2["dominated_by"], serde_json::Value::Null);
    assert_eq!(w2["dominated_count"], 0);

    let expected = [
        ("round_robin", "w0", "hit", 0, 1176, 0),
        ("least_load", "w1", "cold", 1_000_000, 1200, 1),
        ("longest_prefix", "w0", "hit", 1_024_000, 1176, 0),
        ("cache_plus_load", "w0", "hit", 30_000, 1176, 0),
    ];
    for (run, (policy, chosen, kind, margin, latency, dominated)) in runs.iter().zip(expected) {
        let d = &run["decisions"][0];
        assert_eq!(run["policy"], policy);
        assert_eq!(d["chosen"], chosen, "{policy}");
        assert_eq!(d["route_kind"], kind, "{policy}");
        assert_eq!(d["tie_count"], 1, "{policy}");
        assert_eq!(d["margin_milli"], margin, "{policy}");
        assert_eq!(
            run["metrics"]["latency_proxy_p95_milli"], latency,
            "{policy}"
        );
        assert_eq!(run["metrics"]["dominated_choices"], dominated, "{policy}");
        assert_eq!(run["metrics"]["boundary_rejections"], 1, "{policy}");
    }
    assert_eq!(runs[3]["metrics"]["load_skew_milli"], 3000);
}

#[test]
fn the_capped_variant_escapes_to_the_least_after() {
    let mut trace = example();
    trace["policy"]["max_queued_work"] = Value::from(1270);
    let r = receipt(&trace);
    let run = &r["runs"][3];
    let d = &run["decisions"][0];
    assert_eq!(d["chosen"], "w0");
    assert_eq!(d["route_kind"], "overload_escape");
    assert_eq!(d["tie_count"], 1);
    assert_eq!(d["margin_milli"], 24_000);
    assert_eq!(row(d, "w0")["reasons"], serde_json::json!(["overloaded"]));
    assert_eq!(
        row(d, "w1")["reasons"],
        serde_json::json!(["tenant_mismatch", "overloaded"])
    );
    for worker in ["w0", "w1", "w2"] {
        assert_eq!(row(d, worker)["dominated_by"], serde_json::Value::Null);
        assert_eq!(row(d, worker)["dominated_count"], 0);
    }
    assert_eq!(run["metrics"]["overload_escapes"], 1);
    // The cap belongs to cache_plus_load alone.
    assert_eq!(r["runs"][2]["decisions"][0]["route_kind"], "hit");
}
