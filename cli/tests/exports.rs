//! Keyed request ids (`--id-key`, SPEC.md §6.5) and
//! spreadsheet-safe CSV ids (§6.3), end to end through the binary.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn lab_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json")
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

fn ok_stdout(out: Output) -> Vec<u8> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The lab request ids, from the trace.
fn lab_request_ids() -> Vec<String> {
    let trace: Value = serde_json::from_slice(&std::fs::read(lab_trace()).unwrap()).unwrap();
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "request")
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

fn key_file(dir: &Path, bytes: &[u8]) -> PathBuf {
    let path = dir.join("id.key");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The output of `kvroute replay TRACE --format FORMAT --id-key KEY`.
fn keyed_replay(trace: &Path, key: &Path, format: &str) -> Vec<u8> {
    ok_stdout(kvroute(&[
        "replay",
        s(trace),
        "--format",
        format,
        "--id-key",
        s(key),
    ]))
}

#[test]
fn a_keyed_receipt_is_the_plain_one_with_ids_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), b"a key the user holds\n");
    let trace = lab_trace();
    let plain: Value = serde_json::from_slice(&ok_stdout(kvroute(&[
        "replay",
        s(&trace),
        "--format",
        "json",
    ])))
    .unwrap();
    let keyed_bytes = keyed_replay(&trace, &key, "json");
    let keyed: Value = serde_json::from_slice(&keyed_bytes).unwrap();
    // Same trace digest; every decision identical but for its request id.
    assert_eq!(keyed["trace_digest"], plain["trace_digest"]);
    let key_bytes = std::fs::read(&key).unwrap();
    let mut expected = plain.clone();
    for run in expected["runs"].as_array_mut().unwrap() {
        for d in run["decisions"].as_array_mut().unwrap() {
            let id = d["request"].as_str().unwrap();
            d["request"] = Value::from(kvroute_core::output::keyed_id(&key_bytes, id));
        }
    }
    expected.as_object_mut().unwrap().remove("receipt_digest");
    let mut keyed_body = keyed.clone();
    keyed_body.as_object_mut().unwrap().remove("receipt_digest");
    assert_eq!(keyed_body, expected);
    assert_ne!(keyed["receipt_digest"], plain["receipt_digest"]);
    // No original id appears anywhere in the keyed bytes, in any format.
    let text = String::from_utf8(keyed_bytes).unwrap();
    let csv = keyed_replay(&trace, &key, "csv");
    let jsonl = keyed_replay(&trace, &key, "jsonl");
    let (csv, jsonl) = (
        String::from_utf8(csv).unwrap(),
        String::from_utf8(jsonl).unwrap(),
    );
    for id in lab_request_ids() {
        for (format, bytes) in [("json", &text), ("csv", &csv), ("jsonl", &jsonl)] {
            assert!(
                !bytes.contains(&format!("\"{id}\"")),
                "{format} reveals {id}"
            );
            assert!(!bytes.contains(&format!(",{id},")), "{format} reveals {id}");
        }
    }
    // The table prints no id: its rows and trace digest are unchanged, and its receipt
    // digest is the keyed receipt's.
    let table = |args: &[&str]| String::from_utf8(ok_stdout(kvroute(args))).unwrap();
    let keyed_table = table(&["replay", s(&trace), "--id-key", s(&key)]);
    let plain_table = table(&["replay", s(&trace)]);
    let without_receipt = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with("receipt"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(without_receipt(&keyed_table), without_receipt(&plain_table));
    assert!(keyed_table.contains(keyed["receipt_digest"].as_str().unwrap()));
}

