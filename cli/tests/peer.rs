//! `kvroute peer run` against peers that misbehave (SPEC.md §15.3), each failing with
//! one clear line that names the peer, the last event sent and the reason, within a
//! short timeout; no peer process, nor a process a peer started, outlives the run. And
//! the docs' minimal Python adapter (docs/peers.md), run as written there.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const FIXTURE: &str = "../fixtures/stale_epoch/trace.json";

/// The sweep every sweep test runs: seeds 5, 6 and 7.
const SWEEP_THREE_SEEDS: [&str; 6] = ["peer", "sweep", "--seeds", "3", "--start", "5"];

fn faulty_peer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/faulty_peer.py")
}

/// Runs `kvroute peer run FIXTURE extra... -- python3 faulty_peer.py MODE PIDFILE`;
/// returns the output, the time it took and the peer's process ids.
fn run_faulty(mode: &str, extra: &[&str]) -> (Output, Duration, Vec<i32>) {
    let command = ["peer", "run", FIXTURE, "--timeout-ms", "1500"];
    kvroute_with_faulty(&command, extra, mode, "pids")
}

/// `kvroute COMMAND... extra... -- python3 faulty_peer.py MODE DIR/pids`; the output, the
/// time it took and the process ids the peers wrote to `DIR/<pids_read>`.
fn kvroute_with_faulty(
    command: &[&str],
    extra: &[&str],
    mode: &str,
    pids_read: &str,
) -> (Output, Duration, Vec<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(command)
        .args(extra)
        .arg("--")
        .arg("python3")
        .arg(faulty_peer())
        .arg(mode)
        .arg(&pid_file)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let pids = std::fs::read_to_string(dir.path().join(pids_read))
        .map(|s| s.split_whitespace().map(|p| p.parse().unwrap()).collect())
        .unwrap_or_default();
    (out, elapsed, pids)
}

