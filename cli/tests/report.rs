//! `kvroute report` and `kvroute diff` end to end, without a browser: the page is parsed
//! as HTML and its structure checked against the receipt; the diff is checked against
//! the receipt's own `chosen` fields.

use scraper::{Html, Selector};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "support/lab_dynamo.rs"]
mod lab_dynamo;

fn kvroute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn ok(args: &[&str]) -> Output {
    let out = kvroute(args);
    assert!(
        out.status.success(),
        "kvroute {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn lab_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/lab/trace.json")
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

fn receipt_of(trace: &Path) -> Value {
    serde_json::from_slice(&ok(&["replay", s(trace), "--format", "json"]).stdout).unwrap()
}

fn select<'a>(html: &'a Html, selector: &str) -> Vec<scraper::ElementRef<'a>> {
    html.select(&Selector::parse(selector).unwrap()).collect()
}

fn report_of(args: &[&str]) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", s(&out)]);
    ok(&all);
    (std::fs::read_to_string(&out).unwrap(), dir)
}

#[test]
fn the_lab_report_plots_one_point_per_receipt_row_of_every_decision() {
    let receipt = receipt_of(&lab_trace());
    let (page, _dir) = report_of(&[]);
    let html = Html::parse_document(&page);
    let articles = select(&html, "article.decision");
    let mut expected = BTreeSet::new();
    for run in receipt["runs"].as_array().unwrap() {
        for d in run["decisions"].as_array().unwrap() {
            expected.insert((
                run["policy"].as_str().unwrap().to_owned(),
                d["seq"].as_u64().unwrap(),
                d["candidates"].as_array().unwrap().len(),
            ));
        }
    }
    let mut found = BTreeSet::new();
    let marker = Selector::parse(r#"svg circle[r="7"]"#).unwrap();
    let row = Selector::parse("table.rows tbody tr").unwrap();
    for article in &articles {
        let attr = |name| article.value().attr(name).unwrap().to_owned();
        let points = article.select(&marker).count();
        let rows: usize = attr("data-rows").parse().unwrap();
        assert_eq!(
            points,
            rows,
            "{} seq {}",
            attr("data-policy"),
            attr("data-seq")
        );
        assert_eq!(article.select(&row).count(), rows);
        found.insert((attr("data-policy"), attr("data-seq").parse().unwrap(), rows));
    }
    // The lab trace is small: every decision of every policy is kept in detail.
    assert_eq!(found, expected);
    assert!(page.contains("Every decision of every policy is shown in detail."));
}

#[test]
fn the_lab_report_is_self_contained_and_has_every_section() {
    let (page, _dir) = report_of(&[]);
    let html = Html::parse_document(&page);
    assert!(
        html.errors.is_empty(),
        "HTML parse errors: {:?}",
        html.errors
    );
    for id in [
        "comparison",
        "pareto",
        "work",
        "shadow",
        "logs",
        "cohorts",
        "selfcheck",
    ] {
        assert_eq!(select(&html, &format!("#{id}")).len(), 1, "#{id}");
    }
    let csp = select(&html, r#"meta[http-equiv="Content-Security-Policy"]"#);
    assert!(csp[0]
        .value()
        .attr("content")
        .unwrap()
        .starts_with("default-src 'none'"));
    // Nothing is loaded from anywhere: no external scripts, styles, images or fonts.
    assert!(select(&html, "script[src], link, img[src], iframe, object").is_empty());
    for needle in ["http://", "https://", "url(", "@import", "@font-face"] {
        let hits: Vec<&str> = page
            .match_indices(needle)
            .map(|(i, _)| &page[i.saturating_sub(40)..(i + 40).min(page.len())])
            .filter(|context| !context.contains("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "{needle} in the page: {hits:?}");
    }
    // One bar chart per metric and one assigned-work chart per policy.
    assert_eq!(select(&html, "#comparison figure.bar svg").len(), 9);
    assert_eq!(select(&html, "#work figure svg").len(), 4);
    assert_eq!(select(&html, "table.metrics tbody tr").len(), 4);
    // The lab trace has a model and a LoRA adapter cohort.
    let cohorts: BTreeSet<String> = select(&html, "table.cohorts tbody tr td:nth-child(2)")
        .iter()
        .map(|td| td.text().collect())
        .collect();
    assert!(cohorts.len() >= 2, "{cohorts:?}");
    assert!(page.len() < 10_000_000);
}

#[test]
fn the_comparison_table_shows_the_receipts_metrics() {
    let receipt = receipt_of(&lab_trace());
    let (page, _dir) = report_of(&[]);
    let html = Html::parse_document(&page);
    let rows = select(&html, "table.metrics tbody tr");
    let td = Selector::parse("td").unwrap();
    for (run, row) in receipt["runs"].as_array().unwrap().iter().zip(rows) {
        let cells: Vec<String> = row.select(&td).map(|c| c.text().collect()).collect();
        let m = &run["metrics"];
        let wanted = [
            "routed",
            "rejected",
            "cache_hits",
            "reused_tokens",
            "recomputed_tokens",
            "route_churn",
            "load_skew_milli",
            "latency_proxy_mean_milli",
            "latency_proxy_p95_milli",
            "stale_event_rejections",
            "stale_observation_rejections",
            "boundary_rejections",
            "overload_escapes",
            "dominated_choices",
        ];
        let expected: Vec<String> = wanted.iter().map(|k| m[k].to_string()).collect();
        assert_eq!(cells, expected, "{}", run["policy"]);
    }
}

#[test]
fn a_report_of_the_receipt_with_its_trace_is_the_report_of_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("receipt.json");
    ok(&[
        "replay",
        s(&lab_trace()),
        "--format",
        "json",
        "--out",
        s(&receipt),
    ]);
    let (from_trace, _a) = report_of(&[s(&lab_trace())]);
    let (from_receipt, _b) = report_of(&[s(&receipt), "--trace", s(&lab_trace())]);
    // The page names its source, HTML-escaped; everything else is the same.
    let escaped = |path: &Path| s(path).replace('/', "&#x2f;");
    assert!(
        from_receipt.replace(&escaped(&receipt), "SOURCE")
            == from_trace.replace(&escaped(&lab_trace()), "SOURCE"),
        "the two pages differ"
    );
    // Without the trace, everything but the cohorts is still there.
    let (bare, _c) = report_of(&[s(&receipt)]);
    assert!(bare.contains("A receipt names no request's model or adapter"));
    assert_eq!(
        Html::parse_document(&bare)
            .select(&Selector::parse("article.decision").unwrap())
            .count(),
        116
    );
}

#[test]
fn report_errors_name_the_path_and_leave_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.html");
    let missing = dir.path().join("missing.json");
    let run = kvroute(&["report", s(&missing), "-o", s(&out)]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains(s(&missing)));

    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, br#"{"format":"kvroute-receipt/1","runs":3}"#).unwrap();
    let run = kvroute(&["report", s(&bad), "-o", s(&out)]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.starts_with(&format!("{}: not a valid kvroute-receipt/1", s(&bad))),
        "{stderr}"
    );

    // A receipt with a trace it was not made from.
    let receipt = dir.path().join("receipt.json");
    ok(&[
        "replay",
        s(&lab_trace()),
        "--format",
        "json",
        "--out",
        s(&receipt),
    ]);
    let other = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/stale_epoch/trace.json");
    let run = kvroute(&["report", s(&receipt), "--trace", s(&other), "-o", s(&out)]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("is not the receipt's trace_digest"));

    let unwritable = dir.path().join("no-such-dir").join("report.html");
    let run = kvroute(&["report", "-o", s(&unwritable)]);
    assert_eq!(run.status.code(), Some(1));
    assert!(!out.exists() && !unwritable.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "only the inputs"
    );
}

fn chosen_by_seq(run: &Value) -> Vec<(u64, Value)> {
    run["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["seq"].as_u64().unwrap(), d["chosen"].clone()))
        .collect()
}

fn differing_seqs(a: &Value, b: &Value) -> Vec<u64> {
    chosen_by_seq(a)
        .into_iter()
        .zip(chosen_by_seq(b))
        .filter(|((_, x), (_, y))| x != y)
        .map(|((seq, _), _)| seq)
        .collect()
}

fn diff_json(args: &[&str]) -> Value {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    serde_json::from_slice(&ok(&all).stdout).unwrap()
}

#[test]
fn diff_lists_exactly_the_decisions_whose_chosen_differ_in_the_receipt() {
    let receipt = receipt_of(&lab_trace());
    let runs = receipt["runs"].as_array().unwrap();
    for base in runs {
        for cand in runs {
            let (b, c) = (
                base["policy"].as_str().unwrap(),
                cand["policy"].as_str().unwrap(),
            );
            let diff = diff_json(&[s(&lab_trace()), "--baseline", b, "--candidate", c]);
            let listed: Vec<u64> = diff["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["seq"].as_u64().unwrap())
                .collect();
            assert_eq!(listed, differing_seqs(base, cand), "{b} -> {c}");
            assert_eq!(diff["summary"]["differing"], listed.len());
            // Each entry carries both chosen rows as the receipt has them.
            for entry in diff["decisions"].as_array().unwrap() {
                let seq = entry["seq"].as_u64().unwrap();
                for (side, run) in [("baseline", base), ("candidate", cand)] {
                    let decision = run["decisions"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|d| d["seq"] == seq)
                        .unwrap();
                    let row = decision["candidates"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| r["worker"] == decision["chosen"]);
                    assert_eq!(
                        Some(&entry[side]),
                        row.or(Some(&Value::Null)),
                        "{side} {seq}"
                    );
                }
            }
        }
    }
}

#[test]
fn diff_of_two_receipts_compares_their_cache_plus_load_runs() {
    let dir = tempfile::tempdir().unwrap();
    // The same requests with decode weighed a tenth as much.
    let text = std::fs::read_to_string(lab_trace()).unwrap();
    let mut trace: Value = serde_json::from_str(&text).unwrap();
    trace["policy"]["decode_weight_milli"] = Value::from(100);
    let other_trace = dir.path().join("other.json");
    std::fs::write(&other_trace, serde_json::to_vec(&trace).unwrap()).unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    ok(&[
        "replay",
        s(&lab_trace()),
        "--format",
        "json",
        "--out",
        s(&a),
    ]);
    ok(&[
        "replay",
        s(&other_trace),
        "--format",
        "json",
        "--out",
        s(&b),
    ]);
    let diff = diff_json(&[s(&a), s(&b), "--trace", s(&lab_trace())]);
    let (ra, rb) = (receipt_of(&lab_trace()), receipt_of(&other_trace));
    let listed: Vec<u64> = diff["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["seq"].as_u64().unwrap())
        .collect();
    let expected = differing_seqs(&ra["runs"][3], &rb["runs"][3]);
    assert!(
        !expected.is_empty(),
        "the lighter decode weight changes some choice"
    );
    assert_eq!(listed, expected);
    assert!(diff["decisions"][0]["latency_proxy_delta_milli"].is_i64());

    // Table and CSV list the same decisions.
    let table = String::from_utf8(ok(&["diff", s(&a), s(&b)]).stdout).unwrap();
    let last = table.lines().last().unwrap();
    assert!(
        last.starts_with(&format!("diff: {} of 29 decisions differ", expected.len())),
        "{last}"
    );
    assert_eq!(table.lines().count(), expected.len() + 2);
    let csv = String::from_utf8(ok(&["diff", s(&a), s(&b), "--format", "csv"]).stdout).unwrap();
    assert_eq!(csv.lines().count(), expected.len() + 1);
    assert!(csv.starts_with("seq,tick,request,baseline_worker,"));
}

#[test]
fn diff_refuses_runs_of_different_requests_and_half_named_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let other = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/stale_epoch/trace.json");
    ok(&[
        "replay",
        s(&lab_trace()),
        "--format",
        "json",
        "--out",
        s(&a),
    ]);
    ok(&["replay", s(&other), "--format", "json", "--out", s(&b)]);
    let run = kvroute(&["diff", s(&a), s(&b)]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("do not route the same requests"));

    let run = kvroute(&["diff", s(&lab_trace()), "--baseline", "least_load"]);
    assert_eq!(run.status.code(), Some(2));
    let run = kvroute(&[
        "diff",
        s(&lab_trace()),
        "--baseline",
        "fastest",
        "--candidate",
        "x",
    ]);
    assert_eq!(run.status.code(), Some(2));
}

/// Two workers of one model: `a` busy (1,000 queued tokens, draining 100 a tick) with
/// the request's 40-token prefix cached, `b` idle and cold. `model` replaces the model
/// of both, so a second trace can make the one request unservable.
fn two_worker_trace(dir: &Path, name: &str, model: &str) -> PathBuf {
    let worker = |id: &str, queued: u64, cache: Value| {
        serde_json::json!({ "id": id, "model": model, "adapters": [], "prefill_rate": 100,
            "decode_rate": 10, "queued_prefill": queued, "active_decode": 0,
            "observed_tick": 0, "epoch": 0, "cache": cache })
    };
    let trace = serde_json::json!({
        "format": "kvroute-trace/1",
        "workers": [
            worker("a", 1000, serde_json::json!([{ "tenant": "t", "model": model,
                "adapter": "base", "key": "k", "tokens": 40 }])),
            worker("b", 0, serde_json::json!([])),
        ],
        "events": [{ "seq": 1, "tick": 1, "type": "request", "id": "r1", "tenant": "t",
            "model": "m", "adapter": "base", "prefix": [{ "key": "k", "tokens": 40 }],
            "prompt_tokens": 50, "decode_tokens": 1 }],
    });
    let path = dir.join(name);
    std::fs::write(&path, trace.to_string()).unwrap();
    path
}

/// `diff`'s figures against ones worked by hand, so a flipped sign
/// fails. At tick 1, `a` has drained to 900 queued tokens.
/// Round robin takes `a` (the first in id order): it reuses 40 and recomputes 10, so its
/// latency proxy is floor(1000 · (900 + 10) / 100) = 9,100. Least load takes the idle
/// `b`: recomputes all 50, floor(1000 · (0 + 50) / 100) = 500. Candidate minus baseline:
/// recomputed +40, latency proxy -8,600.
#[test]
fn diff_deltas_are_candidate_minus_baseline_as_worked_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let trace = two_worker_trace(dir.path(), "t.json", "m");
    let args = [
        "diff",
        s(&trace),
        "--baseline",
        "round_robin",
        "--candidate",
        "least_load",
    ];
    let json = |extra: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.extend(extra);
        serde_json::from_slice(&ok(&all).stdout).unwrap()
    };
    let diff = json(&["--format", "json"]);
    let decision = &diff["decisions"][0];
    assert_eq!(decision["baseline"]["worker"], "a");
    assert_eq!(decision["candidate"]["worker"], "b");
    assert_eq!(decision["recomputed_delta"], 40);
    assert_eq!(decision["latency_proxy_delta_milli"], -8600);
    let summary = &diff["summary"];
    assert_eq!(
        (
            &summary["baseline_recomputed"],
            &summary["candidate_recomputed"],
            &summary["baseline_latency_proxy_milli"],
            &summary["candidate_latency_proxy_milli"],
        ),
        (
            &Value::from(10),
            &Value::from(50),
            &Value::from(9100),
            &Value::from(500)
        )
    );
    let csv = String::from_utf8(ok(&[&args[..], &["--format", "csv"]].concat()).stdout).unwrap();
    let row = csv.lines().nth(1).unwrap();
    assert!(row.ends_with(",40,-8600"), "{row}");
}

/// A decision that one receipt routes and the other rejects is a difference, and a
/// diff that left it out would hide a change of outcome. The second trace serves only model `x`.
#[test]
fn diff_lists_a_decision_routed_in_one_receipt_and_rejected_in_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (routed, rejected) = (dir.path().join("r1.json"), dir.path().join("r2.json"));
    for (receipt, model) in [(&routed, "m"), (&rejected, "x")] {
        let trace = two_worker_trace(dir.path(), &format!("{model}.json"), model);
        ok(&["replay", s(&trace), "--format", "json", "--out", s(receipt)]);
    }
    let both = ["--baseline", "least_load", "--candidate", "least_load"];
    let diff: Value = serde_json::from_slice(
        &ok(&[
            &["diff", s(&routed), s(&rejected)][..],
            &both,
            &["--format", "json"],
        ]
        .concat())
        .stdout,
    )
    .unwrap();
    assert_eq!(diff["summary"]["differing"], 1);
    let decision = &diff["decisions"][0];
    assert_eq!(decision["baseline"]["worker"], "b");
    assert_eq!(decision["candidate"], Value::Null);
    let table =
        String::from_utf8(ok(&[&["diff", s(&routed), s(&rejected)][..], &both].concat()).stdout)
            .unwrap();
    assert!(
        table.lines().nth(1).unwrap().contains("| rejected"),
        "{table}"
    );
}

/// The table's header names the columns its rows fill: every `|` of the header is where
/// the rows have theirs, so a header one column off fails.
#[test]
fn the_diff_table_header_lines_up_with_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let trace = two_worker_trace(dir.path(), "t.json", "m");
    let table = String::from_utf8(
        ok(&[
            "diff",
            s(&trace),
            "--baseline",
            "round_robin",
            "--candidate",
            "least_load",
        ])
        .stdout,
    )
    .unwrap();
    let bars = |line: &str| -> Vec<usize> {
        line.char_indices()
            .filter(|&(_, c)| c == '|')
            .map(|(i, _)| i)
            .collect()
    };
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(bars(lines[0]).len(), 3, "{table}");
    assert_eq!(bars(lines[0]), bars(lines[1]), "{table}");
    assert_eq!(lines[0].len(), lines[1].len(), "{table}");
}

