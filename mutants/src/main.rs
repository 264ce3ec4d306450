//! The mutant check: proves that kvroute's suite catches each kind of bug it exists for.
//!
//! It reads `mutants/MUTANTS.toml`, runs the clean baseline (which must pass), then
//! builds and runs the killer test targets once per planted bug with
//! `--features kvroute-core/<mutant>`, and classifies each mutant with cargo-mutants'
//! vocabulary: **caught** (every intended killer failed), **missed** (some intended
//! killer passed or did not run), **unviable** (it does not build) or **timeout**. It
//! prints a kill matrix and exits non-zero unless every mutant is caught.

use clap::Parser;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "Run kvroute's planted mutants and print the kill matrix")]
struct Args {
    /// The catalogue.
    #[arg(long, default_value = "mutants/MUTANTS.toml")]
    catalogue: PathBuf,
    /// Run only the mutants whose feature contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Seconds one cargo invocation may take before the mutant counts as a timeout.
    #[arg(long, default_value_t = 900)]
    timeout_secs: u64,
    /// Cargo profile for the mutant builds (`mutants`: unoptimised enough to build
    /// fast, optimised enough to run the sweep quickly).
    #[arg(long, default_value = "mutants")]
    profile: String,
}

#[derive(Deserialize)]
struct Catalogue {
    mutant: Vec<Mutant>,
}

#[derive(Deserialize, Clone)]
struct Mutant {
    feature: String,
    breaks: String,
    killers: Vec<String>,
}

/// How one mutant ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Caught,
    Missed(Vec<String>),
    Unviable(String),
    Timeout,
}

/// What one `cargo test` invocation showed.
enum TestRun {
    Finished {
        passed: BTreeSet<String>,
        failed: BTreeSet<String>,
    },
    BuildFailed(String),
    TimedOut,
}

const HARNESS: &str = "kvroute-harness";

fn main() -> ExitCode {
    let args = Args::parse();
    let root = workspace_root();
    let catalogue_path = root.join(&args.catalogue);
    let catalogue: Catalogue = match std::fs::read_to_string(&catalogue_path)
        .map_err(|e| e.to_string())
        .and_then(|text| toml::from_str(&text).map_err(|e| e.to_string()))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{}: {e}", catalogue_path.display());
            return ExitCode::from(2);
        }
    };
    let mutants: Vec<Mutant> = catalogue
        .mutant
        .iter()
        .filter(|m| {
            args.only
                .as_ref()
                .is_none_or(|o| m.feature.contains(o.as_str()))
        })
        .cloned()
        .collect();
    let targets: BTreeSet<String> = mutants
        .iter()
        .flat_map(|m| m.killers.iter().map(|k| target_of(k).to_owned()))
        .collect();
    let timeout = Duration::from_secs(args.timeout_secs);
    let started = Instant::now();

    println!(
        "baseline: {} test targets without any mutant",
        targets.len()
    );
    let baseline = run_targets(&root, None, &targets, &args.profile, timeout);
    match &baseline {
        TestRun::Finished { failed, passed } if failed.is_empty() => {
            let missing: BTreeSet<&String> = mutants
                .iter()
                .flat_map(|m| &m.killers)
                .filter(|k| !passed.contains(*k))
                .collect();
            println!("baseline: {} tests pass", passed.len());
            if !missing.is_empty() {
                // A killer that does not exist cannot kill: its mutants will be missed.
                println!("baseline: these killers do not exist or did not run: {missing:?}");
            }
        }
        TestRun::Finished { failed, .. } => {
            println!("baseline: FAILED {failed:?}; no mutant can be judged");
            return ExitCode::FAILURE;
        }
        TestRun::BuildFailed(e) => {
            println!("baseline: does not build:\n{e}");
            return ExitCode::FAILURE;
        }
        TestRun::TimedOut => {
            println!("baseline: timed out");
            return ExitCode::FAILURE;
        }
    }

    let mut results: Vec<(Mutant, Verdict, BTreeSet<String>, Duration)> = Vec::new();
    for mutant in &mutants {
        let mutant_started = Instant::now();
        let run = run_targets(
            &root,
            Some(&mutant.feature),
            &targets,
            &args.profile,
            timeout,
        );
        let (verdict, failed) = match run {
            TestRun::Finished { failed, .. } => {
                let survivors: Vec<String> = mutant
                    .killers
                    .iter()
                    .filter(|k| !failed.contains(*k))
                    .cloned()
                    .collect();
                let verdict = if survivors.is_empty() {
                    Verdict::Caught
                } else {
                    Verdict::Missed(survivors)
                };
                (verdict, failed)
            }
            TestRun::BuildFailed(e) => (Verdict::Unviable(e), BTreeSet::new()),
            TestRun::TimedOut => (Verdict::Timeout, BTreeSet::new()),
        };
        let elapsed = mutant_started.elapsed();
        println!(
            "{:<40} {:<9} {:>6.1}s  {}",
            mutant.feature,
            verdict_word(&verdict),
            elapsed.as_secs_f64(),
            mutant.breaks
        );
        if let Verdict::Missed(survivors) = &verdict {
            println!("    intended killers that did not fail (or did not run): {survivors:?}");
        }
        results.push((mutant.clone(), verdict, failed, elapsed));
    }

    print_matrix(&results);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, verdict, _, _) in &results {
        *counts.entry(verdict_word(verdict)).or_default() += 1;
    }
    let all_caught = results.iter().all(|(_, v, _, _)| *v == Verdict::Caught);
    println!(
        "mutants: {} planted, {} caught, {} missed, {} unviable, {} timeout, in {:.0} s",
        results.len(),
        counts.get("caught").unwrap_or(&0),
        counts.get("missed").unwrap_or(&0),
        counts.get("unviable").unwrap_or(&0),
        counts.get("timeout").unwrap_or(&0),
        started.elapsed().as_secs_f64()
    );
    if all_caught {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn verdict_word(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Caught => "caught",
        Verdict::Missed(_) => "missed",
        Verdict::Unviable(_) => "unviable",
        Verdict::Timeout => "timeout",
    }
}