/// Whether process `pid` still exists (a zombie included: it has not been reaped).
fn exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn assert_gone(pids: &[i32]) {
    assert!(!pids.is_empty(), "the peer never started");
    // A process kvroute killed but that init has still to reap (a grandchild) may take
    // a moment; one kvroute left running never goes.
    // Generous, for a loaded machine: a process left running never goes, whatever the bound.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| exists(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    for &pid in pids {
        assert!(!exists(pid), "process {pid} outlived the run");
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A failed run: status 1, the first stderr line as given, the peer's stderr quoted,
/// nothing left running.
fn assert_fails(mode: &str, extra: &[&str], first_line: &str) -> String {
    let (out, elapsed, pids) = run_faulty(mode, extra);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert_eq!(text.lines().next().unwrap(), first_line, "{text}");
    assert!(out.stdout.is_empty(), "no table on a failed run");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_gone(&pids);
    text
}

#[test]
fn a_peer_that_hangs_is_killed_after_the_timeout_with_its_children() {
    let text = assert_fails(
        "hang",
        &[],
        "peer faulty-hang: no answer within 1500 ms to seq 2; killed (last event sent: seq 2, tick 2)",
    );
    assert!(
        text.contains("peer stderr (last 3 lines):\n  faulty peer: hello from kvroute\n"),
        "{text}"
    );
    assert!(text.contains("  faulty peer: event seq 2"), "{text}");
}

#[test]
fn a_peer_whose_child_escapes_its_group_still_ends_the_run_in_time() {
    let (out, elapsed, pids) = run_faulty("escape", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("peer faulty-escape: no answer within 1500 ms to seq 2; killed"),
        "{}",
        stderr(&out)
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // The peer is gone; the child that left its group is this test's to end.
    let (peer, escaped) = (pids[0], pids[1]);
    unsafe {
        libc::kill(escaped, libc::SIGKILL);
    }
    assert_gone(&[peer, escaped]);
}

#[test]
fn a_peer_that_lies_about_its_version_is_refused() {
    assert_fails(
        "liar",
        &["--expect-version", "1.0.0"],
        "peer faulty-liar: hello: $.version: expected \"1.0.0\", found \"9.9.9\" (before the first event)",
    );
    // Without --expect-version the version is reported, not checked.
    let (out, _, pids) = run_faulty("liar", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("peer faulty-liar 9.9.9: "));
    assert_gone(&pids);
}

#[test]
fn a_peer_that_exits_mid_run_is_reported_with_its_exit_status() {
    let text = assert_fails(
        "dies",
        &[],
        "peer faulty-dies: exited (exit status: 3) before answering seq 2 (last event sent: seq 2, tick 2)",
    );
    assert!(text.ends_with("  faulty peer: giving up\n"), "{text}");
    assert_fails(
        "silent_exit",
        &[],
        "peer faulty-silent_exit: exited (exit status: 0) before answering seq 2 (last event sent: seq 2, tick 2)",
    );
}

#[test]
fn a_garbage_answer_is_reported_with_its_json_path_and_reason() {
    assert_fails(
        "garbage",
        &[],
        "peer faulty-garbage: answer to seq 2: $.reuse[1].worker: unknown worker \"w9\" (last event sent: seq 2, tick 2)",
    );
    let text = assert_fails(
        "not_json",
        &[],
        "peer faulty-not_json: answer to seq 2: not JSON: expected value at line 1 column 1 (last event sent: seq 2, tick 2)",
    );
    assert!(text.contains("peer stderr"));
}

#[test]
fn a_peer_of_another_protocol_is_refused() {
    let (out, elapsed, pids) = run_faulty("other_protocol", &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // Before a hello is accepted the peer is named by its command.
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("peer python3 "), "{text}");
    assert!(
        first.ends_with(
            ": hello: $.protocol: expected \"kvroute-peer/1\", found \"kvroute-peer/2\" (before the first event)"
        ),
        "{text}"
    );
    assert!(first.contains("faulty_peer.py other_protocol "), "{text}");
    assert!(elapsed < Duration::from_secs(5));
    assert_gone(&pids);
}

#[test]
fn an_answer_to_the_wrong_seq_is_refused() {
    assert_fails(
        "wrong_seq",
        &[],
        "peer faulty-wrong_seq: answer to seq 2: $.seq: expected 2, found 3 (last event sent: seq 2, tick 2)",
    );
}

#[test]
fn a_peer_error_message_is_quoted() {
    assert_fails(
        "error",
        &[],
        "peer faulty-error: index corrupted at r1 (last event sent: seq 2, tick 2)",
    );
}

#[test]
fn sigint_kills_and_reaps_the_peer_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["peer", "run", FIXTURE, "--timeout-ms", "60000", "--"])
        .arg("python3")
        .arg(faulty_peer())
        .arg("hang")
        .arg(&pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Python's start on a loaded machine; the file appears atomically (renamed into place).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let pids: Vec<i32> = std::fs::read_to_string(&pid_file)
        .expect("the peer wrote its process ids within 30 s")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // Let kvroute reach its wait on the answer.
    std::thread::sleep(Duration::from_millis(200));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert_gone(&pids);
}

#[test]
fn a_choice_peer_gets_the_choice_table() {
    let (out, _, pids) = run_faulty("choice", &["--policy", "round_robin"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines: Vec<&str> = text.lines().collect();
    // The peer always picks the first worker; round robin does so every other time.
    assert!(lines[1].starts_with("choice vs round_robin"), "{text}");
    let figures: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(figures[0], "faulty-choice");
    let (decisions, same, differing): (u64, u64, u64) = (
        figures[1].parse().unwrap(),
        figures[2].parse().unwrap(),
        figures[3].parse().unwrap(),
    );
    assert!(decisions >= 2 && same >= 1 && differing >= 1, "{text}");
    assert_eq!(same + differing, decisions);
    assert_eq!(figures[5], "-", "no reuse answers to split by");
    assert_gone(&pids);
}

/// The docs' minimal adapter (docs/peers.md), written to `dir` as it stands there.
fn docs_adapter(dir: &Path) -> PathBuf {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/peers.md"))
            .unwrap();
    let start = docs
        .find("```python\n")
        .expect("docs/peers.md has the adapter")
        + 10;
    let end = start + docs[start..].find("```").unwrap();
    let script = dir.join("key_set.py");
    std::fs::write(&script, &docs[start..end]).unwrap();
    script
}

#[test]
fn diff_out_writes_the_first_difference_shrunk_by_rerunning_the_peer() {
    let dir = tempfile::tempdir().unwrap();
    let script = docs_adapter(dir.path());
    let out_path = dir.path().join("first.json");
    let run = |trace: &Path, extra: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_kvroute"))
            .args(["peer", "run"])
            .arg(trace)
            .args(extra)
            .arg("--")
            .arg("python3")
            .arg(&script)
            .output()
            .unwrap()
    };
    let out = run(
        Path::new(FIXTURE),
        &["--diff-out".as_ref(), out_path.as_os_str()],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("first difference: 2 events, 1 workers"),
        "{}",
        stderr(&out)
    );
    // What was written is a trace on which the peer still differs, cut down from 6
    // events on 2 workers.
    let again = run(&out_path, &[]);
    let table = String::from_utf8_lossy(&again.stdout);
    assert!(
        table.starts_with("peer key-set 0.1.0: 1 requests on 1 workers"),
        "{table}"
    );
    let row: Vec<&str> = table.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!((row[1], row[2]), ("1", "1"), "{table}");
}

#[test]
fn the_docs_minimal_adapter_runs_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let script = docs_adapter(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "peer",
            "run",
            "../fixtures/lab/trace.json",
            "--format",
            "json",
            "--",
        ])
        .arg("python3")
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["peer"], "key-set");
    assert_eq!(value["requests"], 29);
    assert_eq!(value["reuse"]["rows"], 29 * 4);
    // A key set counts whole segments and knows no epochs or grants: it differs from
    // kvroute, and every difference has a documented cause.
    assert!(value["reuse"]["differing"].as_u64().unwrap() > 0, "{value}");
    assert_eq!(value["reuse"]["causes"]["new_finding"], 0, "{value}");
}