/// When nothing differs the table is the summary line alone, not a bare header (issue
/// 25's friction list).
#[test]
fn a_diff_with_no_difference_prints_its_summary_only() {
    let table = String::from_utf8(
        ok(&[
            "diff",
            s(&lab_trace()),
            "--baseline",
            "least_load",
            "--candidate",
            "least_load",
        ])
        .stdout,
    )
    .unwrap();
    assert_eq!(table.lines().count(), 1, "{table}");
    assert!(
        table.starts_with("diff: 0 of 29 decisions differ"),
        "{table}"
    );
}

/// The article of one decision on a page.
fn article<'a>(html: &'a Html, policy: &str, seq: u64) -> scraper::ElementRef<'a> {
    let selector = format!(r#"article.decision[data-policy="{policy}"][data-seq="{seq}"]"#);
    let found = select(html, &selector);
    assert_eq!(found.len(), 1, "{selector}");
    found[0]
}

/// The chosen worker's ring (the one circle of radius 12 in a Pareto chart) is drawn on
/// every routed decision, cold or hit, and on no rejected one; cold routes are where
/// it is easiest to leave off. In the two-worker trace round robin takes `a`
/// (a hit: 40 tokens cached), least load the idle `b` (cold); with model `x` served
/// nowhere, every policy rejects.
#[test]
fn the_chosen_ring_is_drawn_on_cold_and_hit_routes_and_not_on_rejections() {
    let dir = tempfile::tempdir().unwrap();
    let ring = Selector::parse(r#"svg circle[r="12"]"#).unwrap();
    let facts = Selector::parse("p.facts").unwrap();
    let routed = two_worker_trace(dir.path(), "m.json", "m");
    let (page, _out) = report_of(&[s(&routed)]);
    let html = Html::parse_document(&page);
    for (policy, route) in [("round_robin", "hit"), ("least_load", "cold")] {
        let decision = article(&html, policy, 1);
        let text: String = decision.select(&facts).next().unwrap().text().collect();
        assert!(text.contains(&format!("route {route}")), "{policy}: {text}");
        assert_eq!(decision.select(&ring).count(), 1, "{policy} ({route})");
    }
    let rejected = two_worker_trace(dir.path(), "x.json", "x");
    let (page, _out) = report_of(&[s(&rejected)]);
    let html = Html::parse_document(&page);
    let decision = article(&html, "least_load", 1);
    let text: String = decision.select(&facts).next().unwrap().text().collect();
    assert!(text.contains("route rejected"), "{text}");
    assert_eq!(decision.select(&ring).count(), 0);
}

/// The cohort table against figures worked by hand, so its hit count is pinned. One request
/// of model `m`, adapter `base`: round robin and longest prefix take `a`, a hit that reuses
/// 40 and recomputes 10 (latency proxy 9,100, see
/// `diff_deltas_are_candidate_minus_baseline_as_worked_by_hand`); least load takes the cold
/// `b`: no hit, recomputes 50, latency proxy 500.
#[test]
fn the_cohort_table_counts_hits_as_worked_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let trace = two_worker_trace(dir.path(), "t.json", "m");
    let (page, _out) = report_of(&[s(&trace)]);
    let html = Html::parse_document(&page);
    let td = Selector::parse("td").unwrap();
    let rows: Vec<Vec<String>> = select(&html, "table.cohorts tbody tr")
        .iter()
        .map(|tr| tr.select(&td).map(|c| c.text().collect()).collect())
        .collect();
    let row = |policy: &str| -> Vec<&str> {
        let found: Vec<&Vec<String>> = rows.iter().filter(|r| r[2] == policy).collect();
        assert_eq!(found.len(), 1, "{policy}: {rows:?}");
        found[0].iter().map(String::as_str).collect()
    };
    // model, adapter, policy, requests, routed, hits, reused, recomputed, latency mean_m
    let hit = [
        "m",
        "base",
        "round_robin",
        "1",
        "1",
        "1",
        "40",
        "10",
        "9100",
    ];
    assert_eq!(row("round_robin"), hit);
    let hit = [
        "m",
        "base",
        "longest_prefix",
        "1",
        "1",
        "1",
        "40",
        "10",
        "9100",
    ];
    assert_eq!(row("longest_prefix"), hit);
    let cold = ["m", "base", "least_load", "1", "1", "0", "0", "50", "500"];
    assert_eq!(row("least_load"), cold);
}