/// `fixtures::tenant_boundary` runs in the `fixtures` test target.
fn target_of(killer: &str) -> &str {
    killer.split_once("::").map_or(killer, |(target, _)| target)
}

/// Rows are mutants, columns the killer tests named anywhere in the catalogue.
/// `K` an intended killer that failed, `-` an intended killer that passed (a miss),
/// `x` another killer column that also failed, `.` passed and not intended.
fn print_matrix(results: &[(Mutant, Verdict, BTreeSet<String>, Duration)]) {
    let columns: Vec<String> = results
        .iter()
        .flat_map(|(m, _, _, _)| m.killers.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    println!();
    println!("kill matrix (K intended and failed, - intended but passed, x also failed):");
    for (i, column) in columns.iter().enumerate() {
        println!("  [{i}] {column}");
    }
    let header: String = (0..columns.len()).map(|i| format!("{i:>4}")).collect();
    println!("  {:<40}{header}  others failing", "mutant");
    for (mutant, _, failed, _) in results {
        let cells: String = columns
            .iter()
            .map(|c| {
                let intended = mutant.killers.contains(c);
                let mark = match (intended, failed.contains(c)) {
                    (true, true) => "K",
                    (true, false) => "-",
                    (false, true) => "x",
                    (false, false) => ".",
                };
                format!("{mark:>4}")
            })
            .collect();
        let others = failed.iter().filter(|f| !columns.contains(f)).count();
        println!("  {:<40}{cells}  {others}", mutant.feature);
    }
    println!();
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("mutants/ sits in the workspace")
        .to_path_buf()
}

/// Builds once, then runs each target; test names come back as `target::test`.
fn run_targets(
    root: &Path,
    feature: Option<&str>,
    targets: &BTreeSet<String>,
    profile: &str,
    timeout: Duration,
) -> TestRun {
    let mut base = vec![
        "test".to_owned(),
        "--profile".to_owned(),
        profile.to_owned(),
        "-p".to_owned(),
        HARNESS.to_owned(),
    ];
    if let Some(feature) = feature {
        base.push("--features".to_owned());
        base.push(format!("kvroute-core/{feature}"));
    }
    let mut build = base.clone();
    build.push("--no-run".to_owned());
    for target in targets {
        build.push("--test".to_owned());
        build.push(target.clone());
    }
    match cargo(root, &build, timeout) {
        None => return TestRun::TimedOut,
        Some((true, _, _)) => {}
        Some((false, _, stderr)) => {
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            return TestRun::BuildFailed(tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
    }
    let mut passed = BTreeSet::new();
    let mut failed = BTreeSet::new();
    for target in targets {
        let mut args = base.clone();
        args.extend(["--test".to_owned(), target.clone(), "--".to_owned()]);
        args.extend(["--test-threads".to_owned(), "2".to_owned()]);
        let Some((_, stdout, _)) = cargo(root, &args, timeout) else {
            return TestRun::TimedOut;
        };
        for line in stdout.lines() {
            let Some(rest) = line.strip_prefix("test ") else {
                continue;
            };
            if let Some(name) = rest.strip_suffix(" ... ok") {
                passed.insert(format!("{target}::{name}"));
            } else if let Some(name) = rest.strip_suffix(" ... FAILED") {
                failed.insert(format!("{target}::{name}"));
            }
        }
    }
    TestRun::Finished { passed, failed }
}

/// Runs cargo with a deadline; `None` on timeout, else (success, stdout, stderr).
fn cargo(root: &Path, args: &[String], timeout: Duration) -> Option<(bool, String, String)> {
    let mut child = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(root)
        // Failing properties must not write proptest regression files into the tree.
        .env("KVROUTE_MUTANT_RUN", "1")
        .env("CARGO_TERM_COLOR", "never")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout can stop the test binaries cargo started.
        .process_group(0)
        .spawn()
        .expect("cargo starts");
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    status.map(|s| (s.success(), stdout, stderr))
}