#[test]
fn the_sweep_runs_a_peer_over_generated_traces() {
    let dir = tempfile::tempdir().unwrap();
    let script = docs_adapter(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(SWEEP_THREE_SEEDS)
        .args(["--", "python3"])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // Three seeds, each in both delivery modes, one peer process per trace (the docs'
    // adapter offers no reset).
    assert!(text.starts_with("6 traces, "), "{text}");
    assert!(text.contains("\n  new_finding    "), "{text}");
    assert!(
        text.ends_with(
            " seeds with new findings\npeer key-set 0.1.0: 6 processes for 6 traces, one per \
             trace (the peer offers no reset)\n"
        ),
        "{text}"
    );
}

/// `kvroute` [`SWEEP_THREE_SEEDS`] `--timeout-ms 1500 extra... -- python3
/// faulty_peer.py MODE PIDFILE`; the output, the time it took, and the id of every
/// peer process the sweep started, in order.
fn sweep_faulty(mode: &str, extra: &[&str]) -> (Output, Duration, Vec<i32>) {
    let command = [&SWEEP_THREE_SEEDS[..], &["--timeout-ms", "1500"]].concat();
    kvroute_with_faulty(&command, extra, mode, "pids.all")
}

/// The last line of a sweep's table.
fn last_line(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().last().unwrap_or_default().to_owned()
}

#[test]
fn a_peer_that_offers_reset_serves_the_whole_sweep_from_one_process() {
    let (out, _, pids) = sweep_faulty("reset", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("6 traces, "), "{text}");
    assert_eq!(
        last_line(&out),
        "peer faulty-reset 1.0.0: 1 processes for 6 traces, reset between traces"
    );
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_gone(&pids);
    // Forced the old way, the same peer gets a process a trace and the same figures.
    let (per_trace, _, pids) = sweep_faulty("reset", &["--process-per-trace"]);
    assert_eq!(per_trace.status.code(), Some(0), "{}", stderr(&per_trace));
    assert_eq!(
        last_line(&per_trace),
        "peer faulty-reset 1.0.0: 6 processes for 6 traces, one per trace (--process-per-trace)"
    );
    assert_eq!(pids.len(), 6, "{pids:?}");
    let figures = |o: &Output| {
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        t[..t.rfind("peer faulty-reset").unwrap()].to_owned()
    };
    assert_eq!(figures(&out), figures(&per_trace));
    assert_gone(&pids);
}

#[test]
fn a_peer_that_does_not_offer_reset_still_gets_a_process_per_trace() {
    let (out, _, pids) = sweep_faulty("plain", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        last_line(&out),
        "peer faulty-plain 1.0.0: 6 processes for 6 traces, one per trace (the peer offers no reset)"
    );
    assert_eq!(pids.len(), 6, "{pids:?}");
    assert_gone(&pids);
}

/// The seq of the last event the faulty peer logged (`faulty peer: event seq N`) in
/// kvroute's quote of its stderr.
fn last_logged_seq(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("faulty peer: event seq "))
        .next_back()
        .expect("the peer logged an event")
        .parse()
        .unwrap()
}