/// A close call is a runner-up strictly within 1,000 milli of the winner, so `<`
/// and `<=` differ here. Worker `a` caches the request's 1-token prefix and is idle; `b`
/// caches nothing and has one active decode, weighed 999 milli. Least load takes `a`
/// with margin 999 (b's work): a close call. Longest prefix takes `a` with margin
/// 1000 · (1 - 0) = 1,000: exactly the margin, not a close call.
#[test]
fn a_margin_of_exactly_one_token_is_not_a_close_call() {
    let dir = tempfile::tempdir().unwrap();
    let worker = |id: &str, active_decode: u64, cache: Value| {
        serde_json::json!({ "id": id, "model": "m", "adapters": [], "prefill_rate": 100,
            "decode_rate": 10, "queued_prefill": 0, "active_decode": active_decode,
            "observed_tick": 0, "epoch": 0, "cache": cache })
    };
    let trace = serde_json::json!({
        "format": "kvroute-trace/1",
        "policy": { "decode_weight_milli": 999 },
        "workers": [
            worker("a", 0, serde_json::json!([{ "tenant": "t", "model": "m",
                "adapter": "base", "key": "k", "tokens": 1 }])),
            worker("b", 1, serde_json::json!([])),
        ],
        "events": [{ "seq": 1, "tick": 0, "type": "request", "id": "r1", "tenant": "t",
            "model": "m", "adapter": "base", "prefix": [{ "key": "k", "tokens": 1 }],
            "prompt_tokens": 50, "decode_tokens": 1 }],
    });
    let path = dir.path().join("margin.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    let (page, _out) = report_of(&[s(&path)]);
    let html = Html::parse_document(&page);
    let kinds = |policy| -> (String, String) {
        let decision = article(&html, policy, 1);
        let facts = Selector::parse("p.facts").unwrap();
        let text: String = decision.select(&facts).next().unwrap().text().collect();
        let kinds = decision.value().attr("data-kinds").unwrap().to_owned();
        (kinds, text)
    };
    let (least_load, text) = kinds("least_load");
    assert!(text.contains("margin 999 milli"), "{text}");
    assert_eq!(least_load, "close_call");
    let (longest_prefix, text) = kinds("longest_prefix");
    assert!(text.contains("margin 1000 milli"), "{text}");
    assert_eq!(longest_prefix, "");
}

/// The page's budget is bytes, not decisions: long request ids would otherwise make a page
/// of tens of megabytes. Each id is shown cut, with its length, and the page says so; every
/// decision is still shown in detail.
#[test]
fn request_ids_of_200_kb_keep_the_page_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace: Value =
        serde_json::from_str(&std::fs::read_to_string(lab_trace()).unwrap()).unwrap();
    let padding = "x".repeat(200_000);
    for event in trace["events"].as_array_mut().unwrap() {
        if event["type"] == "request" {
            let id = format!("{}-{padding}", event["id"].as_str().unwrap());
            event["id"] = Value::from(id);
        }
    }
    let path = dir.path().join("long-ids.json");
    std::fs::write(&path, trace.to_string()).unwrap();
    let (page, _out) = report_of(&[s(&path)]);
    assert!(page.len() <= 10_000_000, "{} bytes", page.len());
    let html = Html::parse_document(&page);
    let note: String = select(&html, "#ids-note")[0].text().collect();
    assert!(
        note.starts_with("29 request ids are longer than 64 bytes"),
        "{note}"
    );
    assert_eq!(select(&html, "article.decision").len(), 116);
    let code = Selector::parse("h3 code").unwrap();
    let first = article(&html, "least_load", 2);
    let shown: String = first.select(&code).next().unwrap().text().collect();
    assert!(shown.starts_with("acme-01-xxx"), "{shown}");
    assert!(shown.ends_with("… (200008 bytes)"), "{shown}");
    assert!(shown.len() < 64, "{shown}");
}

