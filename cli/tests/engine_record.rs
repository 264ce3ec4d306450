//! `kvroute record` against a real ZeroMQ publisher: `engine_events/engines.py`
//! binds a PUB socket on loopback with pyzmq and publishes, with msgspec, the
//! messages vLLM 0.26.0 would (SPEC.md §13.1); `record` captures them, `import
//! vllm-events` converts the capture and `replay` routes it.
//!
//! The publisher needs a Python virtual environment with the pinned pyzmq and msgspec
//! (`engine_events/requirements.txt`), named by `KVROUTE_ENGINE_VENV`; `.ci/run
//! engines` builds one. Without it the test says so and passes, unless
//! `KVROUTE_REQUIRE_ENGINE_VENV=1` (set by that stage), where a missing environment
//! is a failure: in CI the test must run.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const DIR: &str = "tests/engine_events";

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

/// The virtual environment's Python, or `None` (after saying why) when the test is to
/// be skipped.
fn venv_python() -> Option<PathBuf> {
    let required = std::env::var("KVROUTE_REQUIRE_ENGINE_VENV").is_ok_and(|v| v == "1");
    let python = std::env::var_os("KVROUTE_ENGINE_VENV")
        .map(|venv| Path::new(&venv).join("bin/python"))
        .filter(|python| python.exists());
    if python.is_none() {
        let why = "no Python environment with pyzmq and msgspec: set KVROUTE_ENGINE_VENV \
                   to a venv made from cli/tests/engine_events/requirements.txt \
                   (`bash .ci/run engines` does)";
        assert!(!required, "KVROUTE_REQUIRE_ENGINE_VENV=1, but {why}");
        eprintln!("skipped: {why}");
    }
    python
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a loopback port")
}

fn payloads(capture: &[u8]) -> Vec<(u64, String)> {
    String::from_utf8_lossy(capture)
        .lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                line["seq"].as_u64().unwrap(),
                line["payload_b64"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_real_publisher_is_recorded_imported_and_replayed() {
    let Some(python) = venv_python() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    // The recorder first: its SUB socket waits for the publisher to bind, and the
    // publisher waits a second after binding, so no message goes out unheard.
    let recorder = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["record", &endpoint, "-o", capture.to_str().unwrap()])
        .args(["--count", "5", "--seconds", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvroute record starts");
    let published = Command::new(&python)
        .args([&format!("{DIR}/engines.py"), "publish", &endpoint, "1"])
        .output()
        .expect("the publisher runs");
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let recorded = recorder.wait_with_output().unwrap();
    let note = String::from_utf8_lossy(&recorded.stderr);
    assert_eq!(recorded.status.code(), Some(0), "{note}");
    assert!(
        note.starts_with("recorded 5 messages from 1 endpoints"),
        "{note}"
    );

    // The same messages as the committed capture, which engines.py writes from the
    // same script: only the endpoint differs.
    let committed = std::fs::read(format!("{DIR}/vllm.capture.jsonl")).unwrap();
    assert_eq!(
        payloads(&std::fs::read(&capture).unwrap()),
        payloads(&committed)
    );

    let trace = scratch.path().join("trace.json");
    let imported = kvroute(&[
        "import",
        "vllm-events",
        capture.to_str().unwrap(),
        "--requests",
        &format!("{DIR}/requests.jsonl"),
        "-o",
        trace.to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&imported.stderr);
    assert_eq!(imported.status.code(), Some(0), "{report}");
    assert!(
        report.contains("publishers: 1 restarts, 1 sequence gaps"),
        "{report}"
    );
    let replayed = kvroute(&["replay", trace.to_str().unwrap()]);
    assert_eq!(replayed.status.code(), Some(0));
    let table = String::from_utf8_lossy(&replayed.stdout);
    // One hit of 48 reused tokens, as the committed capture gives (engine_events.rs).
    let row = table
        .lines()
        .find(|l| l.starts_with("cache_plus_load"))
        .unwrap();
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&columns[1..5], ["2", "0", "1", "48"], "{table}");
}

#[test]
fn a_recording_that_hears_nothing_keeps_an_empty_capture_when_its_time_is_up() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let out = kvroute(&[
        "record",
        &endpoint,
        "-o",
        capture.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&capture).unwrap(), b"");
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("recorded 0 messages from 1 endpoints")
    );
}

#[test]
fn an_endpoint_that_is_no_zeromq_address_exits_2_and_writes_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let out = kvroute(&[
        "record",
        "nonsense://x",
        "-o",
        capture.to_str().unwrap(),
        "--seconds",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "nonsense://x: cannot subscribe: Endpoint Error: Unknown transport type nonsense\n"
    );
    assert!(!capture.exists());
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        0,
        "no temporary file left"
    );
}

#[test]
fn the_first_sigint_stops_the_recording_and_keeps_the_capture() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "record",
            &endpoint,
            "-o",
            capture.to_str().unwrap(),
            "--seconds",
            "60",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Recording has begun once its temporary file exists (SPEC.md §7): by then the
    // first signal is a request to stop.
    let started = std::time::Instant::now();
    while std::fs::read_dir(scratch.path()).unwrap().count() == 0 {
        assert!(started.elapsed().as_secs() < 30, "record never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: `kill` only sends a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&capture).unwrap(),
        b"",
        "kept, with the nothing it heard"
    );
    assert_eq!(
        std::fs::read_dir(scratch.path()).unwrap().count(),
        1,
        "no temporary file left"
    );
}
