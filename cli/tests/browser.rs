//! The report in a real browser: headless Chromium opens the lab report and two
//! Mooncake reports (the imported, request-only trace and a closed-loop simulated one)
//! and reads back what the page's own self-check found.
//!
//! Not part of `cargo test` (the target has `test = false`): CI runs it explicitly with
//! `cargo test --release -p kvroute-cli --test browser`, after installing Debian's
//! `chromium`. Without a browser it fails, saying so. `KVROUTE_CHROMIUM` names the
//! browser binary; `KVROUTE_MOONCAKE` the Mooncake JSONL (default
//! `../shared/traces/mooncake-conversation.jsonl` beside the repository).
//!
//! Per page, opened 1000 px wide: no console message and no script error; nothing cut
//! or running past its column (the comparison table, the decision labels); a title that
//! names the input; the number of candidate markers
//! plotted for the selected decision equals its rows in the receipt; stepping to the
//! next interesting decision (`#...&step=next-interesting`) shows another decision with
//! another plot; and a screenshot is written under `target/browser/`.

use scraper::{Html, Selector};
use serde_json::Value;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "support/lab_dynamo.rs"]
mod lab_dynamo;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn out_dir() -> PathBuf {
    let dir = repo().join("target/browser");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 paths")
}

fn kvroute(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute"))
        .args(args)
        .output()
        .expect("the kvroute binary runs");
    assert!(
        out.status.success(),
        "kvroute {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn chromium() -> String {
    if let Ok(path) = std::env::var("KVROUTE_CHROMIUM") {
        return path;
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return name.to_owned();
        }
    }
    panic!("no Chromium found: install Debian's chromium (.ci/run does) or set KVROUTE_CHROMIUM");
}

fn browser_args() -> Vec<&'static str> {
    let mut args = vec![
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ];
    // Chromium refuses to run as root with its sandbox, and CI runs as root.
    if Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"))
    {
        args.push("--no-sandbox");
    }
    args
}

/// What the page's self-check wrote, and the console lines Chromium logged.
struct Check {
    attrs: HashMap<String, String>,
    /// The page's `<title>` as the browser has it.
    title: String,
    console: Vec<String>,
}

impl Check {
    fn get(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("", String::as_str)
    }
}

