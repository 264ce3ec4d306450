//! `kvroute swarm` end to end: the checks on its range and threads, streaming and
//! progress on a long sweep.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn kvroute_bin() -> &'static str {
    env!("CARGO_BIN_EXE_kvroute")
}

fn kvroute(args: &[&str]) -> Output {
    Command::new(kvroute_bin())
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Removes every scheduler variable the test process may itself have been given.
fn without_scheduler(command: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars() {
        if name.starts_with("SLURM_") || name == "JOB_COMPLETION_INDEX" {
            command.env_remove(name);
        }
    }
    command.env_remove("KVROUTE_SHARD_COUNT")
}

#[test]
fn zero_jobs_is_bad_usage() {
    let out = kvroute(&["swarm", "--seeds", "3", "--jobs", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("expected at least 1 worker thread, found 0"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_range_past_the_last_seed_is_bad_usage() {
    let out = kvroute(&["swarm", "--seeds", "2", "--start", &u64::MAX.to_string()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("runs past the last seed"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "no seed runs: {}", text(&out.stdout));
    // The last seed itself is in range.
    let out = kvroute(&["swarm", "--seeds", "1", "--start", &u64::MAX.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Starts `swarm --seeds 300000000`, which runs for days: long enough to watch.
fn start_long_sweep(shell_prefix: &str) -> Child {
    without_scheduler(Command::new("sh").args([
        "-c",
        &format!("{shell_prefix} exec \"$0\" swarm --seeds 300000000 --jobs 1"),
        kvroute_bin(),
    ]))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("sh runs")
}

/// A list of 300 million seeds is 2.4 GB: under a 1 GiB address-space limit, a sweep
/// that listed its seeds aborts at once, and one that streams them keeps running.
#[test]
fn a_huge_sweep_streams_its_seeds_instead_of_listing_them() {
    let mut child = start_long_sweep("ulimit -v 1048576 &&");
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the sweep ended ({status}) instead of streaming seeds: {}",
                text(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        text(&out.stdout).starts_with("swarm: first seed 0, 300000000 seeds from 0, 1 jobs\n"),
        "{}",
        text(&out.stdout)
    );
}

/// With stderr a pipe (CI, a cluster's log), progress is a line every few seconds on
/// stderr; stdout carries only the results.
#[test]
fn progress_is_printed_as_lines_when_stderr_is_not_a_terminal() {
    let mut child = start_long_sweep("");
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let line = lines_rx.recv_timeout(Duration::from_secs(20));
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let line = line.expect("a progress line on stderr within 20 s");
    assert!(
        line.starts_with("swarm: ")
            && line.contains("/300000000 seeds (")
            && line.contains("seeds/s, eta "),
        "{line}"
    );
    assert_eq!(
        text(&out.stdout),
        "swarm: first seed 0, 300000000 seeds from 0, 1 jobs\n",
        "no progress on stdout"
    );
}
