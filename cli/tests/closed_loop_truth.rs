//! The closed loop's completion records tell the engine's truth (SPEC.md §14.4,
//! §14.4.1): joined with the receipt of the trace each policy generated, the
//! attribution's phantom and missed sums equal simulate's own residency error for that
//! policy, every record is attributed, and in Dynamo's layout every record ran where it
//! was routed. On a prefix of the real Mooncake trace at 8 workers with loss and lag, so
//! that stale and lost events make both figures non-zero; `.ci/run`'s Mooncake stage
//! checks the whole trace.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const POLICIES: [&str; 4] = [
    "round_robin",
    "least_load",
    "longest_prefix",
    "cache_plus_load",
];

/// Mooncake requests in the test: enough for evictions, stale events and losses.
const MOONCAKE_LINES: usize = 1000;

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(output: Output) -> Vec<u8> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The first lines of the Mooncake trace, imported at 8 workers.
fn mooncake_prefix(dir: &Path) -> PathBuf {
    let mooncake = std::env::var("KVROUTE_MOONCAKE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../shared/traces/mooncake-conversation.jsonl")
        });
    let text = std::fs::read_to_string(&mooncake)
        .unwrap_or_else(|e| panic!("{}: {e} (set KVROUTE_MOONCAKE)", mooncake.display()));
    let lines: String = text
        .lines()
        .take(MOONCAKE_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    let jsonl = dir.join("m.jsonl");
    std::fs::write(&jsonl, lines).unwrap();
    let trace = dir.join("m.json");
    ok(kvroute(&["import", "mooncake", s(&jsonl), "-o", s(&trace)]));
    trace
}

/// Simulates `trace` with `extra` options, then joins each policy's records with the
/// receipt of its generated trace; returns simulate's document and the four joins.
fn simulate_and_join(
    dir: &Path,
    trace: &Path,
    extra: &[&str],
    format: &str,
) -> (Value, Vec<Value>) {
    let out = dir.join(format);
    let args = [
        &[
            "simulate",
            s(trace),
            "--workers",
            "8",
            "--loss",
            "100",
            "--lag",
            "10",
        ][..],
        extra,
        &[
            "--events-out",
            s(&out),
            "--completions-out",
            s(&out),
            "--format",
            "json",
        ],
    ]
    .concat();
    let document: Value = serde_json::from_slice(&ok(kvroute(&args))).unwrap();
    let joins = POLICIES
        .iter()
        .map(|policy| {
            let receipt = out.join(format!("{policy}.receipt.jsonl"));
            let generated = out.join(format!("{policy}.trace.json"));
            ok(kvroute(&[
                "replay",
                s(&generated),
                "--format",
                "jsonl",
                "--out",
                s(&receipt),
            ]));
            let completions = out.join(format!("{policy}.completions.jsonl"));
            let joined = ok(kvroute(&[
                "join",
                s(&receipt),
                s(&completions),
                "--run",
                policy,
                "--completions-format",
                format,
                "--format",
                "json",
            ]));
            serde_json::from_slice(&joined).unwrap()
        })
        .collect();
    (document, joins)
}

/// Per policy: the join's Σphantom and Σmissed equal simulate's, every routed record
/// is attributed, and the parts add up to the lost tokens.
fn assert_drift_is_the_truth(document: &Value, joins: &[Value]) -> u64 {
    let mut drift = 0;
    for (run, joined) in document["runs"].as_array().unwrap().iter().zip(joins) {
        let policy = run["policy"].as_str().unwrap();
        let a = &joined["attribution"];
        assert_eq!(a["phantom"], run["phantom"], "{policy}: phantom");
        assert_eq!(a["missed"], run["missed"], "{policy}: missed");
        assert_eq!(a["attributed"], run["routed"], "{policy}: attributed");
        assert_eq!(a["unknown"], 0, "{policy}");
        let part = |name: &str| a[name].as_i64().unwrap();
        let sum = part("workload")
            + part("boundary")
            + part("routing_paid_for_load")
            + part("routing_other")
            + part("elsewhere_lost")
            - part("elsewhere_gained")
            + part("phantom")
            - part("missed");
        assert_eq!(sum, part("lost_tokens"), "{policy}: the parts add up");
        drift += run["phantom"].as_u64().unwrap() + run["missed"].as_u64().unwrap();
    }
    drift
}

#[test]
fn dynamo_records_name_the_chosen_worker_and_attribute_the_same_truth() {
    let dir = tempfile::tempdir().unwrap();
    let trace = mooncake_prefix(dir.path());
    let extra = ["--worker-names", "dynamo", "--completions-format", "dynamo"];
    let (document, joins) = simulate_and_join(dir.path(), &trace, &extra, "dynamo");
    assert!(assert_drift_is_the_truth(&document, &joins) > 0);
    for joined in &joins {
        let a = &joined["attribution"];
        for served in ["served_elsewhere", "served_outside_fleet", "served_unknown"] {
            assert_eq!(a[served], 0, "{served}");
        }
        assert_eq!(
            (&a["elsewhere_lost"], &a["elsewhere_gained"]),
            (&Value::from(0), &Value::from(0))
        );
    }
}

#[test]
fn a_dynamo_layout_needs_workers_dynamo_can_name() {
    let dir = tempfile::tempdir().unwrap();
    let lab = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/lab/trace.json");
    let out = dir.path().join("out");
    let run = |extra: &[&str]| {
        kvroute(&[&["simulate", lab, "--completions-out", s(&out)][..], extra].concat())
    };
    let refused = run(&["--completions-format", "dynamo"]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&refused.stderr),
        "kvroute simulate: --completions-format dynamo: worker \"w0\" is not named \
         dynamo|<worker_id>|dp<rank>, so a Dynamo record cannot name it (give --workers N \
         --worker-names dynamo)\n"
    );
    assert!(!out.exists(), "a refused run writes nothing");
    let named = run(&[
        "--completions-format",
        "dynamo",
        "--workers",
        "3",
        "--worker-names",
        "dynamo",
    ]);
    assert!(
        named.status.success(),
        "{}",
        String::from_utf8_lossy(&named.stderr)
    );
    let records = std::fs::read_to_string(out.join("cache_plus_load.completions.jsonl")).unwrap();
    assert!(
        records
            .lines()
            .all(|l| l.contains(r#""prefill_dp_rank":0}}}}"#)),
        "{records}"
    );
    // Usage: --worker-names needs --workers, the layout needs --completions-out.
    for args in [
        &["simulate", lab, "--worker-names", "dynamo"][..],
        &["simulate", lab, "--completions-format", "dynamo"][..],
        &["simulate", lab, "--workers", "2", "--worker-names", "x"][..],
    ] {
        assert_eq!(kvroute(args).status.code(), Some(2), "{args:?}");
    }
}
