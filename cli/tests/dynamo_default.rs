//! The `dynamo_default` run through the command line (SPEC.md §4.8, §7): every output
//! that lists runs lists the fifth one when the trace sets `policy.dynamo_block_tokens`,
//! `diff` takes it as a policy name, and `simulate` keeps four closed-loop policies but
//! writes the member into every generated trace.

use scraper::{Html, Selector};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const FIVE: [&str; 5] = [
    "round_robin",
    "least_load",
    "longest_prefix",
    "cache_plus_load",
    "dynamo_default",
];

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn ok(args: &[&str]) -> String {
    let out = kvroute(args);
    assert!(
        out.status.success(),
        "kvroute {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/dynamo_default_tie")
}

fn trace() -> PathBuf {
    fixture().join("trace.json")
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

fn golden_digest() -> String {
    std::fs::read_to_string(fixture().join("receipt.sha256"))
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn the_replay_table_has_five_rows_in_receipt_order() {
    let table = ok(&["replay", s(&trace())]);
    let policies: Vec<&str> = table
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|word| FIVE.contains(word))
        .collect();
    assert_eq!(policies, FIVE, "{table}");
    assert!(table.contains(&golden_digest()), "{table}");
    // A default trace keeps its four rows.
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json");
    assert!(!ok(&["replay", s(&lab)]).contains("dynamo_default"));
}

#[test]
fn json_lines_and_csv_carry_the_fifth_run() {
    let jsonl = ok(&["replay", s(&trace()), "--format", "jsonl"]);
    assert!(jsonl.contains(r#""policy":"dynamo_default""#));
    assert!(jsonl.contains(&golden_digest()));
    let csv = ok(&["replay", s(&trace()), "--format", "csv"]);
    // 5 runs x 2 requests x 3 workers, after the header.
    assert_eq!(csv.lines().count(), 1 + 30);
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (policy, seq, worker, cost) = (
        column("policy"),
        column("seq"),
        column("worker"),
        column("cost_milli"),
    );
    // r1's Dynamo costs of SPEC §4.8 (see the fixture's commit): w0 and w1 tie.
    let costs: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[policy] == "dynamo_default" && f[seq] == "1")
        .map(|f| (f[worker].to_owned(), f[cost].to_owned()))
        .collect();
    let expected = [("w0", "388000"), ("w1", "388000"), ("w2", "900000")];
    assert_eq!(
        costs,
        expected.map(|(w, c)| (w.to_owned(), c.to_owned())).to_vec()
    );
}

#[test]
fn diff_takes_dynamo_default_as_baseline_or_candidate() {
    let diff = |baseline: &str, candidate: &str| -> Value {
        serde_json::from_str(&ok(&[
            "diff",
            s(&trace()),
            "--baseline",
            baseline,
            "--candidate",
            candidate,
            "--format",
            "json",
        ]))
        .unwrap()
    };
    // cache_plus_load chooses w1 then w0, dynamo_default w0 then w1: both differ.
    let both = diff("cache_plus_load", "dynamo_default");
    let seqs: Vec<u64> = both["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(both["decisions"][0]["baseline"]["worker"], "w1");
    assert_eq!(both["decisions"][0]["candidate"]["worker"], "w0");
    assert_eq!(both["decisions"][0]["candidate"]["cost_milli"], 388_000);
    // round_robin chooses w0 then w1, as dynamo_default does.
    let same = diff("dynamo_default", "round_robin");
    assert_eq!(same["decisions"], Value::Array(vec![]));
    // A receipt without the run: the name is known, the run is not there.
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json");
    let out = kvroute(&[
        "diff",
        s(&lab),
        "--baseline",
        "cache_plus_load",
        "--candidate",
        "dynamo_default",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no dynamo_default run"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_report_compares_every_run_the_receipt_has() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("receipt.json");
    ok(&[
        "replay",
        s(&trace()),
        "--format",
        "json",
        "--out",
        s(&receipt),
    ]);
    let receipt_value: Value =
        serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    for input in [trace(), receipt] {
        let out = dir.path().join("report.html");
        ok(&["report", s(&input), "-o", s(&out)]);
        let page = std::fs::read_to_string(&out).unwrap();
        let html = Html::parse_document(&page);
        let rows: Vec<_> = html
            .select(&Selector::parse("table.metrics tbody tr").unwrap())
            .collect();
        let names: Vec<String> = rows
            .iter()
            .map(|r| {
                r.select(&Selector::parse("th").unwrap())
                    .next()
                    .unwrap()
                    .text()
                    .collect::<String>()
                    .trim()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, FIVE);
        // The fifth row has its own swatch and the receipt's metrics.
        assert!(page.contains("swatch p4"));
        let cells: Vec<String> = rows[4]
            .select(&Selector::parse("td").unwrap())
            .map(|c| c.text().collect())
            .collect();
        let m = &receipt_value["runs"][4]["metrics"];
        assert_eq!(cells[0], m["routed"].to_string());
        assert_eq!(cells[13], m["dominated_choices"].to_string());
        // The bar charts label the fifth bar, and the caption says what the label means.
        assert!(page.contains("\nDyn\n</text>"), "no Dyn bar label");
        assert!(page.contains("C+L cache_plus_load, Dyn dynamo_default."));
    }
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json");
    let out = dir.path().join("lab.html");
    ok(&["report", s(&lab), "-o", s(&out)]);
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(page.contains("C+L cache_plus_load.</p>") && !page.contains("dynamo_default"));
}

#[test]
fn simulate_keeps_four_policies_and_the_member_in_generated_traces() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events");
    let table = ok(&[
        "simulate",
        s(&trace()),
        "--cache-blocks",
        "4",
        "--events-out",
        s(&events),
    ]);
    assert!(!table.contains("dynamo_default"), "{table}");
    for policy in &FIVE[..4] {
        assert!(table.contains(policy), "{table}");
        let generated = events.join(format!("{policy}.trace.json"));
        let text = std::fs::read_to_string(&generated).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["policy"]["dynamo_block_tokens"], 512, "{policy}");
        let replayed: Value =
            serde_json::from_str(&ok(&["replay", s(&generated), "--format", "json"])).unwrap();
        let runs: Vec<&str> = replayed["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["policy"].as_str().unwrap())
            .collect();
        assert_eq!(runs, FIVE, "{policy}");
    }
    assert!(!events.join("dynamo_default.trace.json").exists());
}

#[test]
fn import_mooncake_sets_the_member_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let lines =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mooncake/three-lines.jsonl");
    let out = dir.path().join("trace.json");
    ok(&[
        "import",
        "mooncake",
        s(&lines),
        "--dynamo-block-tokens",
        "512",
        "-o",
        s(&out),
    ]);
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(trace["policy"]["dynamo_block_tokens"], 512);
    let receipt: Value =
        serde_json::from_str(&ok(&["replay", s(&out), "--format", "json"])).unwrap();
    assert_eq!(receipt["runs"].as_array().unwrap().len(), 5);
    // Without the option the trace has no such member; 0 is refused and nothing written.
    let plain = dir.path().join("plain.json");
    ok(&["import", "mooncake", s(&lines), "-o", s(&plain)]);
    assert!(!std::fs::read_to_string(&plain)
        .unwrap()
        .contains("dynamo_block_tokens"));
    let zero = dir.path().join("zero.json");
    let refused = kvroute(&[
        "import",
        "mooncake",
        s(&lines),
        "--dynamo-block-tokens",
        "0",
        "-o",
        s(&zero),
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr)
            .contains("dynamo_block_tokens: expected a positive integer, found 0"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!zero.exists());
}