fn open(page: &Path, fragment: &str) -> Check {
    let url = format!("file://{}{fragment}", s(&page.canonicalize().unwrap()));
    let out = Command::new(chromium())
        .args(browser_args())
        .args(["--virtual-time-budget=10000", "--window-size=1000,1500"])
        .args(["--dump-dom", &url])
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium --dump-dom {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = Html::parse_document(&String::from_utf8_lossy(&out.stdout));
    let output = dom
        .select(&Selector::parse("output#selfcheck").unwrap())
        .next()
        .unwrap_or_else(|| panic!("{url}: no self-check in the dumped DOM"));
    let attrs = output
        .value()
        .attrs()
        .filter_map(|(k, v)| {
            k.strip_prefix("data-")
                .map(|k| (k.to_owned(), v.to_owned()))
        })
        .collect();
    // Console messages (script errors, CSP violations, console.* calls) are logged as
    // `...:CONSOLE(line)] "message", source: ...`; the page itself logs nothing.
    let console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect();
    let title = dom
        .select(&Selector::parse("title").unwrap())
        .next()
        .map_or_else(String::new, |t| t.text().collect());
    Check {
        attrs,
        title,
        console,
    }
}

fn screenshot(page: &Path, png: &Path, fragment: &str) -> u64 {
    let url = format!("file://{}{fragment}", s(&page.canonicalize().unwrap()));
    let status = Command::new(chromium())
        .args(browser_args())
        .args(["--virtual-time-budget=10000", "--window-size=1280,1500"])
        .arg(format!("--screenshot={}", s(png)))
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(status.status.success(), "chromium --screenshot {url}");
    std::fs::metadata(png).unwrap().len()
}

/// Rows per (policy, seq) in the receipt, read from the streamed receipt so a large
/// trace's receipt is never held whole.
fn receipt_rows(trace: &Path) -> HashMap<(String, u64), usize> {
    let jsonl = kvroute(&["replay", s(trace), "--format", "jsonl"]);
    let mut rows = HashMap::new();
    for line in jsonl.lines() {
        let line = line.unwrap();
        if !line.starts_with(r#"{"decisions":"#) {
            continue;
        }
        let record: Value = serde_json::from_str(&line).unwrap();
        let d = &record["decisions"];
        rows.insert(
            (
                record["policy"].as_str().unwrap().to_owned(),
                d["seq"].as_u64().unwrap(),
            ),
            d["candidates"].as_array().unwrap().len(),
        );
    }
    rows
}

/// Opens `page` on `policy`, steps to the next interesting decision, and checks both.
fn check_page(name: &str, page: &Path, trace: &Path, policy: &str) {
    let size = std::fs::metadata(page).unwrap().len();
    assert!(
        size <= 10_000_000,
        "{name}: {size} bytes, over the 10 MB budget"
    );
    let rows = receipt_rows(trace);
    let first = open(page, &format!("#policy={policy}"));
    let second = open(
        page,
        &format!(
            "#policy={policy}&decision={}&step=next-interesting",
            first.get("seq")
        ),
    );
    for (label, check) in [("opened", &first), ("stepped", &second)] {
        assert_eq!(
            check.get("ready"),
            "1",
            "{name} {label}: the self-check did not run"
        );
        assert_eq!(
            check.get("errors"),
            "0",
            "{name} {label}: {}",
            check.get("error-text")
        );
        assert!(
            check.console.is_empty(),
            "{name} {label}: console: {:?}",
            check.console
        );
        assert_eq!(
            check.get("cut"),
            "",
            "{name} {label}: cut or overflowing at 1000 px wide"
        );
        assert!(
            check.title.starts_with("kvroute report: ") && !check.title.contains("lab report"),
            "{name} {label}: title {:?}",
            check.title
        );
        assert_eq!(check.get("policy"), policy);
        let seq: u64 = check.get("seq").parse().unwrap();
        let expected = rows[&(policy.to_owned(), seq)];
        assert_eq!(
            check.get("rows"),
            expected.to_string(),
            "{name} {label} seq {seq}"
        );
        assert_eq!(
            check.get("points"),
            expected.to_string(),
            "{name} {label} seq {seq}: plotted candidates against the receipt's rows"
        );
    }
    assert_ne!(
        first.get("seq"),
        second.get("seq"),
        "{name}: stepping moved on"
    );
    assert_ne!(
        first.get("plot"),
        second.get("plot"),
        "{name}: stepping changed the plot"
    );
    let png = out_dir().join(format!("{name}.png"));
    let png_bytes = screenshot(page, &png, &format!("#policy={policy}"));
    println!(
        "{name}: {size} bytes of HTML; seq {} -> {} ({} points each as in the receipt); screenshot {} ({png_bytes} bytes)",
        first.get("seq"),
        second.get("seq"),
        first.get("points"),
        png.display()
    );
}

#[test]
fn the_lab_and_mooncake_reports_work_in_headless_chromium() {
    let started = Instant::now();
    let dir = out_dir();
    let lab = repo().join("fixtures/lab/trace.json");
    let lab_page = dir.join("lab.html");
    kvroute(&["report", s(&lab), "-o", s(&lab_page)]);
    check_page("lab", &lab_page, &lab, "longest_prefix");

    let mooncake = std::env::var("KVROUTE_MOONCAKE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("../shared/traces/mooncake-conversation.jsonl"));
    let imported = dir.join("mooncake.trace.json");
    kvroute(&["import", "mooncake", s(&mooncake), "-o", s(&imported)]);
    let page = dir.join("mooncake.html");
    kvroute(&["report", s(&imported), "-o", s(&page)]);
    check_page("mooncake", &page, &imported, "cache_plus_load");

    // The closed loop gives the Mooncake requests real cache events, hence hits,
    // dominated choices and a hot worker under longest_prefix.
    let simulated = dir.join("simulated");
    kvroute(&[
        "simulate",
        s(&imported),
        "--workers",
        "8",
        "--events-out",
        s(&simulated),
    ]);
    let trace = simulated.join("cache_plus_load.trace.json");
    let page = dir.join("mooncake-simulated.html");
    kvroute(&["report", s(&trace), "-o", s(&page)]);
    check_page("mooncake-simulated", &page, &trace, "longest_prefix");
    println!(
        "browser checks took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The Completions panel (SPEC.md §14.6) of the lab report joined with the AIPerf
/// fixture: the page's self-check still passes with it, and a screenshot of the panel
/// is written under `target/browser/` (`KVROUTE_PANEL_SHOT` names another path).
#[test]
fn the_completions_panel_renders_in_headless_chromium() {
    let dir = out_dir();
    let lab = repo().join("fixtures/lab/trace.json");
    let completions = repo().join("fixtures/join/lab.completions.jsonl");
    let page = dir.join("lab-completions.html");
    kvroute(&[
        "report",
        s(&lab),
        "--completions",
        s(&completions),
        "--slo",
        "ttft_ms=200,tpot_ms=20",
        "-o",
        s(&page),
    ]);
    check_page("lab-completions", &page, &lab, "cache_plus_load");
    let png = std::env::var("KVROUTE_PANEL_SHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.join("completions-panel.png"));
    let png_bytes = screenshot(&page, &png, "#completions");
    assert!(png_bytes > 0, "an empty screenshot");
    println!("completions panel: {} ({png_bytes} bytes)", png.display());
}

/// The Why it missed view (SPEC.md §14.6) on a run with every case of §14.7 (the lab
/// trace as a Dynamo fleet, `cli/tests/support/lab_dynamo.rs`): the page's self-check
/// passes, the view's own check finds nothing past the section or an SVG's edge and no
/// table wider than its box, the parts chart draws every group of the table and its
/// legend every part, and a screenshot of the view is written under `target/browser/`
/// (`KVROUTE_MISSED_SHOT` names another path).
#[test]
fn the_why_it_missed_view_renders_in_headless_chromium() {
    let dir = out_dir();
    let (trace, completions) = lab_dynamo::write(&dir);
    let page = dir.join("lab-missed.html");
    kvroute(&[
        "report",
        s(&trace),
        "--completions",
        s(&completions),
        "-o",
        s(&page),
    ]);
    check_page("lab-missed", &page, &trace, "cache_plus_load");
    let check = open(&page, "#policy=cache_plus_load");
    assert_eq!(
        check.get("missed-ready"),
        "1",
        "the view's check did not run"
    );
    assert_eq!(
        check.get("missed-cut"),
        "",
        "cut or overflowing at 1000 px wide"
    );
    let groups: usize = check.get("missed-groups").parse().unwrap();
    assert!(groups >= 8, "run, cohorts, workers: {groups}");
    assert_eq!(
        check.get("missed-drawn"),
        groups.to_string(),
        "groups drawn"
    );
    assert_eq!(check.get("missed-parts"), "8", "parts in the legend");
    let png = std::env::var("KVROUTE_MISSED_SHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.join("why-it-missed.png"));
    let view = dir.join("lab-missed-view.html");
    std::fs::write(&view, view_alone(&std::fs::read_to_string(&page).unwrap())).unwrap();
    let png_bytes = screenshot(&view, &png, "");
    assert!(png_bytes > 0, "an empty screenshot");
    println!(
        "why it missed: {} groups; {} ({png_bytes} bytes)",
        groups,
        png.display()
    );
}

/// The page's head and its Why it missed section alone, for a screenshot of the view
/// (headless Chromium's screenshot starts at the top of the page, whatever the fragment).
fn view_alone(page: &str) -> String {
    let head = &page[..page.find("<body").unwrap()];
    let start = page.find("<section id=\"missed\"").unwrap();
    let script = start + page[start..].find("<script>").unwrap();
    let end = script + page[script..].find("</section>").unwrap() + "</section>".len();
    format!(
        "{head}<body><main>{}</main><output id=\"selfcheck\" hidden></output></body></html>",
        &page[start..end]
    )
}
