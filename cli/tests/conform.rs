//! `kvroute conform` from the outside (SPEC.md §16): the reference passes every
//! committed case and writes the report's files; bad cases and bad usage exit 2 naming
//! what is wrong; a failing case exits 1 after the report is written.

use std::path::Path;
use std::process::{Command, Output};

fn conform(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .arg("conform")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_reference_passes_every_case_and_writes_the_report() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("report");
    let run = conform(&["--router", "kvroute", "--out", dir.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    let report: serde_norway::Value = serde_norway::from_str(&stdout).unwrap();
    assert_eq!(report["kind"].as_str(), Some("ConformanceReport"));
    let statistics = &report["profiles"][0]["core"]["statistics"];
    assert_eq!(statistics["Failed"].as_u64(), Some(0));
    assert!(statistics["Passed"].as_u64().unwrap() >= 20);
    assert_eq!(
        std::fs::read_to_string(dir.join("report.yaml")).unwrap(),
        stdout
    );
    let table = std::fs::read_to_string(dir.join("cases.md")).unwrap();
    assert!(table.contains("| exact_tie | tie |"), "{table}");
    assert!(
        table.contains("kvroute conform --router kvroute"),
        "{table}"
    );
}

#[test]
fn smg_skips_every_case_with_its_reason_and_passes_none() {
    let run = conform(&[
        "--router",
        "smg",
        "--only",
        "exact_tie",
        "--only",
        "clear_drops_all",
    ]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let report: serde_norway::Value = serde_norway::from_str(&text(&run.stdout)).unwrap();
    let statistics = &report["profiles"][0]["core"]["statistics"];
    assert_eq!(statistics["Passed"].as_u64(), Some(0));
    assert_eq!(statistics["Skipped"].as_u64(), Some(2));
    assert!(report["cases"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("SubscribeKvEvents"));
}

#[test]
fn a_case_whose_answer_is_not_policy_neutral_is_refused_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let case = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../peers/conformance/cases/other_tenant_salt.json");
    let text_in = std::fs::read_to_string(case).unwrap();
    let bad = text_in.replacen("\"expect\": \"w1\"", "\"expect\": \"w0\"", 1);
    assert_ne!(bad, text_in);
    std::fs::write(dir.path().join("other_tenant_salt.json"), bad).unwrap();
    let run = conform(&[
        "--router",
        "kvroute",
        "--cases",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("other_tenant_salt.json") && stderr.contains("does not dominate"),
        "{stderr}"
    );
    assert!(run.stdout.is_empty());
}

#[test]
fn bad_usage_exits_2() {
    let run = conform(&["--router", "kvroute", "--", "true"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(text(&run.stderr).contains("takes no COMMAND"));
    let run = conform(&["--router", "vllm-router"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(text(&run.stderr).contains("name the router's command"));
    let run = conform(&["--router", "kvroute", "--out", "peers/conformance/cases"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(text(&run.stderr).contains("own input"));
    let run = conform(&["--router", "kvroute", "--only", "no_such_case"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(text(&run.stderr).contains("no_such_case"));
}

#[test]
fn a_router_that_cannot_be_fed_fails_its_cases_after_writing_the_report() {
    let run = conform(&[
        "--router",
        "dynamo-select",
        "--only",
        "exact_tie",
        "--",
        "false",
    ]);
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    let report: serde_norway::Value = serde_norway::from_str(&text(&run.stdout)).unwrap();
    assert_eq!(
        report["profiles"][0]["core"]["result"].as_str(),
        Some("failure")
    );
    assert!(report["cases"][0]["cause"]
        .as_str()
        .unwrap()
        .starts_with("no_answer"));
}
