//! `kvroute record` against vLLM's own ZeroMQ publisher: `engine_events/engines.py`
//! runs vLLM 0.33.0's `ZmqEventPublisher`, its event classes and its replay socket,
//! all from `vllm/distributed/kv_events.py` in the pinned wheel (only its `vllm.*`
//! imports stubbed, `publish/vllm_kv_events.py`), binding on loopback; `record`
//! captures what it sends, `import vllm-events` converts the capture and `replay`
//! routes it. The fault cases run the same way: messages the PUB socket drops that
//! vLLM's replay socket answers (or no longer holds), and two publishers whose
//! batches arrive out of time order. Each capture is checked byte for byte against
//! what the publisher says it sent, and batch for batch against the committed
//! fixture of the same script, which `engine_events.rs` imports.
//!
//! The publisher needs a Python virtual environment with the pinned pyzmq and msgspec
//! (`engine_events/requirements.txt`), named by `KVROUTE_ENGINE_VENV`, and the vLLM
//! wheel (`publish/vllm-wheel.txt`), named by `KVROUTE_VLLM_WHEEL`; `.ci/run engines`
//! provides both. Without either the test says so and passes, unless
//! `KVROUTE_REQUIRE_ENGINE_VENV=1` (set by that stage), where a missing one is a
//! failure: in CI the test must run.

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

