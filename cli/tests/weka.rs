//! `kvroute import weka` end to end (SPEC.md §19) on `weka/sessions/`, three session
//! files written like the public kv-cache-tester traces (one with a sub-agent): the
//! trace against a golden checked by hand, the report, directory and file order, the
//! seed, a replay of the result, and the refusals that need a file system.

use std::path::Path;
use std::process::{Command, Output};

/// Relative to the package root, the test's working directory.
const SESSIONS: &str = "tests/weka/sessions";
const GOLDEN: &str = "tests/weka/expected.trace.json";

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Imports `paths` (then `extra` options) into a scratch file: the run and the bytes.
fn import(paths: &[&str], extra: &[&str]) -> (Output, Option<Vec<u8>>) {
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("weka.json");
    let mut args = vec!["import", "weka"];
    args.extend_from_slice(paths);
    args.extend_from_slice(&["-o", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let output = kvroute(&args);
    (output, std::fs::read(&out).ok())
}

#[test]
fn the_fixture_imports_as_the_golden_with_its_report() {
    let (output, bytes) = import(&[SESSIONS], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(bytes.unwrap(), std::fs::read(GOLDEN).unwrap());
    let report = stderr(&output);
    let lines: Vec<&str> = report.lines().collect();
    assert!(
        lines[0].starts_with("imported 7 requests, 8 workers, 17 segments -> "),
        "{report}"
    );
    assert_eq!(
        &lines[1..],
        [
            "sessions: 3 (0 with no request), 1 sub-agent with 2 of the requests, 11 distinct blocks",
            "clock: sessions start from tick 0 to 26275 (mean gap 10000 ms, --session-rate 0.1, \
             --seed 0); the last request arrives at tick 27973",
        ]
    );
}

#[test]
fn files_in_name_order_are_the_directory_and_another_order_renumbers_the_sessions() {
    let file = |name: &str| format!("{SESSIONS}/{name}");
    let (a, b, c) = (
        file("trace_a.json"),
        file("trace_b.json"),
        file("trace_c.json"),
    );
    let (_, listed) = import(&[&a, &b, &c], &[]);
    assert_eq!(listed.unwrap(), std::fs::read(GOLDEN).unwrap());
    let (output, swapped) = import(&[&b, &a, &c], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let trace: serde_json::Value = serde_json::from_slice(&swapped.unwrap()).unwrap();
    // trace_b is session 1 now, so it starts at tick 0.
    assert_eq!(trace["events"][0]["id"], "s1-r1");
    assert_eq!(trace["events"][0]["prefix"][0]["key"], "s1-b1");
    assert_eq!(trace["events"][0]["prompt_tokens"], 140);
}

#[test]
fn the_seed_moves_the_sessions_and_the_same_seed_gives_the_same_bytes() {
    let (_, first) = import(&[SESSIONS], &["--seed", "9", "--session-rate", "2.5"]);
    let (output, second) = import(&[SESSIONS], &["--seed", "9", "--session-rate", "2.5"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(first, second);
    assert_ne!(first.unwrap(), std::fs::read(GOLDEN).unwrap());
    assert!(stderr(&output).contains("(mean gap 400 ms, --session-rate 2.5, --seed 9)"));
    let (output, none) = import(&[SESSIONS], &["--session-rate", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(none.is_none());
}

#[test]
fn the_imported_trace_replays() {
    let output = kvroute(&["replay", GOLDEN]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("cache_plus_load"), "{table}");
}

#[test]
fn an_output_among_the_directorys_files_and_an_empty_directory_are_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let session = dir.join("s.json");
    std::fs::copy(Path::new(SESSIONS).join("trace_c.json"), &session).unwrap();
    let before = std::fs::read(&session).unwrap();
    let output = kvroute(&[
        "import",
        "weka",
        dir.to_str().unwrap(),
        "-o",
        session.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("is also an input of this command"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read(&session).unwrap(), before);

    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = dir.join("out.json");
    let output = kvroute(&[
        "import",
        "weka",
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!("{}: no .json file in the directory\n", empty.display())
    );
    assert!(!out.exists());
}

#[test]
fn a_bad_file_among_good_ones_writes_nothing_and_names_the_file() {
    let scratch = tempfile::tempdir().unwrap();
    let bad = scratch.path().join("bad.json");
    std::fs::write(&bad, r#"{"block_size":64,"hash_id_scope":"local","requests":[{"t":0,"type":"n","in":"5","out":1,"hash_ids":[]}]}"#).unwrap();
    let (output, bytes) = import(&[SESSIONS, bad.to_str().unwrap()], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(bytes.is_none());
    assert_eq!(
        stderr(&output),
        format!(
            "{}: requests[0].in: expected an integer from 0 to 9007199254740991, found \"5\"\n",
            bad.display()
        )
    );
}
