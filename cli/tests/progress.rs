//! Progress of long commands goes to stderr only: with the quiet period and interval
//! shortened through the environment, `replay`, `simulate`, `import` and `verify` print
//! progress lines on stderr while their stdout bytes stay exactly those of a run
//! without progress. (That a short run with the default quiet period prints nothing is
//! checked by every stderr-empty case of `hostile_env/cases.txt`.)

use std::path::Path;
use std::process::{Command, Output};

fn kvroute(args: &[&str], progress: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kvroute"));
    command.args(args);
    // Without progress: a quiet period longer than any run here.
    let after_ms = if progress { "0" } else { "600000" };
    command
        .env("KVROUTE_PROGRESS_AFTER_MS", after_ms)
        .env("KVROUTE_PROGRESS_EVERY_MS", "1");
    command.output().expect("the kvroute binary runs")
}

fn progress_lines(stderr: &[u8], command: &str) -> usize {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.starts_with(&format!("{command}: ")) && l.ends_with(" elapsed"))
        .count()
}

/// 300 Mooncake lines, imported: a run long enough for its first progress line.
fn inputs(dir: &Path) -> (String, String) {
    let mut jsonl = String::new();
    for i in 0..300u64 {
        jsonl.push_str(&format!(
            "{{\"timestamp\": {i}, \"input_length\": 1500, \"output_length\": 10, \"hash_ids\": [{}, {}, {}]}}\n",
            i % 13,
            i % 29,
            i
        ));
    }
    let lines = dir.join("m.jsonl");
    std::fs::write(&lines, jsonl).unwrap();
    let trace = dir.join("m.json");
    let out = kvroute(
        &[
            "import",
            "mooncake",
            lines.to_str().unwrap(),
            "-o",
            trace.to_str().unwrap(),
        ],
        false,
    );
    assert!(out.status.success());
    (lines.display().to_string(), trace.display().to_string())
}

#[test]
fn progress_is_on_stderr_and_stdout_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, trace) = inputs(dir.path());
    let receipt = dir.path().join("r.json").display().to_string();
    let out = kvroute(
        &["replay", &trace, "--format", "json", "--out", &receipt],
        false,
    );
    assert!(out.status.success());
    let imported = dir.path().join("again.json").display().to_string();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("replay", vec!["replay", &trace, "--format", "jsonl"]),
        ("replay", vec!["replay", &trace, "--format", "csv"]),
        ("simulate", vec!["simulate", &trace, "--workers", "4"]),
        ("verify", vec!["verify", "--trace", &trace, &receipt]),
        (
            "import",
            vec!["import", "mooncake", &lines, "-o", &imported],
        ),
    ];
    for (command, args) in cases {
        let quiet = kvroute(&args, false);
        let shown = kvroute(&args, true);
        assert!(quiet.status.success() && shown.status.success(), "{args:?}");
        assert_eq!(
            quiet.stdout, shown.stdout,
            "{args:?}: stdout changed with progress on"
        );
        assert_eq!(progress_lines(&quiet.stderr, command), 0, "{args:?}");
        assert!(
            progress_lines(&shown.stderr, command) > 0,
            "{args:?}: no progress line on stderr: {}",
            String::from_utf8_lossy(&shown.stderr)
        );
    }
}

/// `verify` of a receipt file counts towards the file's size: each progress line that
/// has read anything says how much of the total, the share, the rate and the time left
/// (a phase and seconds alone do not tell a user how long to wait). From stdin the size is unknown
/// and the line says only what was read.
#[test]
fn verify_of_a_file_shows_the_share_read_and_an_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = inputs(dir.path());
    let receipt = dir.path().join("r.json");
    let out = kvroute(
        &[
            "replay",
            &trace,
            "--format",
            "json",
            "--out",
            receipt.to_str().unwrap(),
        ],
        false,
    );
    assert!(out.status.success());
    let total = indicatif::HumanBytes(std::fs::metadata(&receipt).unwrap().len()).to_string();
    let shown = kvroute(
        &["verify", "--trace", &trace, receipt.to_str().unwrap()],
        true,
    );
    assert!(shown.status.success());
    let stderr = String::from_utf8_lossy(&shown.stderr);
    // Lines that count bytes read ("256.00 KiB read" or "256.00 KiB of 1 MiB read"),
    // not the phase "reading the trace".
    let reading: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("B read") || l.contains("B of "))
        .collect();
    assert!(!reading.is_empty(), "{stderr}");
    for line in reading {
        assert!(
            line.contains(&format!(" of {total} read (")) && line.contains("/s, about "),
            "{line}"
        );
    }
}

/// `replay` and `simulate` count decisions routed towards the total their trace makes
/// them route, so the share and time left are true: 300 requests are 4 runs × 300 for the
/// closed loop, a CSV or JSON Lines replay, and twice that for `--format json`, which
/// replays once for its digest first.
#[test]
fn replay_and_simulate_show_decisions_done_of_the_total() {
    let dir = tempfile::tempdir().unwrap();
    let (_, trace) = inputs(dir.path());
    for (command, args, total) in [
        (
            "replay",
            vec!["replay", &trace, "--format", "jsonl"],
            "1,200",
        ),
        (
            "replay",
            vec!["replay", &trace, "--format", "json"],
            "2,400",
        ),
        (
            "simulate",
            vec!["simulate", &trace, "--workers", "4"],
            "1,200",
        ),
        (
            "simulate",
            vec!["simulate", &trace, "--workers", "4", "--format", "json"],
            "1,200",
        ),
    ] {
        let shown = kvroute(&args, true);
        assert!(shown.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&shown.stderr);
        let counting: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with(&format!("{command}: ")) && l.contains(" decisions ("))
            .collect();
        assert!(!counting.is_empty(), "{args:?}: {stderr}");
        for line in counting {
            assert!(
                line.contains(&format!(" of {total} decisions (")) && line.contains("/s, about "),
                "{args:?}: {line}"
            );
        }
    }
}