/// The cohort table of the lab report, row by row.
fn cohort_rows(page: &str) -> Vec<String> {
    let html = Html::parse_document(page);
    select(&html, "table.cohorts tbody tr")
        .iter()
        .map(|tr| tr.text().collect::<Vec<_>>().join("|"))
        .collect()
}

/// A receipt written with `replay --id-key` has keyed request ids: with the same
/// `--id-key`, the report keys the trace's ids too and its cohorts are the unkeyed
/// receipt's; without it, page and stderr say the cohorts cannot be matched,
/// rather than a table of one row per policy with an empty model and adapter.
#[test]
fn a_keyed_receipt_matches_its_cohorts_through_the_same_id_key() {
    let dir = tempfile::tempdir().unwrap();
    let (key, keyed, plain) = (
        dir.path().join("key"),
        dir.path().join("keyed.json"),
        dir.path().join("plain.json"),
    );
    std::fs::write(&key, b"a secret key").unwrap();
    let lab = lab_trace();
    let replay = ["replay", s(&lab), "--format", "json", "--out"];
    ok(&[&replay[..], &[s(&keyed), "--id-key", s(&key)]].concat());
    ok(&[&replay[..], &[s(&plain)]].concat());
    let trace = ["--trace", s(&lab)];

    let (unkeyed_page, _a) = report_of(&[&[s(&plain)][..], &trace].concat());
    let expected = cohort_rows(&unkeyed_page);
    assert!(expected.len() >= 8, "{expected:?}");
    let (keyed_page, _b) = report_of(&[&[s(&keyed)][..], &trace, &["--id-key", s(&key)]].concat());
    assert_eq!(cohort_rows(&keyed_page), expected);

    let out = dir.path().join("report.html");
    let run = ok(&[
        "report",
        s(&keyed),
        "--trace",
        s(&lab_trace()),
        "-o",
        s(&out),
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("cohorts cannot be matched"), "{stderr}");
    assert!(stderr.contains("--id-key FILE"), "{stderr}");
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(cohort_rows(&page).is_empty());
    let html = Html::parse_document(&page);
    let said: String = select(&html, "#cohorts-unmatched")[0].text().collect();
    assert!(said.starts_with("Cohorts cannot be matched"), "{said}");

    // Another key matches nothing either, and says so.
    let other = dir.path().join("other-key");
    std::fs::write(&other, b"another key").unwrap();
    let run = ok(&[
        &["report", s(&keyed)][..],
        &trace,
        &["--id-key", s(&other), "-o", s(&out)],
    ]
    .concat());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("not the key it was written with"),
        "{stderr}"
    );

    // A key without a trace has nothing to key, and an empty key is refused.
    let run = kvroute(&["report", s(&keyed), "--id-key", s(&key), "-o", s(&out)]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains(s(&key)));
    let empty = dir.path().join("empty-key");
    std::fs::write(&empty, b"").unwrap();
    let run = kvroute(
        &[
            &["report", s(&keyed)][..],
            &trace,
            &["--id-key", s(&empty), "-o", s(&out)],
        ]
        .concat(),
    );
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("the id key is empty"), "{stderr}");
}

