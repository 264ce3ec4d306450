//! The mutant check: proves that kvroute's suite catches each kind of bug it exists for.
//!
//! It reads `mutants/MUTANTS.toml` and builds the killer test targets once, with
//! `--features kvroute-core/mutants`: every planted bug is compiled in, each off until
//! `KVROUTE_MUTANT` names it (`core/src/mutant.rs`). It runs the clean baseline on that
//! build (nothing selected; it must pass), then each mutant's own killer targets with
//! `KVROUTE_MUTANT=<name>`, and classifies each mutant with cargo-mutants' vocabulary:
//! **caught** (every intended killer failed), **missed** (some intended killer passed or
//! did not run) or **timeout**; a build that fails (cargo-mutants' *unviable*) stops the
//! check, since every bug shares the one build. It prints a kill matrix
//! and exits non-zero unless every mutant is caught.

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
    /// Run only the mutants whose name contains this text.
    #[arg(long)]
    only: Option<String>,
    /// Seconds one cargo invocation may take before the mutant counts as a timeout.
    #[arg(long, default_value_t = 900)]
    timeout_secs: u64,
    /// Cargo profile for the mutant build (`mutants`: unoptimised enough to build
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
    /// The name `KVROUTE_MUTANT` selects (one of `kvroute_core::mutant::NAMES`).
    name: String,
    breaks: String,
    killers: Vec<String>,
}

/// How one mutant ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Caught,
    Missed(Vec<String>),
    Timeout,
}

/// What one `cargo test` invocation showed.
enum TestRun {
    Finished {
        passed: BTreeSet<String>,
        failed: BTreeSet<String>,
    },
    TimedOut,
}

const HARNESS: &str = "kvroute-harness";

/// Selects the active planted bug in a `mutants` build (`core/src/mutant.rs`).
const SELECTOR_ENV: &str = "KVROUTE_MUTANT";

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
    // A name core does not know would make every killer fail (core refuses the
    // selection) and pass for a kill; a compiled-in bug with no entry is never checked.
    let names: BTreeSet<&str> = catalogue.mutant.iter().map(|m| m.name.as_str()).collect();
    let known: BTreeSet<&str> = kvroute_core::mutant::NAMES.into_iter().collect();
    if names != known || names.len() != catalogue.mutant.len() {
        eprintln!(
            "{}: the catalogue must name each of core's planted bugs once \
             (kvroute_core::mutant::NAMES); unknown: {:?}, missing: {:?}",
            catalogue_path.display(),
            names.difference(&known).collect::<Vec<_>>(),
            known.difference(&names).collect::<Vec<_>>()
        );
        return ExitCode::from(2);
    }
    let mutants: Vec<Mutant> = catalogue
        .mutant
        .iter()
        .filter(|m| {
            args.only
                .as_ref()
                .is_none_or(|o| m.name.contains(o.as_str()))
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
        "build: {} test targets, every planted bug compiled in",
        targets.len()
    );
    if let Err(failure) = build_targets(&root, &targets, &args.profile, timeout) {
        println!("build: {failure}; no mutant can be judged");
        return ExitCode::FAILURE;
    }
    println!("build: done in {:.0} s", started.elapsed().as_secs_f64());
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
        TestRun::TimedOut => {
            println!("baseline: timed out");
            return ExitCode::FAILURE;
        }
    }

    let mut results: Vec<(Mutant, Verdict, BTreeSet<String>, Duration)> = Vec::new();
    for mutant in &mutants {
        let mutant_started = Instant::now();
        // Only the mutant's own killer targets run: a whole target, so the matrix still
        // shows its other tests that fail, but not the targets it has no killer in.
        let own_targets: BTreeSet<String> = mutant
            .killers
            .iter()
            .map(|k| target_of(k).to_owned())
            .collect();
        let run = run_targets(
            &root,
            Some(&mutant.name),
            &own_targets,
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
            TestRun::TimedOut => (Verdict::Timeout, BTreeSet::new()),
        };
        let elapsed = mutant_started.elapsed();
        println!(
            "{:<40} {:<9} {:>6.1}s  {}",
            mutant.name,
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
        "mutants: {} planted, {} caught, {} missed, {} timeout, in {:.0} s",
        results.len(),
        counts.get("caught").unwrap_or(&0),
        counts.get("missed").unwrap_or(&0),
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
        println!("  {:<40}{cells}  {others}", mutant.name);
    }
    println!();
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("mutants/ sits in the workspace")
        .to_path_buf()
}

/// The `cargo test` arguments shared by the build and every run.
fn test_args(profile: &str) -> Vec<String> {
    [
        "test",
        "--profile",
        profile,
        "-p",
        HARNESS,
        "--features",
        "kvroute-core/mutants",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The one build: every target, every planted bug compiled in.
fn build_targets(
    root: &Path,
    targets: &BTreeSet<String>,
    profile: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut build = test_args(profile);
    build.push("--no-run".to_owned());
    for target in targets {
        build.push("--test".to_owned());
        build.push(target.clone());
    }
    match cargo(root, &build, None, timeout) {
        None => Err("timed out".to_owned()),
        Some((true, _, _)) => Ok(()),
        Some((false, _, stderr)) => {
            let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
            Err(format!(
                "does not build:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ))
        }
    }
}

/// Runs each target on the one build with `mutant` selected (none for the baseline);
/// test names come back as `target::test`.
fn run_targets(
    root: &Path,
    mutant: Option<&str>,
    targets: &BTreeSet<String>,
    profile: &str,
    timeout: Duration,
) -> TestRun {
    let mut passed = BTreeSet::new();
    let mut failed = BTreeSet::new();
    for target in targets {
        let mut args = test_args(profile);
        args.extend(["--test".to_owned(), target.clone(), "--".to_owned()]);
        args.extend(["--test-threads".to_owned(), "2".to_owned()]);
        let Some((_, stdout, _)) = cargo(root, &args, mutant, timeout) else {
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
fn cargo(
    root: &Path,
    args: &[String],
    mutant: Option<&str>,
    timeout: Duration,
) -> Option<(bool, String, String)> {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    match mutant {
        Some(name) => command.env(SELECTOR_ENV, name),
        // The baseline: nothing selected, whatever the caller's environment holds.
        None => command.env_remove(SELECTOR_ENV),
    };
    let mut child = command
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