#[test]
fn verify_round_trips_a_keyed_receipt_and_needs_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), b"k1");
    let other = dir.path().join("other.key");
    std::fs::write(&other, b"k2").unwrap();
    let trace = lab_trace();
    let receipt = dir.path().join("keyed.json");
    let out = kvroute(&[
        "replay",
        s(&trace),
        "--format",
        "json",
        "--id-key",
        s(&key),
        "--out",
        s(&receipt),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let verified = kvroute(&[
        "verify",
        "--trace",
        s(&trace),
        "--id-key",
        s(&key),
        s(&receipt),
    ]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    for args in [
        vec!["verify", "--trace", s(&trace), s(&receipt)],
        vec![
            "verify",
            "--trace",
            s(&trace),
            "--id-key",
            s(&other),
            s(&receipt),
        ],
    ] {
        let out = kvroute(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
    }
}

#[test]
fn an_empty_or_unreadable_key_is_bad_usage() {
    let dir = tempfile::tempdir().unwrap();
    let empty = key_file(dir.path(), b"");
    let missing = dir.path().join("missing.key");
    let trace = lab_trace();
    for (key, message) in [
        (&empty, format!("{}: the id key is empty\n", s(&empty))),
        (&missing, format!("{}: cannot read id key: ", s(&missing))),
    ] {
        for args in [
            vec!["replay", s(&trace), "--id-key", s(key)],
            vec!["replay", s(&trace), "--format", "csv", "--id-key", s(key)],
            vec![
                "verify",
                "--trace",
                s(&trace),
                "--id-key",
                s(key),
                s(&trace),
            ],
        ] {
            let out = kvroute(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(
                String::from_utf8_lossy(&out.stderr).starts_with(&message),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout.is_empty());
        }
    }
}

/// A one-worker trace whose request ids and worker id start with `lead`.
fn trace_with_ids(lead: &str) -> String {
    serde_json::json!({
        "format": "kvroute-trace/1",
        "workers": [ { "id": format!("{lead}w"), "model": "m", "adapters": [], "prefill_rate": 1,
            "decode_rate": 1, "queued_prefill": 0, "active_decode": 0, "observed_tick": 0,
            "epoch": 0, "cache": [] } ],
        "events": [ { "seq": 1, "tick": 1, "type": "request", "id": format!("{lead}SUM(A1)"),
            "tenant": "t", "model": "m", "adapter": "base", "prefix": [],
            "prompt_tokens": 5, "decode_tokens": 1 } ]
    })
    .to_string()
}

fn csv_records(bytes: &[u8]) -> Vec<csv::StringRecord> {
    csv::Reader::from_reader(bytes)
        .records()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn every_formula_trigger_is_defused_by_default_and_kept_with_csv_plain() {
    let dir = tempfile::tempdir().unwrap();
    for lead in ["=", "+", "-", "@", "\t", "\r"] {
        let path = dir.path().join("trace.json");
        std::fs::write(&path, trace_with_ids(lead)).unwrap();
        let safe = csv_records(&ok_stdout(kvroute(&[
            "replay",
            s(&path),
            "--format",
            "csv",
        ])));
        let plain = csv_records(&ok_stdout(kvroute(&[
            "replay",
            s(&path),
            "--format",
            "csv",
            "--csv-plain",
        ])));
        assert_eq!(safe.len(), 4, "one row per policy");
        for (safe, plain) in safe.iter().zip(&plain) {
            // request, chosen, worker: the id columns this trace fills.
            for column in [3, 4, 6] {
                assert_eq!(
                    &safe[column],
                    format!("'{}", &plain[column]),
                    "{lead:?} column {column}"
                );
                assert!(plain[column].starts_with(lead), "{lead:?}");
            }
            // Numbers and fixed words are never changed.
            for column in [1, 2, 9, 10, 11, 12, 13, 14, 15, 17] {
                assert_eq!(&safe[column], &plain[column], "{lead:?} column {column}");
            }
        }
    }
}

#[test]
fn ids_without_a_trigger_are_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json");
    std::fs::write(&path, trace_with_ids("a=")).unwrap();
    let safe = ok_stdout(kvroute(&["replay", s(&path), "--format", "csv"]));
    let plain = ok_stdout(kvroute(&[
        "replay",
        s(&path),
        "--format",
        "csv",
        "--csv-plain",
    ]));
    assert_eq!(safe, plain);
}

/// Two workers, one idle and one busy, and two requests: round robin sends the second
/// to the busy worker, least load to the idle one, so `diff` lists it.
fn differing_trace_with_ids(lead: &str) -> String {
    let worker = |name: &str, queued: u64| {
        serde_json::json!({ "id": format!("{lead}{name}"), "model": "m", "adapters": [],
            "prefill_rate": 100, "decode_rate": 10, "queued_prefill": queued,
            "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": [] })
    };
    let request = |seq: u64| {
        serde_json::json!({ "seq": seq, "tick": seq, "type": "request",
            "id": format!("{lead}SUM(A{seq})"), "tenant": "t", "model": "m",
            "adapter": "base", "prefix": [], "prompt_tokens": 5, "decode_tokens": 1 })
    };
    serde_json::json!({
        "format": "kvroute-trace/1",
        "workers": [worker("idle", 0), worker("busy", 100_000)],
        "events": [request(1), request(2)],
    })
    .to_string()
}

/// `diff --format csv` follows SPEC.md §6.3's rule for its id columns (`request` and
/// both chosen `worker`s), as `replay --format csv` does, and `--csv-plain` keeps them
/// as written: a spreadsheet would run an id that starts a formula.
#[test]
fn diff_csv_defuses_formula_triggers_unless_csv_plain() {
    let dir = tempfile::tempdir().unwrap();
    for lead in ["=", "+", "-", "@", "\t", "\r"] {
        let path = dir.path().join("trace.json");
        std::fs::write(&path, differing_trace_with_ids(lead)).unwrap();
        let diff = |plain: bool| {
            let mut args = vec![
                "diff",
                s(&path),
                "--baseline",
                "round_robin",
                "--candidate",
                "least_load",
                "--format",
                "csv",
            ];
            if plain {
                args.push("--csv-plain");
            }
            csv_records(&ok_stdout(kvroute(&args)))
        };
        let (safe, plain) = (diff(false), diff(true));
        assert!(
            !safe.is_empty(),
            "{lead:?}: the policies differ on a decision"
        );
        assert_eq!(safe.len(), plain.len());
        for (safe, plain) in safe.iter().zip(&plain) {
            // request, baseline_worker, candidate_worker.
            for column in [2, 3, 10] {
                assert!(plain[column].starts_with(lead), "{lead:?} column {column}");
                assert_eq!(&safe[column], format!("'{}", &plain[column]));
            }
            for column in [0, 1, 4, 5, 11, 12, 17, 18] {
                assert_eq!(&safe[column], &plain[column], "{lead:?} column {column}");
            }
        }
    }
}

/// `dominated_by` is an id column too (SPEC.md §6.3): the busy worker's row is
/// dominated by the idle one (the same reuse at less work), so its cell names
/// `{lead}idle`, defused by default: a test of the other columns alone would pass it raw.
#[test]
fn the_dominated_by_cell_is_defused_like_every_id() {
    let dir = tempfile::tempdir().unwrap();
    for lead in ["=", "@", "\t"] {
        let path = dir.path().join("trace.json");
        std::fs::write(&path, differing_trace_with_ids(lead)).unwrap();
        let replay = |plain: bool| {
            let mut args = vec!["replay", s(&path), "--format", "csv"];
            if plain {
                args.push("--csv-plain");
            }
            csv_records(&ok_stdout(kvroute(&args)))
        };
        let (safe, plain) = (replay(false), replay(true));
        let mut dominated = 0;
        for (safe, plain) in safe.iter().zip(&plain) {
            if !plain[16].is_empty() {
                dominated += 1;
                assert_eq!(plain[16], format!("{lead}idle"), "{lead:?}");
                assert_eq!(safe[16], format!("'{lead}idle"), "{lead:?}");
            }
        }
        assert!(dominated > 0, "{lead:?}: some row is dominated");
    }
}