/// `report` and `diff` read a JSON Lines receipt (SPEC.md §6.4) as the JSON receipt its
/// lines make, not as one JSON document: the page is the
/// one the JSON receipt gives, but for the file name it shows.
#[test]
fn a_json_lines_receipt_gives_the_page_of_its_json_receipt() {
    let dir = tempfile::tempdir().unwrap();
    let (jsonl, json) = (dir.path().join("r.jsonl"), dir.path().join("r.json"));
    ok(&["replay", "--format", "jsonl", "--out", s(&jsonl)]);
    ok(&["replay", "--format", "json", "--out", s(&json)]);
    let page = |receipt: &Path, name: &str| {
        let out = dir.path().join(format!("{name}.html"));
        ok(&["report", s(receipt), "-o", s(&out)]);
        let name = receipt.file_name().unwrap().to_str().unwrap();
        std::fs::read_to_string(&out)
            .unwrap()
            .replace(s(receipt), "RECEIPT")
            .replace(name, "RECEIPT")
    };
    assert_eq!(page(&jsonl, "a"), page(&json, "b"));
    let diff = |receipt: &Path| {
        ok(&[
            "diff",
            s(receipt),
            "--baseline",
            "least_load",
            "--candidate",
            "cache_plus_load",
            "--format",
            "json",
        ])
        .stdout
    };
    assert_eq!(diff(&jsonl), diff(&json));
}

