//! `kvroute simulate`'s issue-13 options end to end (SPEC.md §11): `--loss` in per mille
//! with its usage error, and `--stale-rule` / `--epochs`, which replace the simulated
//! trace's policy members and so show in its digest.

use std::path::Path;
use std::process::{Command, Output};

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn lab() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/lab/trace.json")
        .to_str()
        .unwrap()
        .to_owned()
}

fn document(extra: &[&str]) -> serde_json::Value {
    let lab = lab();
    let mut args = vec!["simulate", lab.as_str(), "--format", "json"];
    args.extend_from_slice(extra);
    let out = kvroute(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn loss_above_1000_per_mille_is_a_usage_error() {
    let lab = lab();
    let out = kvroute(&["simulate", &lab, "--loss", "1001"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "kvroute simulate: --loss 1001: expected a per-mille integer from 0 to 1000\n"
    );
    let out = kvroute(&["simulate", &lab, "--stale-rule", "newest"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn loss_and_policy_overrides_show_in_the_document() {
    let plain = document(&[]);
    assert_eq!(plain["options"]["loss_per_mille"], 0);
    for run in plain["runs"].as_array().unwrap() {
        assert_eq!(
            (run["lost"].as_u64(), run["resyncs"].as_u64()),
            (Some(0), Some(0))
        );
        assert!(run["missed"].is_u64());
    }
    let lossy = document(&["--loss", "1000"]);
    assert_eq!(lossy["options"]["loss_per_mille"], 1000);
    for run in lossy["runs"].as_array().unwrap() {
        // Every published event is lost: the router never hears of any residency.
        assert_eq!(
            run["lost"],
            run["stores"].as_u64().unwrap() + run["evicts"].as_u64().unwrap()
        );
        assert_eq!(run["reused"], 0);
    }
    let defaults = document(&["--stale-rule", "worker_epoch", "--epochs", "any"]);
    assert_eq!(defaults["trace_digest"], plain["trace_digest"]);
    let key_rule = document(&["--stale-rule", "key_epoch", "--epochs", "sequential"]);
    assert_ne!(key_rule["trace_digest"], plain["trace_digest"]);
}
