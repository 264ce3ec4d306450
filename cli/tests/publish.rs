//! `kvroute publish` (SPEC.md §17): its refusals, and every message it sends decoded by
//! vLLM 0.33.0's own `KVEventBatch` (`publish/vllm_subscriber.py` loads
//! `vllm/distributed/kv_events.py` from the pinned wheel with only its `vllm.*`
//! imports stubbed).
//!
//! The decoding test needs the engine-events virtual environment (pyzmq, msgspec:
//! `KVROUTE_ENGINE_VENV`) and the vLLM wheel (`KVROUTE_VLLM_WHEEL`); `.ci/run engines`
//! provides both and sets `KVROUTE_REQUIRE_ENGINE_VENV=1`, under which a missing one
//! fails the test instead of skipping it.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const TRACE: &str = "tests/publish/wire.trace.json";

/// How long a publisher waits for `record` to subscribe: its connection attempts are
/// retried on a timer, and a loaded machine (the whole suite on two cores) delays them.
const SUBSCRIBER_WAIT_MS: &str = "4000";

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_invalid_trace_is_refused_with_its_path_before_anything_is_bound() {
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("bad.json");
    std::fs::write(&path, b"{\"format\":\"kvroute-trace/1\"}").unwrap();
    let output = kvroute(&["publish", path.to_str().unwrap(), "--wait-ms", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(path.to_str().unwrap()),
        "{}",
        stderr(&output)
    );
    assert!(
        output.stdout.is_empty(),
        "nothing bound, no endpoint printed"
    );
}

#[test]
fn a_wire_that_names_no_cache_event_or_restarts_a_store_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    for (wire, says) in [
        (r#"{"lost":[8]}"#, "8 is not the seq of a cache event"),
        (r#"{"restart":[1]}"#, "event 1 is not a clear"),
        (r#"{"swap":[[1,2]]}"#, "not one worker's"),
        (r#"{"block_size":{"w0":24}}"#, "a multiple of 16"),
        (r#"{"drop":[1]}"#, "unknown field"),
    ] {
        let path = scratch.path().join("wire.json");
        std::fs::write(&path, wire).unwrap();
        let output = kvroute(&[
            "publish",
            TRACE,
            "--wire",
            path.to_str().unwrap(),
            "--wait-ms",
            "0",
        ]);
        assert_eq!(output.status.code(), Some(2), "{wire}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(says),
            "{wire}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn a_segment_that_is_not_one_block_is_refused_naming_its_event() {
    let mut trace: Value = serde_json::from_slice(&std::fs::read(TRACE).unwrap()).unwrap();
    trace["events"][0]["segments"][2]["tokens"] = 8.into();
    let scratch = tempfile::tempdir().unwrap();
    let path = scratch.path().join("partial.json");
    std::fs::write(&path, serde_json::to_vec(&trace).unwrap()).unwrap();
    let output = kvroute(&["publish", path.to_str().unwrap(), "--wait-ms", "0"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("event 1: segment \"a2\" has 8 tokens"),
        "{}",
        stderr(&output)
    );
}

/// The venv's Python and the vLLM wheel, or `None` (after saying why) to skip.
fn python_and_wheel() -> Option<(PathBuf, PathBuf)> {
    let required = std::env::var("KVROUTE_REQUIRE_ENGINE_VENV").is_ok_and(|v| v == "1");
    let python = std::env::var_os("KVROUTE_ENGINE_VENV")
        .map(|venv| PathBuf::from(venv).join("bin/python"))
        .filter(|p| p.exists());
    let wheel = std::env::var_os("KVROUTE_VLLM_WHEEL")
        .map(PathBuf::from)
        .filter(|p| p.exists());
    match (python, wheel) {
        (Some(python), Some(wheel)) => Some((python, wheel)),
        _ => {
            let why = "set KVROUTE_ENGINE_VENV (cli/tests/engine_events/requirements.txt) and \
                       KVROUTE_VLLM_WHEEL (the vllm 0.33.0 wheel); `bash .ci/run engines` does";
            assert!(!required, "KVROUTE_REQUIRE_ENGINE_VENV=1, but {why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// Two consecutive loopback ports nothing listens on now.
fn free_ports() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return port;
        }
    }
}

/// Publishes `TRACE` (with `extra` options) to vLLM's decoder; its lines by endpoint
/// order then seq.
fn decoded_by_vllm(python: &PathBuf, wheel: &PathBuf, count: usize, extra: &[&str]) -> Vec<Value> {
    let port = free_ports();
    let endpoints: Vec<String> = (0..2)
        .map(|i| format!("tcp://127.0.0.1:{}", port + i))
        .collect();
    let mut subscriber = Command::new(python)
        .arg("tests/publish/vllm_subscriber.py")
        .arg(wheel)
        .arg(count.to_string())
        .args(&endpoints)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the subscriber starts");
    let mut lines = BufReader::new(subscriber.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "subscribed");
    let mut args = vec![
        "publish",
        TRACE,
        "--port",
        &*Box::leak(port.to_string().into_boxed_str()),
    ];
    args.extend_from_slice(&["--wait-ms", "1500"]);
    args.extend_from_slice(extra);
    let published = kvroute(&args);
    assert!(published.status.success(), "{}", stderr(&published));
    let mut decoded: Vec<Value> = lines
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    assert!(
        subscriber.wait().unwrap().success(),
        "vLLM's decoder refused a message: {decoded:?}"
    );
    decoded.sort_by_key(|m| {
        (
            m["endpoint"].as_str().unwrap().to_string(),
            m["seq"].as_u64(),
        )
    });
    decoded
}

fn event(message: &Value, i: usize) -> (&str, &Value) {
    let pair = &message["events"][i];
    (pair[0].as_str().unwrap(), &pair[1])
}

#[test]
fn every_message_decodes_with_vllm_s_own_event_batch() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    let m = decoded_by_vllm(&python, &wheel, 7, &[]);
    assert_eq!(m.len(), 7);
    let seqs: Vec<u64> = m.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        [0, 1, 2, 0, 1, 2, 3],
        "each publisher numbers its messages from 0"
    );
    // w0: the chain a0..a2 as one run from the root, then the removal of a2.
    let (tag, stored) = event(&m[0], 0);
    assert_eq!(tag, "BlockStored");
    let chain = stored["block_hashes"].as_array().unwrap().clone();
    assert_eq!(chain.len(), 3);
    assert!(stored["parent_block_hash"].is_null());
    assert_eq!(stored["token_ids"].as_array().unwrap().len(), 48);
    assert_eq!(stored["block_size"], 16);
    assert_eq!(stored["medium"], "GPU");
    assert!(stored["lora_name"].is_null());
    assert_eq!(m[0]["rank"], 0);
    // vLLM 0.33.0 has no salt member: the tenant is the first block's extra key.
    assert_eq!(stored["extra_keys"], serde_json::json!([["t"], null, null]));
    let (tag, removed) = event(&m[1], 0);
    assert_eq!(
        (tag, &removed["block_hashes"][0]),
        ("BlockRemoved", &chain[2])
    );
    // w0's a0 under an adapter: the same tokens, another hash, the adapter named.
    let (_, adapted) = event(&m[2], 0);
    assert_eq!(adapted["lora_name"], "lora-x");
    assert_eq!(adapted["extra_keys"], serde_json::json!([["lora-x", "t"]]));
    assert_ne!(adapted["block_hashes"][0], chain[0]);
    assert_eq!(
        adapted["token_ids"].as_array().unwrap()[..],
        stored["token_ids"].as_array().unwrap()[..16]
    );
    // w1: a0 and b0 are two runs (b0 is not a0's child); the same key, the same hash.
    assert_eq!(m[3]["events"].as_array().unwrap().len(), 2);
    assert_eq!(event(&m[3], 0).1["block_hashes"][0], chain[0]);
    assert!(event(&m[3], 1).1["parent_block_hash"].is_null());
    // a1 alone names its parent a0; the 0-token segment of a0 is its removal.
    let (_, child) = event(&m[4], 0);
    assert_eq!(
        (&child["block_hashes"][0], &child["parent_block_hash"]),
        (&chain[1], &chain[0])
    );
    assert_eq!(
        event(&m[4], 1),
        (
            "BlockRemoved",
            &serde_json::json!({"type": "BlockRemoved", "block_hashes": [chain[0]], "medium": "GPU"})
        )
    );
    // Another tenant's a0 is another block; the clear is AllBlocksCleared.
    assert!(
        child.get("extra_keys").is_none_or(Value::is_null),
        "no salt below the root"
    );
    assert_ne!(event(&m[5], 0).1["block_hashes"][0], chain[0]);
    assert_eq!(event(&m[5], 0).1["extra_keys"], serde_json::json!([["u"]]));
    assert_eq!(event(&m[6], 0).0, "AllBlocksCleared");
}

#[test]
fn a_wrong_block_size_and_a_lost_message_reach_vllm_s_decoder_as_declared() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let wire = scratch.path().join("wire.json");
    std::fs::write(&wire, r#"{"block_size":{"w0":32},"lost":[4]}"#).unwrap();
    let m = decoded_by_vllm(&python, &wheel, 6, &["--wire", wire.to_str().unwrap()]);
    let first = m[0]["endpoint"].clone();
    let w0: Vec<&Value> = m.iter().filter(|line| line["endpoint"] == first).collect();
    let seqs: Vec<u64> = w0.iter().map(|m| m["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [0, 2], "the lost removal keeps its number 1");
    let (_, stored) = event(w0[0], 0);
    assert_eq!(stored["block_size"], 32);
    assert_eq!(
        stored["block_hashes"].as_array().unwrap().len(),
        1,
        "48 tokens are one whole block of 32"
    );
    assert_eq!(stored["token_ids"].as_array().unwrap().len(), 32);
}

/// A trace of `n` cache events on one worker: a store, then an eviction, of one block.
fn long_trace(n: usize) -> Value {
    let mut trace: Value = serde_json::from_slice(&std::fs::read(TRACE).unwrap()).unwrap();
    trace["limits"] = "scale".into();
    trace["workers"].as_array_mut().unwrap().truncate(1);
    let events: Vec<Value> = (0..n)
        .map(|i| {
            let mut event = serde_json::json!({"seq": i + 1, "tick": i + 1, "type": "cache",
                "worker": "w0", "epoch": 1, "tenant": "t", "model": "m", "adapter": "base"});
            let key = format!("k{}", i / 2);
            if i % 2 == 0 {
                event["op"] = "store".into();
                event["segments"] = serde_json::json!([{"key": key, "tokens": 16}]);
            } else {
                event["op"] = "evict".into();
                event["keys"] = serde_json::json!([key]);
            }
            event
        })
        .collect();
    trace["events"] = events.into();
    trace
}

#[test]
fn every_message_reaches_a_subscriber_before_the_sockets_close() {
    // `record` is the subscriber: a send only queues a message, so a publisher that
    // closed at once would lose the tail of the trace (with `--hold-ms 0`, 16,384 of
    // these 40,000 arrived). The hold is generous because a debug `record` on a
    // loaded machine drains slowly.
    let n = 40_000;
    let scratch = tempfile::tempdir().unwrap();
    let trace = scratch.path().join("long.json");
    std::fs::write(&trace, serde_json::to_vec(&long_trace(n)).unwrap()).unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let port = free_ports();
    let endpoint = format!("tcp://127.0.0.1:{port}");
    // The publisher first, and the recorder once it has printed its endpoint (bound):
    // a recorder started first retries its connection with a doubling backoff, and on
    // a loaded machine, where a debug `publish` takes seconds to read this trace, its
    // next try could come after the first messages went out to nobody. The wait after
    // binding covers the recorder's start.
    let mut publisher = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "publish",
            trace.to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .args(["--wait-ms", "5000", "--hold-ms", "10000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut printed = BufReader::new(publisher.stdout.take().unwrap()).lines();
    let bound = printed.next().unwrap().unwrap();
    assert_eq!(bound, format!("w0 {endpoint}"));
    let recorder = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "record",
            &endpoint,
            "--count",
            &n.to_string(),
            "--seconds",
            "60",
            "--out",
        ])
        .arg(&capture)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rest: Vec<String> = printed.map(Result::unwrap).collect();
    let published = publisher.wait_with_output().unwrap();
    assert!(published.status.success(), "{}", stderr(&published));
    assert_eq!(
        rest,
        [format!(
            "published {n} of {n} messages from 1 workers (0 lost, 0 restarts)"
        )]
    );
    let recorded = recorder.wait_with_output().unwrap();
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    let lines = std::fs::read_to_string(&capture).unwrap().lines().count();
    assert_eq!(lines, n, "every published message recorded");
}

/// Each cache event of `trace` as `(worker, what)`, the worker named by `worker_of`,
/// `what` its op and namespace (`store t/base`), a store's 0-token segment as the
/// removal it is (SPEC.md §3), and a run of equal neighbours as one: a store `publish`
/// splits into chains is still one run.
fn cache_runs(trace: &Value, worker_of: impl Fn(&str) -> String) -> Vec<(String, String)> {
    let mut runs: Vec<(String, String)> = Vec::new();
    for event in trace["events"].as_array().unwrap() {
        if event["type"] != "cache" {
            continue;
        }
        let worker = worker_of(event["worker"].as_str().unwrap());
        let namespace = || {
            let (tenant, adapter) = (&event["tenant"], &event["adapter"]);
            format!("{}/{}", tenant.as_str().unwrap(), adapter.as_str().unwrap())
        };
        let ops: Vec<String> = match event["op"].as_str().unwrap() {
            "clear" => vec!["clear".to_owned()],
            "store" => event["segments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| match s["tokens"].as_u64() {
                    Some(0) => format!("evict {}", namespace()),
                    _ => format!("store {}", namespace()),
                })
                .collect(),
            op => vec![format!("{op} {}", namespace())],
        };
        for op in ops {
            let run = (worker.clone(), op);
            if runs.last() != Some(&run) {
                runs.push(run);
            }
        }
    }
    runs
}

#[test]
fn a_published_trace_recorded_and_imported_keeps_each_store_s_tenant_and_adapter() {
    // The salt `publish` puts in the root block's `extra_keys` is read back as the
    // tenant (SPEC.md §13.4, *Extra keys*), so no store is left out and each keeps
    // the namespace the trace gave it: tenants "t" and "u", adapters base and lora-x.
    let scratch = tempfile::tempdir().unwrap();
    let counted = kvroute(&["publish", TRACE, "--wait-ms", "0", "--hold-ms", "0"]);
    let counted = String::from_utf8_lossy(&counted.stdout).to_string() + &stderr(&counted);
    let total = counted
        .split("published ")
        .nth(1)
        .and_then(|rest| rest.split(" of ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .expect("publish counts its messages")
        .to_owned();
    let port = free_ports();
    let endpoints = [port, port + 1].map(|p| format!("tcp://127.0.0.1:{p}"));
    let capture = scratch.path().join("capture.jsonl");
    let recorder = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("record")
        .args(&endpoints)
        .args(["--count", &total, "--seconds", "60", "--out"])
        .arg(&capture)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let published = kvroute(&[
        "publish",
        TRACE,
        "--port",
        &port.to_string(),
        "--wait-ms",
        SUBSCRIBER_WAIT_MS,
    ]);
    assert!(published.status.success(), "{}", stderr(&published));
    let recorded = recorder.wait_with_output().unwrap();
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    let requests = scratch.path().join("requests.jsonl");
    let tokens: Vec<u64> = (0..16).collect();
    let request = serde_json::json!({"arrival_ms": 1, "id": "r", "model": "m",
        "token_ids": tokens, "output_tokens": 1});
    std::fs::write(&requests, format!("{request}\n")).unwrap();
    let imported_path = scratch.path().join("imported.json");
    let imported = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["import", "vllm-events"])
        .arg(&capture)
        .arg("--requests")
        .arg(&requests)
        .arg("-o")
        .arg(&imported_path)
        .output()
        .unwrap();
    let report = stderr(&imported);
    assert!(imported.status.success(), "{report}");
    assert!(report.contains("0 extra keys"), "{report}");
    assert!(report.contains("0 unknown parent"), "{report}");
    assert!(report.contains(r#"salted: "#), "{report}");
    let original: Value = serde_json::from_slice(&std::fs::read(TRACE).unwrap()).unwrap();
    let trace: Value = serde_json::from_slice(&std::fs::read(&imported_path).unwrap()).unwrap();
    let by_endpoint = |id: &str| {
        let endpoint = id.split('|').next().unwrap();
        let i = endpoints.iter().position(|e| e == endpoint).unwrap();
        format!("w{i}")
    };
    assert_eq!(
        cache_runs(&trace, by_endpoint),
        cache_runs(&original, str::to_owned)
    );
}