fn join_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/join")
        .join(name)
}

/// The cells of `selector`'s rows, each row's `th` and `td` texts in order.
fn rows(html: &Html, selector: &str) -> Vec<Vec<String>> {
    select(html, selector)
        .into_iter()
        .map(|row| {
            row.select(&Selector::parse("th, td").unwrap())
                .map(|cell| cell.text().collect::<String>().trim().to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn completions_add_a_panel_with_the_joins_figures_and_nothing_else_changes() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json");
    ok(&["replay", "--format", "json", "--out", s(&receipt)]);
    let completions = join_fixture("lab.completions.jsonl");
    let (page, _dir) = report_of(&[
        s(&receipt),
        "--completions",
        s(&completions),
        "--slo",
        "ttft_ms=200,tpot_ms=20",
    ]);
    let html = Html::parse_document(&page);
    let counts = rows(&html, "#completions table.completions-counts tbody tr");
    let figure = |name: &str| {
        counts
            .iter()
            .find(|row| row[0] == name)
            .map(|row| row[1].clone())
            .unwrap_or_else(|| panic!("no {name} in {counts:?}"))
    };
    // The figures of fixtures/join/README.md.
    for (name, value) in [
        ("matched", "7"),
        ("dropped", "21"),
        ("unrouted", "1"),
        ("retried", "1"),
        ("error_rate_pm", "142"),
        ("ttft_rank_gamma_pm", "-143"),
        ("good", "2"),
        ("good_pm", "71"),
        ("good_per_second_milli", "1333"),
    ] {
        assert_eq!(figure(name), value, "{name}");
    }
    let workers = rows(&html, "#completions table.completions-workers tbody tr");
    assert_eq!(
        workers[0],
        ["w0", "2", "210250", "11125", "892000", "235 ▲ runs low"]
    );
    assert_eq!(workers[1], ["w1", "1", "50000", "30000", "2600000", "19"]);
    assert_eq!(workers.len(), 4);
    assert_eq!(select(&html, "nav a[href='#completions']").len(), 1);
    // The same page from the trace itself; without --slo the goodput rows give way to
    // a note; without --completions there is no panel at all.
    let (from_trace, _dir) = report_of(&["--completions", s(&completions)]);
    let html = Html::parse_document(&from_trace);
    assert_eq!(select(&html, "#completions-no-slo").len(), 1);
    assert!(
        rows(&html, "#completions table.completions-counts tbody tr")
            .iter()
            .all(|row| row[0] != "good")
    );
    let (plain, _dir) = report_of(&[]);
    assert!(!plain.contains("id=\"completions\""));
}

/// The panel states the SLO declared in milliseconds with the fewest decimals that say
/// it exactly (SPEC.md §14.6), whichever spelling `--slo` used; the goodput follows the
/// objectives to the microsecond (acme-08 of the fixture is at 400.25 ms and
/// 15.999 ms, fixtures/join/README.md).
#[test]
fn the_completions_panel_states_the_objectives_in_exact_milliseconds() {
    let completions = join_fixture("lab.completions.jsonl");
    for (slo, stated, good) in [
        (
            "ttft_ms=200,tpot_ms=20",
            "SLO: ttft ≤ 200 ms, tpot ≤ 20 ms.",
            "2",
        ),
        (
            "ttft:400.25,tpot_ms=15.999",
            "SLO: ttft ≤ 400.25 ms, tpot ≤ 15.999 ms.",
            "4",
        ),
        (
            "tpot:15.999,ttft_ms=400.249",
            "SLO: ttft ≤ 400.249 ms, tpot ≤ 15.999 ms.",
            "3",
        ),
        ("ttft_ms=0.5", "SLO: ttft ≤ 0.5 ms.", "0"),
        ("tpot:50", "SLO: tpot ≤ 50 ms.", "5"),
    ] {
        let (page, _dir) = report_of(&["--completions", s(&completions), "--slo", slo]);
        let html = Html::parse_document(&page);
        let caption = select(&html, "#completions p.caption")[0]
            .text()
            .collect::<String>();
        assert!(caption.contains(stated), "{slo}: {caption}");
        let counts = rows(&html, "#completions table.completions-counts tbody tr");
        let good_row = counts.iter().find(|row| row[0] == "good").unwrap();
        assert_eq!(good_row[1], good, "{slo}");
    }
    let (page, _dir) = report_of(&["--completions", s(&completions)]);
    let html = Html::parse_document(&page);
    let caption = select(&html, "#completions p.caption")[0]
        .text()
        .collect::<String>();
    assert!(caption.contains("SLO: none declared."), "{caption}");
}

#[test]
fn a_completions_error_is_the_joins_and_writes_no_page() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"colour\":1}\n").unwrap();
    let out = dir.path().join("report.html");
    let failed = kvroute(&["report", "--completions", s(&bad), "-o", s(&out)]);
    assert_eq!(failed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&failed.stderr)
        .contains(":1: cannot tell the completions format from this line"));
    assert!(!out.exists());
    let usage = kvroute(&["report", "--slo", "ttft_ms=1", "-o", s(&out)]);
    assert_eq!(usage.status.code(), Some(2));
}