/// The virtual environment's Python and the vLLM wheel, or `None` (after saying why)
/// when the test is to be skipped.
fn python_and_wheel() -> Option<(PathBuf, PathBuf)> {
    let required = std::env::var("KVROUTE_REQUIRE_ENGINE_VENV").is_ok_and(|v| v == "1");
    let python = std::env::var_os("KVROUTE_ENGINE_VENV")
        .map(|venv| Path::new(&venv).join("bin/python"))
        .filter(|python| python.exists());
    let wheel = std::env::var_os("KVROUTE_VLLM_WHEEL")
        .map(PathBuf::from)
        .filter(|wheel| wheel.exists());
    match (python, wheel) {
        (Some(python), Some(wheel)) => Some((python, wheel)),
        _ => {
            let why = "set KVROUTE_ENGINE_VENV to a venv made from \
                       cli/tests/engine_events/requirements.txt and KVROUTE_VLLM_WHEEL to \
                       the vllm 0.33.0 wheel (cli/tests/publish/vllm-wheel.txt); \
                       `bash .ci/run engines` does";
            assert!(!required, "KVROUTE_REQUIRE_ENGINE_VENV=1, but {why}");
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a loopback port")
}

/// The last line of stderr: record's note, after any progress line a slow run shows.
fn last_line(stderr: &str) -> &str {
    stderr.lines().last().unwrap_or_default()
}

/// Each capture line's (seq, payload as base64).
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

/// What the test publisher printed: each message vLLM's publisher handed its PUB
/// socket, as (endpoint as bound, seq, payload as base64, sent live).
fn sent(published: &Output) -> Vec<(String, u64, String, bool)> {
    String::from_utf8_lossy(&published.stdout)
        .lines()
        .map(|line| {
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                line["endpoint"].as_str().unwrap().to_owned(),
                line["seq"].as_u64().unwrap(),
                line["payload_b64"].as_str().unwrap().to_owned(),
                line["live"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The (seq, payload) of the messages `sent` live, or of all of them.
fn sent_payloads(sent: &[(String, u64, String, bool)], only_live: bool) -> Vec<(u64, String)> {
    sent.iter()
        .filter(|s| s.3 || !only_live)
        .map(|s| (s.1, s.2.clone()))
        .collect()
}

/// Each (seq, payload) with its payload decoded from MessagePack: what a batch says,
/// whatever headers its encoder chose.
fn decoded(payloads: &[(u64, String)]) -> Vec<(u64, rmpv::Value)> {
    use base64::Engine as _;
    payloads
        .iter()
        .map(|(seq, payload)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(payload)
                .unwrap();
            let mut rest = bytes.as_slice();
            let value = rmpv::decode::read_value(&mut rest).unwrap();
            assert!(rest.is_empty(), "one value a payload");
            (*seq, value)
        })
        .collect()
}

#[test]
fn a_real_publisher_is_recorded_imported_and_replayed() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let port = free_port();
    let endpoint = format!("tcp://127.0.0.1:{port}");
    // vLLM's publisher binds a wildcard address and connects to any other.
    let (note, _, sent) = record_from(
        &python,
        &wheel,
        "publish",
        &[&format!("tcp://*:{port}"), "1"],
        &[&endpoint, "--count", "5"],
        &capture,
    );
    assert!(
        last_line(&note).starts_with("recorded 5 messages from 1 endpoints"),
        "{note}"
    );

    // Byte for byte what vLLM's publisher sent live: all but seq 3, lost on the way.
    let recorded = payloads(&std::fs::read(&capture).unwrap());
    assert_eq!(recorded, sent_payloads(&sent, true));
    let lost: Vec<u64> = sent.iter().filter(|s| !s.3).map(|s| s.1).collect();
    assert_eq!(lost, [3]);
    // The same batches as the committed capture, which engines.py writes from the same
    // script with vLLM 0.26.0's structs and engine_events.rs imports. Not the same
    // bytes: 0.33.0's BlockStored has four more optional members, so msgspec heads
    // each of its maps as a map16 where 0.26.0's had a fixmap (both of 11 entries).
    let committed = std::fs::read(format!("{DIR}/vllm.capture.jsonl")).unwrap();
    assert_eq!(decoded(&recorded), decoded(&payloads(&committed)));

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

/// What [`record_from`] returns: the recorder's note, the capture's lines, and what the
/// publisher says it sent ([`sent`]).
type Recorded = (
    String,
    Vec<serde_json::Value>,
    Vec<(String, u64, String, bool)>,
);

/// Starts `kvroute record` with `args`, runs the publisher `engines.py MODE WHEEL
/// PUBLISHER...` to its end, and returns what was recorded and sent.
fn record_from(
    python: &Path,
    wheel: &Path,
    mode: &str,
    publisher: &[&str],
    args: &[&str],
    capture: &Path,
) -> Recorded {
    // The recorder first: its sockets wait for the publisher to bind, and the
    // publisher waits a second after binding, so no message goes out unheard.
    let recorder = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("record")
        .args(args)
        .args(["-o", capture.to_str().unwrap(), "--seconds", "60"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvroute record starts");
    let published = Command::new(python)
        .arg(format!("{DIR}/engines.py"))
        .arg(mode)
        .arg(wheel)
        .args(publisher)
        .output()
        .expect("the publisher runs");
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let recorded = recorder.wait_with_output().unwrap();
    let note = String::from_utf8_lossy(&recorded.stderr).into_owned();
    assert_eq!(recorded.status.code(), Some(0), "{note}");
    let lines = String::from_utf8_lossy(&std::fs::read(capture).unwrap())
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    (note, lines, sent(&published))
}

/// `import vllm-events CAPTURE --requests chain.requests.jsonl`: its report, and the
/// trace it wrote, which must validate.
fn import_chain(capture: &Path) -> (String, PathBuf) {
    let trace = capture.with_extension("trace.json");
    let imported = kvroute(&[
        "import",
        "vllm-events",
        capture.to_str().unwrap(),
        "--requests",
        &format!("{DIR}/chain.requests.jsonl"),
        "-o",
        trace.to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&imported.stderr).into_owned();
    assert_eq!(imported.status.code(), Some(0), "{report}");
    let validated = kvroute(&["validate", trace.to_str().unwrap()]);
    assert_eq!(
        validated.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&validated.stderr)
    );
    (report, trace)
}

/// The tokens `cache_plus_load` reused when `kvroute replay` routes the trace.
fn reused_tokens(trace: &Path) -> String {
    let replayed = kvroute(&["replay", trace.to_str().unwrap()]);
    assert_eq!(replayed.status.code(), Some(0));
    let table = String::from_utf8_lossy(&replayed.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("cache_plus_load"))
        .unwrap();
    row.split_whitespace().nth(4).unwrap().to_owned()
}

/// Each capture line's sequence number, and whether it is marked replayed.
fn seqs(lines: &[serde_json::Value]) -> Vec<(u64, bool)> {
    lines
        .iter()
        .map(|l| {
            (
                l["seq"].as_u64().unwrap(),
                l.get("replayed").is_some_and(|r| r == true),
            )
        })
        .collect()
}

/// The trace's cache events as written, in `(tick, seq)` order (SPEC.md §6.1), each
/// as (worker's endpoint, tick, seq, epoch).
fn cache_events(trace: &Path) -> Vec<(String, u64, u64, u64)> {
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "cache")
        .map(|e| {
            let worker = e["worker"].as_str().unwrap();
            (
                worker.split('|').next().unwrap().to_owned(),
                e["tick"].as_u64().unwrap(),
                e["seq"].as_u64().unwrap(),
                e["epoch"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Records the test publisher's `replay` mode: six messages of which the PUB socket
/// drops 2 and 3 live, a replay socket answering from its buffer (`buffer`) or with its
/// end marker only (`end-only`), with or without the topic frame; `count` messages
/// are kept. The scratch directory, the capture's path, the PUB endpoint, and what
/// was recorded and sent.
fn record_replay(
    python: &Path,
    wheel: &Path,
    answer: &str,
    topic: &str,
    count: &str,
) -> (tempfile::TempDir, PathBuf, String, Recorded) {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let (pub_port, replay_port) = (free_port(), free_port());
    let endpoint = format!("tcp://127.0.0.1:{pub_port}");
    let pair = format!("{endpoint}=tcp://127.0.0.1:{replay_port}");
    // The replay tests wait up to 20 s for an answer, which its end marker ends at
    // once: a loaded machine must not turn a slow answer into an unfilled gap.
    let recorded = record_from(
        python,
        wheel,
        "replay",
        &[
            &format!("tcp://*:{pub_port}"),
            &format!("tcp://*:{replay_port}"),
            "2,3",
            answer,
            topic,
        ],
        &[
            &endpoint,
            "--replay",
            &pair,
            "--replay-wait-ms",
            "20000",
            "--count",
            count,
        ],
        &capture,
    );
    (scratch, capture, endpoint, recorded)
}

#[test]
fn messages_dropped_live_are_filled_from_the_replay_socket_so_the_import_sees_no_gap() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    // vLLM answers with the topic frame, older vLLM and SGLang without.
    for topic in ["with", "without"] {
        let (_scratch, capture, _, (note, lines, sent)) =
            record_replay(&python, &wheel, "buffer", topic, "6");
        assert!(
            note.ends_with(", 2 messages replayed, 0 of 1 gaps not filled\n"),
            "{topic}: {note}"
        );
        assert_eq!(
            seqs(&lines),
            [
                (0, false),
                (1, false),
                (2, true),
                (3, true),
                (4, false),
                (5, false)
            ],
            "{topic}: every number once, the two the PUB socket dropped from the replay"
        );
        // An answer without a topic takes the live message's: one publisher throughout.
        assert!(lines.iter().all(|l| l["topic"] == "kv-events"), "{topic}");
        // Byte for byte what vLLM's publisher made, the live ones and those its
        // replay buffer answered.
        let recorded = payloads(&std::fs::read(&capture).unwrap());
        assert_eq!(recorded, sent_payloads(&sent, false), "{topic}");
        let dropped: Vec<u64> = sent.iter().filter(|s| !s.3).map(|s| s.1).collect();
        assert_eq!(dropped, [2, 3], "{topic}");
        // The same batches as the committed fixture, which engines.py writes from the
        // same script with vLLM 0.26.0's structs (whose maps msgspec heads as fixmaps,
        // 0.33.0's as map16s).
        let committed = std::fs::read(format!("{DIR}/chain-replayed.capture.jsonl")).unwrap();
        assert_eq!(
            decoded(&recorded),
            decoded(&payloads(&committed)),
            "{topic}"
        );

        let (report, trace) = import_chain(&capture);
        assert!(
            report.contains("\npublishers: 0 restarts, 0 sequence gaps, 0 joined mid-stream\n"),
            "{topic}: {report}"
        );
        assert!(report.contains(" 0 unknown parent,"), "{topic}: {report}");
        let epochs: Vec<u64> = cache_events(&trace).iter().map(|e| e.3).collect();
        assert_eq!(epochs, [1, 2, 3, 4, 5, 6], "{topic}");
        // The whole six-block prompt was resident and trusted.
        assert_eq!(reused_tokens(&trace), "96", "{topic}");
    }
}

#[test]
fn a_replay_socket_that_no_longer_holds_the_messages_leaves_the_gap_reported() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    let (_scratch, capture, endpoint, (note, lines, sent)) =
        record_replay(&python, &wheel, "end-only", "with", "4");
    assert!(
        note.ends_with(", 0 messages replayed, 1 of 1 gaps not filled\n"),
        "{note}"
    );
    assert_eq!(
        seqs(&lines),
        [(0, false), (1, false), (4, false), (5, false)]
    );
    assert_eq!(
        payloads(&std::fs::read(&capture).unwrap()),
        sent_payloads(&sent, true),
        "what vLLM's publisher sent live"
    );
    let (report, trace) = import_chain(&capture);
    assert!(
        report.contains("\npublishers: 0 restarts, 1 sequence gaps, 0 joined mid-stream\n"),
        "{report}"
    );
    // Blocks 4 and 5 chain on the lost block 3, so neither can be keyed.
    assert!(report.contains(" 2 unknown parent,"), "{report}");
    assert!(
        report.contains(&format!(
            ":3: worker \"{endpoint}|kv-events|dp0\": sequence gap: seq 4 after 1\n"
        )),
        "{report}"
    );
    let epochs: Vec<u64> = cache_events(&trace).iter().map(|e| e.3).collect();
    assert_eq!(
        epochs,
        [1, 2],
        "epoch 3 was skipped; the left-out stores take none"
    );
    assert_eq!(
        reused_tokens(&trace),
        "32",
        "only the two blocks before the loss"
    );
}

/// Each recorded line as `(endpoint, seq, payload_b64)`.
fn recorded_by_endpoint(lines: &[serde_json::Value]) -> Vec<(String, u64, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["endpoint"].as_str().unwrap().to_owned(),
                l["seq"].as_u64().unwrap(),
                l["payload_b64"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Each message a publisher sent live as `(endpoint, seq, payload_b64)`, its bound
/// `tcp://*:PORT` named by the `host` a subscriber connects to.
fn sent_by_endpoint(
    sent: &[(String, u64, String, bool)],
    host: &str,
) -> Vec<(String, u64, String)> {
    sent.iter()
        .map(|(bound, seq, payload, live)| {
            assert!(live, "seq {seq} of {bound} was sent live");
            (bound.replace('*', host), *seq, payload.clone())
        })
        .collect()
}

#[test]
fn batches_two_publishers_sent_out_of_time_order_are_counted_and_replayed_by_time() {
    let Some((python, wheel)) = python_and_wheel() else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let (port_a, port_b) = (free_port(), free_port());
    let (a, b) = (
        format!("tcp://127.0.0.1:{port_a}"),
        format!("tcp://127.0.0.1:{port_b}"),
    );
    let (note, lines, sent) = record_from(
        &python,
        &wheel,
        "two-publishers",
        &[&format!("tcp://*:{port_a}"), &format!("tcp://*:{port_b}")],
        &[&a, &b, "--count", "4"],
        &capture,
    );
    assert!(
        last_line(&note).starts_with("recorded 4 messages from 2 endpoints"),
        "{note}"
    );
    let received: Vec<(&str, u64)> = lines
        .iter()
        .map(|l| (l["endpoint"].as_str().unwrap(), l["seq"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        received,
        [
            (a.as_str(), 0),
            (a.as_str(), 1),
            (b.as_str(), 0),
            (b.as_str(), 1)
        ]
    );
    // Byte for byte what each of vLLM's two publishers sent (A's, then B's).
    assert_eq!(
        recorded_by_endpoint(&lines),
        sent_by_endpoint(&sent, "127.0.0.1")
    );
    // The same batches as the committed fixture, written from the same script with
    // vLLM 0.26.0's structs (fixmaps where 0.33.0 writes map16s).
    let committed = std::fs::read(format!("{DIR}/two-publishers.capture.jsonl")).unwrap();
    assert_eq!(
        decoded(&payloads(&std::fs::read(&capture).unwrap())),
        decoded(&payloads(&committed))
    );
    let (report, trace) = import_chain(&capture);
    assert!(
        report.contains(
            "\norder: 0 earlier than its publisher's previous, 2 earlier than another publisher's before it\n"
        ),
        "{report}"
    );
    assert!(
        report.contains("\npublishers: 0 restarts, 0 sequence gaps, 0 joined mid-stream\n"),
        "{report}"
    );
    // B's batches were made 625 and 375 ms before A's last. The trace keeps each
    // batch's own time (origin: B's first) and gives seqs in the order received, so
    // in (tick, seq) order B's come first, and each worker's epochs stay in its
    // sequence order.
    assert_eq!(
        cache_events(&trace),
        [
            (b.clone(), 0, 3, 1),
            (b.clone(), 250, 4, 2),
            (a.clone(), 500, 1, 1),
            (a.clone(), 625, 2, 2)
        ]
    );
}

#[test]
fn a_replay_pair_naming_no_recorded_endpoint_or_no_zeromq_address_exits_2_and_writes_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    for (pairs, reason) in [
        (
            vec!["tcp://127.0.0.1:1=tcp://127.0.0.1:2"],
            "--replay tcp://127.0.0.1:1=tcp://127.0.0.1:2: \"tcp://127.0.0.1:1\" is not one of the endpoints to record\n",
        ),
        (
            vec!["tcp://127.0.0.1:9=tcp://127.0.0.1:2", "tcp://127.0.0.1:9=tcp://127.0.0.1:3"],
            "--replay tcp://127.0.0.1:9=tcp://127.0.0.1:3: \"tcp://127.0.0.1:9\" has a replay endpoint already\n",
        ),
        (
            vec!["tcp://127.0.0.1:9=nonsense://x"],
            "--replay tcp://127.0.0.1:9=nonsense://x: \"nonsense://x\" is no ZeroMQ address: Unknown transport type nonsense (record connects to tcp://HOST:PORT or ipc://PATH)\n",
        ),
        (
            vec!["tcp://127.0.0.1:9"],
            "--replay \"tcp://127.0.0.1:9\": expected ENDPOINT=REPLAY, an endpoint to record and its publisher's replay socket\n",
        ),
    ] {
        let mut args = vec!["record", "tcp://127.0.0.1:9", "-o", capture.to_str().unwrap()];
        for pair in &pairs {
            args.extend(["--replay", pair]);
        }
        let out = kvroute(&args);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(String::from_utf8_lossy(&out.stderr), reason);
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }
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
    assert!(last_line(&String::from_utf8_lossy(&out.stderr))
        .starts_with("recorded 0 messages from 1 endpoints"));
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
        "\"nonsense://x\" is no ZeroMQ address: Unknown transport type nonsense (record connects to tcp://HOST:PORT or ipc://PATH)\n"
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

#[test]
fn a_count_or_seconds_past_2_to_the_53_is_bad_usage_and_help_states_every_bound() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    for (option, value) in [
        ("--seconds", "18446744073709551615"),
        ("--seconds", "9007199254740992"),
        ("--count", "18446744073709551615"),
    ] {
        // The other stop condition ends a run that wrongly accepted the value.
        let other = if option == "--count" {
            "--seconds"
        } else {
            "--count"
        };
        let out = kvroute(&[
            "record",
            &endpoint,
            "-o",
            capture.to_str().unwrap(),
            option,
            value,
            other,
            "0",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(stderr.contains("0..=9007199254740991"), "{stderr}");
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }
    // The largest accepted is no panic: --count 0 ends the run at once.
    let out = kvroute(&[
        "record",
        &endpoint,
        "-o",
        capture.to_str().unwrap(),
        "--seconds",
        "9007199254740991",
        "--count",
        "0",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = kvroute(&["record", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for stated in [
        "Stop after this many messages (0 to 9007199254740991)",
        "Stop after this many seconds (0 to 9007199254740991)",
        "answer is waited for (1 to 60000)",
    ] {
        assert!(help.contains(stated), "{help}");
    }
}

/// A runtime for the tests' own ZeroMQ sockets, which stand for a publisher.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A ZeroMQ message of `frames`.
fn message(frames: &[&[u8]]) -> zeromq::ZmqMessage {
    let mut message = zeromq::ZmqMessage::from(frames[0].to_vec());
    for frame in &frames[1..] {
        message.push_back(frame.to_vec().into());
    }
    message
}

/// Starts `kvroute record` with `args` and a capture in `scratch`.
fn start_recorder(args: &[&str], capture: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("record")
        .args(args)
        .args(["-o", capture.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvroute record starts")
}

/// Publishes `each(n)` for n = 0, 1, … every 50 ms (a PUB socket drops what goes out
/// before the recorder subscribed) until the recorder exits; its note and lines.
fn publish_until_done(
    rt: &tokio::runtime::Runtime,
    socket: &mut zeromq::PubSocket,
    recorder: std::process::Child,
    capture: &Path,
    each: impl Fn(u64) -> Vec<zeromq::ZmqMessage>,
) -> (Option<i32>, String, Vec<serde_json::Value>) {
    use zeromq::SocketSend;
    let mut recorder = recorder;
    rt.block_on(async {
        for n in 0.. {
            for message in each(n) {
                socket.send(message).await.unwrap();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            if recorder.try_wait().unwrap().is_some() {
                break;
            }
            assert!(n < 1200, "the recorder never stopped");
        }
    });
    let out = recorder.wait_with_output().unwrap();
    let note = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines = std::fs::read(capture)
        .map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        })
        .unwrap_or_default();
    (out.status.code(), note, lines)
}

#[test]
fn an_ipc_endpoint_is_recorded() {
    use zeromq::Socket;
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("ipc://{}", scratch.path().join("kv.sock").display());
    let rt = runtime();
    // The sockets start their tasks on the runtime they are made in.
    let _entered = rt.enter();
    let mut publisher = zeromq::PubSocket::new();
    rt.block_on(publisher.bind(&endpoint)).unwrap();
    let recorder = start_recorder(&[&endpoint, "--count", "2", "--seconds", "20"], &capture);
    let (code, note, lines) = publish_until_done(&rt, &mut publisher, recorder, &capture, |n| {
        vec![message(&[b"kv-events", &n.to_be_bytes(), b"payload"])]
    });
    assert_eq!(code, Some(0), "{note}");
    assert_eq!(lines.len(), 2, "{note}");
    assert!(lines.iter().all(|l| l["endpoint"] == endpoint.as_str()));
    let first = lines[0]["seq"].as_u64().unwrap();
    assert_eq!(lines[1]["seq"].as_u64(), Some(first + 1));
}

#[test]
fn an_endpoint_given_twice_or_one_to_bind_or_of_no_zeromq_scheme_exits_2_and_writes_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    for (endpoints, reason) in [
        (
            vec!["tcp://127.0.0.1:5557", "tcp://127.0.0.1:05557"],
            "\"tcp://127.0.0.1:5557\" and \"tcp://127.0.0.1:05557\" are one endpoint: each message would be recorded twice\n",
        ),
        (
            vec!["tcp://LocalHost:5557", "tcp://localhost:5557"],
            "\"tcp://LocalHost:5557\" and \"tcp://localhost:5557\" are one endpoint: each message would be recorded twice\n",
        ),
        (
            vec!["tcp://[::1]:5557", "tcp://[0:0::1]:5557"],
            "\"tcp://[::1]:5557\" and \"tcp://[0:0::1]:5557\" are one endpoint: each message would be recorded twice\n",
        ),
        (
            vec!["ipc:///tmp/kv.sock", "tcp://127.0.0.1:5557", "ipc:///tmp//kv.sock"],
            "\"ipc:///tmp/kv.sock\" and \"ipc:///tmp//kv.sock\" are one endpoint: each message would be recorded twice\n",
        ),
        (
            vec!["tcp://*:5557"],
            "\"tcp://*:5557\" is an address to bind, not to connect to: name the engine's host, such as tcp://127.0.0.1:5557\n",
        ),
        (
            vec!["inproc://kv"],
            "\"inproc://kv\" is no ZeroMQ address: Unknown transport type inproc (record connects to tcp://HOST:PORT or ipc://PATH)\n",
        ),
    ] {
        let mut args = vec!["record"];
        args.extend(&endpoints);
        args.extend(["-o", capture.to_str().unwrap(), "--count", "0"]);
        let out = kvroute(&args);
        assert_eq!(out.status.code(), Some(2), "{endpoints:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), reason);
        assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
    }
}

#[test]
fn a_message_larger_than_the_import_reads_is_counted_malformed_and_the_rest_recorded() {
    use zeromq::Socket;
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let rt = runtime();
    // The sockets start their tasks on the runtime they are made in.
    let _entered = rt.enter();
    let mut publisher = zeromq::PubSocket::new();
    let endpoint = rt
        .block_on(publisher.bind("tcp://127.0.0.1:0"))
        .unwrap()
        .to_string();
    let recorder = start_recorder(&[&endpoint, "--count", "2", "--seconds", "60"], &capture);
    // The import's payload cap is 16 MiB (PAYLOAD_BYTES_MAX): one
    // byte more, or a topic that takes the pair past it, is refused.
    let over = vec![7u8; 16 * 1024 * 1024 + 1];
    let (code, note, lines) = publish_until_done(&rt, &mut publisher, recorder, &capture, |n| {
        vec![
            message(&[b"kv-events", &n.to_be_bytes(), &over]),
            message(&[&over[..1024], &n.to_be_bytes(), &over[1024..]]),
            message(&[b"kv-events", &n.to_be_bytes(), b"small"]),
        ]
    });
    assert_eq!(code, Some(0), "{note}");
    assert_eq!(lines.len(), 2, "{note}");
    assert!(
        lines.iter().all(|l| l["payload_b64"] == "c21hbGw="),
        "{note}"
    );
    assert!(note.contains(" malformed messages skipped"), "{note}");
}

#[test]
fn the_replay_request_has_the_frames_vllms_router_socket_reads() {
    use zeromq::{Socket, SocketRecv, SocketSend};
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let rt = runtime();
    // The sockets start their tasks on the runtime they are made in.
    let _entered = rt.enter();
    let mut publisher = zeromq::PubSocket::new();
    let mut router = zeromq::RouterSocket::new();
    let endpoint = rt.block_on(publisher.bind("tcp://127.0.0.1:0")).unwrap();
    let replay = rt.block_on(router.bind("tcp://127.0.0.1:0")).unwrap();
    let pair = format!("{endpoint}={replay}");
    let recorder = start_recorder(
        &[
            &endpoint.to_string(),
            "--replay",
            &pair,
            "--replay-wait-ms",
            "20000",
            "--count",
            "3",
            "--seconds",
            "60",
        ],
        &capture,
    );
    // Only even numbers go out live, so the second message received opens a replay
    // for the odd number before it.
    let (published, request) = rt.block_on(async {
        for n in 0u64..1200 {
            let seq = 2 * n;
            publisher
                .send(message(&[b"kv-events", &seq.to_be_bytes(), b"live"]))
                .await
                .unwrap();
            let asked = std::time::Duration::from_millis(50);
            if let Ok(request) = tokio::time::timeout(asked, router.recv()).await {
                return (seq, request.unwrap());
            }
        }
        panic!("no replay request came");
    });
    // vLLM's `_service_replay` takes exactly `client_id, _, start_seq_bytes` and reads
    // the start big-endian; the DEALER adds no identity frame of its own.
    let frames: Vec<Vec<u8>> = request.iter().map(|f| f.to_vec()).collect();
    assert_eq!(frames.len(), 3, "{frames:?}");
    assert_eq!(frames[1], b"", "the empty delimiter: {frames:?}");
    let asked = u64::from_be_bytes(frames[2].as_slice().try_into().unwrap());
    assert!(
        asked % 2 == 1 && asked < published,
        "the first number missing, big-endian: {frames:?}"
    );
    rt.block_on(async {
        let identity = frames[0].as_slice();
        let answer = message(&[identity, b"", b"kv-events", &asked.to_be_bytes(), b"again"]);
        router.send(answer).await.unwrap();
        router
            .send(message(&[identity, b"", b"", &[0xFF; 8], b""]))
            .await
            .unwrap();
    });
    let (code, note, lines) = publish_until_done(&rt, &mut publisher, recorder, &capture, |n| {
        let seq = published + 2 * (n + 1);
        vec![message(&[b"kv-events", &seq.to_be_bytes(), b"live"])]
    });
    assert_eq!(code, Some(0), "{note}");
    assert_eq!(
        seqs(&lines),
        [(asked - 1, false), (asked, true), (asked + 1, false)],
        "{note}"
    );
}

#[test]
fn a_publisher_not_up_for_half_a_minute_is_still_waited_for_and_the_silence_is_told() {
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let endpoint = format!("tcp://127.0.0.1:{}", free_port());
    // Past the ZeroMQ crate's default connect timeout of 30 s.
    let out = kvroute(&[
        "record",
        &endpoint,
        "-o",
        capture.to_str().unwrap(),
        "--seconds",
        "32",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warning = format!(
        "kvroute record: no message from {endpoint} after 5 s (not connected): is the engine \
         publishing there?\n"
    );
    assert_eq!(stderr.matches(&warning).count(), 1, "{stderr}");
    assert!(
        stderr.contains("record: 0 of 1 endpoints connected, 0 messages"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nrecorded 0 messages from 1 endpoints -> "),
        "{stderr}"
    );
}

#[test]
fn progress_shows_the_endpoints_connected_and_the_messages_written() {
    use zeromq::Socket;
    let scratch = tempfile::tempdir().unwrap();
    let capture = scratch.path().join("capture.jsonl");
    let rt = runtime();
    // The sockets start their tasks on the runtime they are made in.
    let _entered = rt.enter();
    let mut publisher = zeromq::PubSocket::new();
    let endpoint = rt
        .block_on(publisher.bind("tcp://127.0.0.1:0"))
        .unwrap()
        .to_string();
    let recorder = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["record", &endpoint, "--count", "20", "--seconds", "60"])
        .args(["-o", capture.to_str().unwrap()])
        .env("KVROUTE_PROGRESS_AFTER_MS", "0")
        .env("KVROUTE_PROGRESS_EVERY_MS", "100")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, note, lines) = publish_until_done(&rt, &mut publisher, recorder, &capture, |n| {
        vec![message(&[b"kv-events", &n.to_be_bytes(), b"payload"])]
    });
    assert_eq!(code, Some(0), "{note}");
    assert_eq!(lines.len(), 20);
    assert!(
        note.contains("record: 1 of 1 endpoints connected, "),
        "{note}"
    );
    assert!(note.contains(" messages, "), "{note}");
    assert!(!note.contains("no message from"), "{note}");
}