#[test]
fn a_peer_that_hangs_on_reset_is_killed_and_the_error_names_reset_and_the_trace() {
    let (out, elapsed, pids) = sweep_faulty("reset_hang", &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let first = text.lines().next().unwrap();
    // The first trace (seed 5, every event) ran; its reset got no answer.
    let prefix = "seed 5 (withhold_stale=false): peer faulty-reset_hang: no answer within 1500 ms \
                  to reset; killed (last event sent: seq ";
    assert!(first.starts_with(prefix), "{text}");
    let seq: u64 = first[prefix.len()..]
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(seq, last_logged_seq(&text), "{text}");
    assert!(text.ends_with("  faulty peer: reset\n"), "{text}");
    assert!(out.stdout.is_empty(), "no table on a failed sweep");
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_gone(&pids);
}

#[test]
fn a_reset_peer_that_fails_mid_sweep_is_named_with_the_seed_mode_and_last_event() {
    let (out, _, pids) = sweep_faulty("reset_dies", &[]);
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let first = text.lines().next().unwrap();
    // The second trace (seed 5, stale events withheld) is the first after a reset: the
    // peer exits at its first request, and the events named are that trace's.
    let prefix = "seed 5 (withhold_stale=true): peer faulty-reset_dies: exited (exit status: 3) \
                  before answering seq ";
    assert!(first.starts_with(prefix), "{text}");
    let seq = last_logged_seq(&text);
    assert!(
        first.contains(&format!(
            "before answering seq {seq} (last event sent: seq {seq}, tick "
        )),
        "{text}"
    );
    assert!(
        text.ends_with("  faulty peer: giving up after a reset\n"),
        "{text}"
    );
    assert_gone(&pids);
}

#[test]
fn sweep_diff_out_writes_the_first_new_finding_shrunk_by_one_reset_process() {
    // The faulty peer in `reset` mode answers no reuse at all, so a worker kvroute holds
    // a block on is a new finding (seed 6 is the first of 5..8 with one).
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("finding.json");
    let extra = ["--diff-out", out_path.to_str().unwrap()];
    let (out, _, pids) = sweep_faulty("reset", &extra);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("\nnew finding: seed 6 withhold_stale=false faulty-reset "),
        "{text}"
    );
    assert!(
        stderr(&out)
            .contains("first new finding (seed 6, withhold_stale=false): 2 events, 1 workers -> "),
        "{}",
        stderr(&out)
    );
    // One process for the sweep, one for every candidate of the shrink (reset between).
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_gone(&pids);
    // What was written shows the finding again under `peer run`.
    let rerun = [
        "peer",
        "run",
        "--format",
        "json",
        out_path.to_str().unwrap(),
    ];
    let (again, _, _) = kvroute_with_faulty(&rerun, &[], "reset", "pids");
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let value: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(value["reuse"]["causes"]["new_finding"], 1, "{value}");
    // A peer with no new finding writes nothing and says so.
    let script = docs_adapter(dir.path());
    let none_path = dir.path().join("none.json");
    let none = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(SWEEP_THREE_SEEDS)
        .arg("--diff-out")
        .arg(&none_path)
        .args(["--", "python3"])
        .arg(&script)
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(0), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("no new findings: "),
        "{}",
        stderr(&none)
    );
    assert!(!none_path.exists());
}

#[test]
fn a_peer_dies_with_a_sigkilled_kvroute() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("peer.pid");
    let script = format!("echo $$ > '{}'; exec sleep 600", pid_file.display());
    let mut kvroute = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args([
            "peer",
            "run",
            FIXTURE,
            "--timeout-ms",
            "600000",
            "--",
            "sh",
            "-c",
        ])
        .arg(&script)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let peer_pid = loop {
        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
        if let Ok(pid) = text.trim().parse::<u32>() {
            break pid;
        }
        assert!(Instant::now() < deadline, "the peer never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    kvroute.kill().unwrap(); // SIGKILL: no handler of kvroute's runs.
    kvroute.wait().unwrap();
    // Gone, or a zombie waiting for init to reap it: either way no longer running.
    let running = || {
        std::fs::read_to_string(format!("/proc/{peer_pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let still = running();
    if still {
        // SAFETY: kill(2) on the pid this test's peer wrote; it is not left behind.
        unsafe { libc::kill(peer_pid as i32, libc::SIGKILL) };
    }
    assert!(!still, "peer {peer_pid} outlived the SIGKILLed kvroute");
}

#[test]
fn a_peers_stderr_reaches_the_terminal_escaped() {
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(["peer", "run", FIXTURE, "--", "sh", "-c"])
        .arg("printf '\\033[2Kok: all agreed\\n' >&2; exit 3")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "a raw escape: {stderr:?}");
    assert!(stderr.contains("\\u001b[2Kok: all agreed"), "{stderr}");
}