/// The page's title and heading name what it reports, a receipt or a trace, not "lab"
/// whatever the input.
#[test]
fn the_title_names_the_receipt_or_trace_reported() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("served.receipt.json");
    ok(&["replay", "--format", "json", "--out", s(&receipt)]);
    let (page, _page_dir) = report_of(&[s(&receipt)]);
    let html = Html::parse_document(&page);
    let title = select(&html, "title")[0].text().collect::<String>();
    let heading = select(&html, "h1")[0].text().collect::<String>();
    for text in [&title, &heading] {
        assert_eq!(text, &format!("kvroute report: {}", s(&receipt)));
    }
    let (page, _page_dir) = report_of(&[s(&lab_trace())]);
    let html = Html::parse_document(&page);
    let title = select(&html, "title")[0].text().collect::<String>();
    assert_eq!(title, format!("kvroute report: {}", s(&lab_trace())));
}

/// A receipt whose served run repeats a request id is the join's error (SPEC.md §14.1),
/// named with the receipt, the repeat's path and the id: its one completion would
/// otherwise be matched once per decision. Exit 2, no page.
#[test]
fn a_completions_join_refuses_a_run_that_repeats_a_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut receipt = receipt_of(&lab_trace());
    let decisions = &mut receipt["runs"][3]["decisions"];
    let repeated = decisions[2]["request"].as_str().unwrap().to_owned();
    decisions[5]["request"] = Value::from(repeated.clone());
    let path = dir.path().join("spliced.receipt.json");
    std::fs::write(&path, serde_json::to_vec(&receipt).unwrap()).unwrap();
    let out = dir.path().join("report.html");
    let completions = join_fixture("lab.completions.jsonl");
    let failed = kvroute(&[
        "report",
        s(&path),
        "--completions",
        s(&completions),
        "-o",
        s(&out),
    ]);
    assert_eq!(failed.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: not a kvroute receipt: runs[3].decisions[5].request: repeated request id \"{repeated}\", first at runs[3].decisions[2]",
            s(&path)
        )),
        "{stderr}"
    );
    assert!(!out.exists());
}

/// A parts-table row: its group and its fourteen figures, credits' `−` taken off.
fn parts_rows(html: &Html) -> Vec<(String, Vec<u128>)> {
    rows(html, "#missed table.missed-parts tbody tr")
        .into_iter()
        .map(|row| {
            let figures = row[1..]
                .iter()
                .map(|f| f.trim_start_matches('−').parse().unwrap())
                .collect();
            (row[0].clone(), figures)
        })
        .collect()
}

/// Every parts row adds up to its lost tokens, and the serving workers' rows (with
/// `outside the fleet`) and the cohorts' rows each add up to the run's.
fn assert_parts_add_up(rows: &[(String, Vec<u128>)]) {
    assert_eq!(rows[0].0, "run");
    for (group, f) in rows {
        // lost = workload + boundary + routing (2) + elsewhere_lost − gained + phantom − missed.
        assert_eq!(
            f[3] + f[9] + f[11],
            f[4] + f[5] + f[6] + f[7] + f[8] + f[10],
            "{group}: {f:?}"
        );
        assert_eq!(f[3], f[1] - f[2], "{group}: lost = prompt − cached");
    }
    let sum_of = |pick: &dyn Fn(&str) -> bool| -> Vec<u128> {
        let picked: Vec<&Vec<u128>> = rows
            .iter()
            .filter(|(g, _)| pick(g))
            .map(|(_, f)| f)
            .collect();
        (0..13).map(|i| picked.iter().map(|f| f[i]).sum()).collect()
    };
    let run = rows[0].1[..13].to_vec();
    let serving = sum_of(&|g| g.starts_with("dynamo|") || g == "outside the fleet");
    let cohorts = sum_of(&|g| g.contains(" / "));
    assert_eq!(serving, run, "serving rows against the run");
    assert_eq!(cohorts, run, "cohort rows against the run");
    assert!(rows.iter().any(|(g, _)| g == "outside the fleet"));
    assert!(
        run[12] > 0 && run[11] > 0 && run[8] > 0,
        "drift, missed and elsewhere: {run:?}"
    );
}

/// Each serving worker's row has the attributed, phantom, missed, drifted and drift_pm of
/// its entry in `join`'s `attribution.workers`, and there is one row for each entry.
fn assert_worker_rows_are_joins(rows: &[(String, Vec<u128>)], joined: &Value) {
    let workers = joined["attribution"]["workers"].as_array().unwrap();
    for w in workers {
        let (_, f) = rows
            .iter()
            .find(|(g, _)| g == w["worker"].as_str().unwrap())
            .unwrap();
        let from_join: Vec<u128> = ["attributed", "phantom", "missed", "drifted", "drift_pm"]
            .iter()
            .map(|k| u128::from(w[k].as_u64().unwrap()))
            .collect();
        assert_eq!(from_join, [f[0], f[10], f[11], f[12], f[13]], "{w}");
    }
    let serving_rows = rows
        .iter()
        .filter(|(g, _)| g.starts_with("dynamo|"))
        .count();
    assert_eq!(serving_rows, workers.len());
}

/// SPEC.md §14.6's Why it missed view on a generated run: every row's parts add up to
/// its lost tokens, the serving workers' rows (with `outside the fleet`) and the
/// cohorts' rows each add up to the run's, each worker's drift is `join`'s own, ids are
/// escaped, and a join without attribution leaves the panel without the view.
#[test]
fn why_it_missed_rows_add_up_to_the_run_and_agree_with_join() {
    let dir = tempfile::tempdir().unwrap();
    let (trace, completions) = lab_dynamo::write(dir.path());
    let (page, _out) = report_of(&[s(&trace), "--completions", s(&completions)]);
    let html = Html::parse_document(&page);
    let rows = parts_rows(&html);
    assert_parts_add_up(&rows);
    // Each worker's phantom, missed, drifted and drift_pm are join's `workers` entry.
    let receipt = dir.path().join("r.json");
    ok(&[
        "replay",
        s(&trace),
        "--format",
        "json",
        "--out",
        s(&receipt),
    ]);
    let joined = ok(&["join", s(&receipt), s(&completions), "--format", "json"]);
    let joined: Value = serde_json::from_slice(&joined.stdout).unwrap();
    assert_worker_rows_are_joins(&rows, &joined);
    // The escaped tenant, in the table and in the chart.
    assert!(rows.iter().any(|(g, _)| g == "init<b>ech& / m1 / base"));
    assert!(!page.contains("init<b>ech"));
    assert!(page.contains("init&lt;b&gt;ech&amp;"));
    assert_eq!(
        select(&html, "#missed figure svg").len(),
        2,
        "parts and drift charts"
    );
    let words: String = select(&html, "#missed-words")[0].text().collect();
    let unknown = joined["attribution"]["unknown"].as_u64().unwrap();
    assert!(unknown > 0);
    assert!(
        words.contains(&format!(
            "{unknown} completed records carry no cached figure"
        )),
        "{words}"
    );
    // A receipt input without --trace has no cohort rows; with it, the same rows.
    let (from_receipt, _out) = report_of(&[s(&receipt), "--completions", s(&completions)]);
    let receipt_rows = parts_rows(&Html::parse_document(&from_receipt));
    assert!(receipt_rows.iter().all(|(g, _)| !g.contains(" / ")));
    let (with_trace, _out) = report_of(&[
        s(&receipt),
        "--trace",
        s(&trace),
        "--completions",
        s(&completions),
    ]);
    assert_eq!(parts_rows(&Html::parse_document(&with_trace)), rows);
    // The AIPerf fixture carries no cached figure and no worker: no view.
    let (plain, _out) = report_of(&["--completions", s(&join_fixture("lab.completions.jsonl"))]);
    assert!(plain.contains("id=\"completions\"") && !plain.contains("id=\"missed\""));
}
