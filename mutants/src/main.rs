//! The mutant check: proves that kvroute's suite catches each kind of bug it exists for.
//!
//! It reads `mutants/MUTANTS.toml` and builds the killer test targets once, with
//! `--features kvroute-core/mutants`: every planted bug is compiled in, each off until
//! `KVROUTE_MUTANT` names it (`core/src/mutant.rs`). The build is the only cargo
//! invocation: it reports each test executable (`--message-format=json`), and every run
//! after it starts that executable directly, as `cargo test` would (from the package
//! directory), without cargo's start-up and freshness check each time.
//!
//! A run executes only the *killer columns* of one test target: the tests that the
//! catalogue names as a killer of any selected mutant, picked with libtest's `--exact`.
//! The clean baseline runs every target's columns with nothing selected (each must exist
//! and pass); then each mutant runs its own killer targets with `KVROUTE_MUTANT=<name>`,
//! so the kill matrix still marks the other columns of those targets that also failed.
//! Tests that are nobody's killer do not run, so the matrix has no "others failing"
//! column any more. Runs are independent, so `--jobs` of them (default: the available
//! parallelism) run at once, the longest first (by the baseline's time for the target),
//! each test executable with the remaining cores as test threads; results are printed
//! in catalogue order whatever finishes first.
//!
//! Each mutant is classified with cargo-mutants' vocabulary: **caught** (every intended
//! killer failed), **missed** (some intended killer passed or did not run) or
//! **timeout** (a run exceeded `--timeout-secs`; its process group is killed); a build
//! that fails (cargo-mutants' *unviable*) stops the check, since every bug shares the
//! one build. It prints a kill matrix and the time of each phase, and exits non-zero
//! unless every mutant is caught.

use clap::Parser;
use kvroute_core::harness::{Mutant as CoreMutant, SELECTOR_ENV};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::num::NonZeroUsize;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
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
    /// Seconds the build, or one test executable's run, may take before it is killed
    /// (a run that is killed makes its mutant a timeout).
    #[arg(long, default_value_t = 900)]
    timeout_secs: u64,
    /// Cargo profile for the mutant build (`mutants`: unoptimised enough to build
    /// fast, optimised enough to run the sweep quickly).
    #[arg(long, default_value = "mutants")]
    profile: String,
    /// Test runs at once [default: the available parallelism].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    jobs: Option<u16>,
}

#[derive(Deserialize)]
struct Catalogue {
    mutant: Vec<Mutant>,
}

#[derive(Deserialize, Clone)]
struct Mutant {
    /// The name `KVROUTE_MUTANT` selects (one of `kvroute_core::harness::Mutant::ALL`'s names).
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

/// What one run of a test executable showed; test names are `target::test`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct TestResults {
    passed: BTreeSet<String>,
    failed: BTreeSet<String>,
}

/// One run: a test target's executable with some of its tests.
struct Run<'a> {
    target: &'a str,
    tests: &'a BTreeSet<String>,
    /// The planted bug selected, `None` for the baseline.
    mutant: Option<&'a str>,
}

/// A test target as built: its executable and the directory cargo would run it from.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestExecutable {
    path: PathBuf,
    package_dir: PathBuf,
}

const HARNESS: &str = "kvroute-harness";

fn main() -> ExitCode {
    let args = Args::parse();
    let root = workspace_root();
    let mutants = match selected_mutants(&args, &root) {
        Ok(mutants) => mutants,
        Err(code) => return code,
    };
    let columns = killer_columns(&mutants);
    let parallelism = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let jobs = args.jobs.map_or(parallelism, usize::from);
    let plan = Plan {
        root: &root,
        columns: &columns,
        jobs,
        // Each run gets its share of the cores as libtest threads, at least one.
        test_threads: (parallelism / jobs).max(1),
        timeout: Duration::from_secs(args.timeout_secs),
    };
    let started = Instant::now();
    println!(
        "build: {} test targets, every planted bug compiled in",
        columns.len()
    );
    let targets: BTreeSet<&str> = columns.keys().map(String::as_str).collect();
    let executables = match build_targets(&root, &targets, &args.profile, plan.timeout) {
        Ok(executables) => executables,
        Err(failure) => {
            println!("build: {failure}; no mutant can be judged");
            return ExitCode::FAILURE;
        }
    };
    let build_time = started.elapsed();
    println!("build: done in {:.1} s", build_time.as_secs_f64());
    let baseline_started = Instant::now();
    let Some(target_time) = run_baseline(&plan, &executables, &mutants) else {
        return ExitCode::FAILURE;
    };
    let baseline_time = baseline_started.elapsed();
    let mutant_started = Instant::now();
    let (results, run_count) = run_mutants(&plan, &executables, &mutants, &target_time);
    print_matrix(&results);
    let times = Times {
        total: started.elapsed(),
        build: build_time,
        baseline: baseline_time,
        mutants: mutant_started.elapsed(),
    };
    print_summary(&results, &times, run_count, &plan);
    if results.iter().all(|(_, v, _, _)| *v == Verdict::Caught) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The catalogue's mutants that `--only` selects; on an unreadable catalogue or an
/// empty selection, the message is printed and the exit code returned.
fn selected_mutants(args: &Args, root: &Path) -> Result<Vec<Mutant>, ExitCode> {
    let catalogue_path = root.join(&args.catalogue);
    let catalogue = match read_catalogue(&catalogue_path) {
        Ok(catalogue) => catalogue,
        Err(message) => {
            eprintln!("{}: {message}", catalogue_path.display());
            return Err(ExitCode::from(2));
        }
    };
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
    if mutants.is_empty() {
        // Without a killer target the build would be every target of the harness.
        eprintln!(
            "--only {:?}: no mutant of the catalogue matches",
            args.only.clone().unwrap_or_default()
        );
        return Err(ExitCode::from(2));
    }
    Ok(mutants)
}

/// Reads the catalogue and checks it: each of core's planted bugs named once, every
/// killer a `<test target>::<test name>`.
fn read_catalogue(path: &Path) -> Result<Catalogue, String> {
    let catalogue: Catalogue = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| toml::from_str(&text).map_err(|e| e.to_string()))?;
    // A name core does not know would make every killer fail (core refuses the
    // selection) and pass for a kill; a compiled-in bug with no entry is never checked.
    let names: BTreeSet<&str> = catalogue.mutant.iter().map(|m| m.name.as_str()).collect();
    let known: BTreeSet<&str> = CoreMutant::ALL.iter().map(|m| m.name()).collect();
    if names != known || names.len() != catalogue.mutant.len() {
        return Err(format!(
            "the catalogue must name each of core's planted bugs once \
             (kvroute_core::harness::Mutant::ALL); unknown: {:?}, missing: {:?}",
            names.difference(&known).collect::<Vec<_>>(),
            known.difference(&names).collect::<Vec<_>>()
        ));
    }
    if let Some(killer) = catalogue
        .mutant
        .iter()
        .flat_map(|m| &m.killers)
        .find(|k| split_killer(k).is_none())
    {
        return Err(format!(
            "killer {killer:?} is not `<test target>::<test name>`"
        ));
    }
    Ok(catalogue)
}

/// What every run of the check shares.
struct Plan<'a> {
    root: &'a Path,
    /// Per killer target, the killer tests it runs.
    columns: &'a BTreeMap<String, BTreeSet<String>>,
    jobs: usize,
    test_threads: usize,
    timeout: Duration,
}

/// How long each phase took.
struct Times {
    total: Duration,
    build: Duration,
    baseline: Duration,
    mutants: Duration,
}

/// Runs every killer target with no bug selected; each must pass. Returns how long
/// each target took, or `None` (reported) when the baseline fails.
fn run_baseline<'a>(
    plan: &Plan<'a>,
    executables: &BTreeMap<String, TestExecutable>,
    mutants: &[Mutant],
) -> Option<BTreeMap<&'a str, Duration>> {
    let baseline_runs: Vec<Run> = plan
        .columns
        .iter()
        .map(|(target, tests)| Run {
            target,
            tests,
            mutant: None,
        })
        .collect();
    let mut target_time: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut baseline = TestResults::default();
    let mut baseline_timed_out = Vec::new();
    let started = Instant::now();
    run_concurrently(
        &baseline_runs,
        plan.jobs,
        |run| {
            let executable = &executables[run.target];
            run_tests(executable, run, plan.root, plan.test_threads, plan.timeout)
        },
        |i, (outcome, elapsed)| {
            let run = &baseline_runs[i];
            target_time.insert(run.target, elapsed);
            match outcome {
                Some(results) => baseline.absorb(results),
                None => baseline_timed_out.push(run.target),
            }
        },
    );
    if !baseline_timed_out.is_empty() {
        println!("baseline: timed out in {baseline_timed_out:?}");
        return None;
    }
    if !baseline.failed.is_empty() {
        println!(
            "baseline: FAILED {:?}; no mutant can be judged",
            baseline.failed
        );
        return None;
    }
    println!(
        "baseline: {} killer tests pass in {:.1} s",
        baseline.passed.len(),
        started.elapsed().as_secs_f64()
    );
    let missing: BTreeSet<&String> = mutants
        .iter()
        .flat_map(|m| &m.killers)
        .filter(|k| !baseline.passed.contains(*k))
        .collect();
    if !missing.is_empty() {
        // A killer that does not exist cannot kill: its mutants will be missed.
        println!("baseline: these killers do not exist or did not run: {missing:?}");
    }
    Some(target_time)
}

/// One result row: the mutant, its verdict, the killer tests that failed, its time.
type MutantResult = (Mutant, Verdict, BTreeSet<String>, Duration);

/// Runs each mutant's own killer targets with that bug selected, printing each verdict
/// as soon as its runs are done (in catalogue order); returns the rows and the number
/// of runs.
fn run_mutants(
    plan: &Plan,
    executables: &BTreeMap<String, TestExecutable>,
    mutants: &[Mutant],
    target_time: &BTreeMap<&str, Duration>,
) -> (Vec<MutantResult>, usize) {
    // One run per (mutant, own killer target), every column of that target, so the
    // matrix still shows the target's other killers that fail too.
    let mut mutant_runs: Vec<(usize, Run)> = Vec::new();
    for (index, mutant) in mutants.iter().enumerate() {
        let own_targets: BTreeSet<&str> = mutant
            .killers
            .iter()
            .filter_map(|k| split_killer(k).map(|(target, _)| target))
            .collect();
        for target in own_targets {
            mutant_runs.push((
                index,
                Run {
                    target,
                    tests: &plan.columns[target],
                    mutant: Some(&mutant.name),
                },
            ));
        }
    }
    // Longest first (as the baseline timed each target), so the last runs to finish
    // are short ones; ties in catalogue order.
    mutant_runs.sort_by_key(|(index, run)| (std::cmp::Reverse(target_time[run.target]), *index));
    let mut runs_left: Vec<usize> = vec![0; mutants.len()];
    for (index, _) in &mutant_runs {
        runs_left[*index] += 1;
    }
    let mut progress: Vec<MutantProgress> = vec![MutantProgress::default(); mutants.len()];
    let mut printer = InOrder::new(mutants.len());
    let mut results: Vec<MutantResult> = Vec::new();
    run_concurrently(
        &mutant_runs,
        plan.jobs,
        |(_, run)| {
            let executable = &executables[run.target];
            run_tests(executable, run, plan.root, plan.test_threads, plan.timeout)
        },
        |i, (outcome, elapsed)| {
            let index = mutant_runs[i].0;
            let entry = &mut progress[index];
            entry.elapsed += elapsed;
            match outcome {
                Some(results) => entry.results.absorb(results),
                None => entry.timed_out = true,
            }
            runs_left[index] -= 1;
            if runs_left[index] > 0 {
                return;
            }
            for ready in printer.finished(index) {
                let mutant = &mutants[ready];
                let entry = std::mem::take(&mut progress[ready]);
                let verdict = judge(mutant, &entry);
                print_verdict(mutant, &verdict, entry.elapsed);
                results.push((mutant.clone(), verdict, entry.results.failed, entry.elapsed));
            }
        },
    );
    (results, mutant_runs.len())
}

fn print_verdict(mutant: &Mutant, verdict: &Verdict, elapsed: Duration) {
    println!(
        "{:<40} {:<9} {:>6.1}s  {}",
        mutant.name,
        verdict_word(verdict),
        elapsed.as_secs_f64(),
        mutant.breaks
    );
    if let Verdict::Missed(survivors) = verdict {
        println!("    intended killers that did not fail (or did not run): {survivors:?}");
    }
}

/// The closing line: how many were caught, missed or timed out, and where time went.
fn print_summary(results: &[MutantResult], times: &Times, run_count: usize, plan: &Plan) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, verdict, _, _) in results {
        *counts.entry(verdict_word(verdict)).or_default() += 1;
    }
    println!(
        "mutants: {} planted, {} caught, {} missed, {} timeout, in {:.0} s \
         (build {:.1} s, baseline {:.1} s, mutant runs {:.1} s; {run_count} runs, {} at a time, \
         {} test threads each)",
        results.len(),
        counts.get("caught").unwrap_or(&0),
        counts.get("missed").unwrap_or(&0),
        counts.get("timeout").unwrap_or(&0),
        times.total.as_secs_f64(),
        times.build.as_secs_f64(),
        times.baseline.as_secs_f64(),
        times.mutants.as_secs_f64(),
        plan.jobs,
        plan.test_threads,
    );
}

/// What a mutant's finished runs showed so far.
#[derive(Debug, Default, Clone)]
struct MutantProgress {
    results: TestResults,
    timed_out: bool,
    /// The sum of its runs' wall times.
    elapsed: Duration,
}

fn judge(mutant: &Mutant, progress: &MutantProgress) -> Verdict {
    if progress.timed_out {
        return Verdict::Timeout;
    }
    let survivors: Vec<String> = mutant
        .killers
        .iter()
        .filter(|k| !progress.results.failed.contains(*k))
        .cloned()
        .collect();
    if survivors.is_empty() {
        Verdict::Caught
    } else {
        Verdict::Missed(survivors)
    }
}

impl TestResults {
    fn absorb(&mut self, other: TestResults) {
        self.passed.extend(other.passed);
        self.failed.extend(other.failed);
    }
}

/// Releases finished items in index order: an item is printed only once every item
/// before it has been, whatever order they finish in.
struct InOrder {
    done: Vec<bool>,
    next: usize,
}

impl InOrder {
    fn new(len: usize) -> InOrder {
        InOrder {
            done: vec![false; len],
            next: 0,
        }
    }

    /// Marks `index` finished; returns the indices that can now be printed, in order.
    fn finished(&mut self, index: usize) -> Vec<usize> {
        self.done[index] = true;
        let mut ready = Vec::new();
        while self.next < self.done.len() && self.done[self.next] {
            ready.push(self.next);
            self.next += 1;
        }
        ready
    }
}

/// Runs `work` on each item, at most `jobs` at once, taking items in the order given;
/// `on_done(index, result)` is called on this thread as each finishes.
fn run_concurrently<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    work: impl Fn(&T) -> R + Sync,
    mut on_done: impl FnMut(usize, R),
) {
    let next = AtomicUsize::new(0);
    let (sender, receiver) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            let sender = sender.clone();
            let (next, work) = (&next, &work);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if sender.send((i, work(item))).is_err() {
                    break;
                }
            });
        }
        drop(sender);
        for (i, result) in receiver {
            on_done(i, result);
        }
    });
}

fn verdict_word(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Caught => "caught",
        Verdict::Missed(_) => "missed",
        Verdict::Timeout => "timeout",
    }
}

/// `fixtures::tenant_boundary` is the test `tenant_boundary` of the `fixtures` target.
fn split_killer(killer: &str) -> Option<(&str, &str)> {
    killer
        .split_once("::")
        .filter(|(target, test)| !target.is_empty() && !test.is_empty())
}

/// Each test target named by a killer, with the killers of any mutant it holds.
fn killer_columns(mutants: &[Mutant]) -> BTreeMap<String, BTreeSet<String>> {
    let mut columns: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for killer in mutants.iter().flat_map(|m| &m.killers) {
        if let Some((target, test)) = split_killer(killer) {
            columns
                .entry(target.to_owned())
                .or_default()
                .insert(test.to_owned());
        }
    }
    columns
}

/// Rows are mutants, columns the killer tests named anywhere in the catalogue.
/// `K` an intended killer that failed, `-` an intended killer that passed (a miss),
/// `x` another killer column that also failed, `.` passed and not intended, blank not
/// run (a target the mutant has no killer in).
fn print_matrix(results: &[MutantResult]) {
    println!();
    print!("{}", matrix(results));
    println!();
}

fn matrix(results: &[MutantResult]) -> String {
    let columns: Vec<String> = results
        .iter()
        .flat_map(|(m, _, _, _)| m.killers.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut text = String::from(
        "kill matrix (K intended and failed, - intended but passed, x also failed, \
         . passed, blank not run):\n",
    );
    for (i, column) in columns.iter().enumerate() {
        text.push_str(&format!("  [{i}] {column}\n"));
    }
    let header: String = (0..columns.len()).map(|i| format!("{i:>4}")).collect();
    text.push_str(&format!("  {:<40}{header}\n", "mutant"));
    for (mutant, _, failed, _) in results {
        let own_targets: BTreeSet<&str> = mutant
            .killers
            .iter()
            .filter_map(|k| split_killer(k).map(|(target, _)| target))
            .collect();
        let cells: String = columns
            .iter()
            .map(|c| {
                let intended = mutant.killers.contains(c);
                let ran = split_killer(c).is_some_and(|(target, _)| own_targets.contains(target));
                let mark = match (intended, ran, failed.contains(c)) {
                    (true, _, true) => "K",
                    (true, _, false) => "-",
                    (false, true, true) => "x",
                    (false, true, false) => ".",
                    (false, false, _) => " ",
                };
                format!("{mark:>4}")
            })
            .collect();
        text.push_str(format!("  {:<40}{cells}", mutant.name).trim_end());
        text.push('\n');
    }
    text
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("mutants/ sits in the workspace")
        .to_path_buf()
}

/// The one build: every target, every planted bug compiled in; returns each target's
/// executable as cargo reports it.
fn build_targets(
    root: &Path,
    targets: &BTreeSet<&str>,
    profile: &str,
    timeout: Duration,
) -> Result<BTreeMap<String, TestExecutable>, String> {
    let mut args: Vec<String> = [
        "test",
        "--profile",
        profile,
        "-p",
        HARNESS,
        "--features",
        "kvroute-core/mutants",
        "--no-run",
        // JSON on stdout names the executables; diagnostics still go to stderr as text.
        "--message-format=json-render-diagnostics",
    ]
    .map(str::to_owned)
    .to_vec();
    for target in targets {
        args.push("--test".to_owned());
        args.push((*target).to_owned());
    }
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command
        .args(&args)
        .current_dir(root)
        .env("CARGO_TERM_COLOR", "never");
    let Some(output) = run_with_deadline(command, timeout) else {
        return Err("timed out".to_owned());
    };
    if !output.success {
        let tail: Vec<&str> = output.stderr.lines().rev().take(15).collect();
        return Err(format!(
            "does not build:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    let executables = test_executables(&output.stdout);
    let unreported: Vec<&&str> = targets
        .iter()
        .filter(|t| !executables.contains_key(**t))
        .collect();
    if !unreported.is_empty() {
        return Err(format!(
            "cargo reported no test executable for {unreported:?}"
        ));
    }
    Ok(executables)
}

/// One line of `cargo --message-format=json` (only what is read of it).
#[derive(Deserialize)]
struct CargoMessage {
    reason: String,
    #[serde(default)]
    manifest_path: Option<PathBuf>,
    #[serde(default)]
    target: Option<ArtifactTarget>,
    #[serde(default)]
    executable: Option<PathBuf>,
}

#[derive(Deserialize)]
struct ArtifactTarget {
    name: String,
    kind: Vec<String>,
}

/// The integration-test executables among cargo's JSON messages, by target name.
fn test_executables(messages: &str) -> BTreeMap<String, TestExecutable> {
    let mut found = BTreeMap::new();
    for line in messages.lines() {
        let Ok(message) = serde_json::from_str::<CargoMessage>(line) else {
            continue;
        };
        if message.reason != "compiler-artifact" {
            continue;
        }
        let (Some(target), Some(path), Some(manifest)) =
            (message.target, message.executable, message.manifest_path)
        else {
            continue;
        };
        if !target.kind.iter().any(|k| k == "test") {
            continue;
        }
        let package_dir = manifest
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        found.insert(target.name, TestExecutable { path, package_dir });
    }
    found
}

/// Runs one test executable on `run`'s tests; `None` on timeout. Also returns the wall
/// time the run took.
fn run_tests(
    executable: &TestExecutable,
    run: &Run,
    root: &Path,
    test_threads: usize,
    timeout: Duration,
) -> (Option<TestResults>, Duration) {
    let started = Instant::now();
    let mut command = Command::new(&executable.path);
    command
        .arg("--exact")
        .args(["--test-threads", &test_threads.to_string()])
        .args(["--color", "never"])
        .args(run.tests)
        // Where and with what `cargo test` would start it.
        .current_dir(&executable.package_dir)
        .env("CARGO_MANIFEST_DIR", &executable.package_dir)
        // Failing properties must not write proptest regression files into the tree.
        .env("KVROUTE_MUTANT_RUN", "1");
    match run.mutant {
        Some(name) => {
            // Each mutant saves its divergent traces apart, so concurrent runs never
            // write the same file.
            command
                .env(SELECTOR_ENV, name)
                .env("KVROUTE_DIVERGENCE_DIR", divergence_dir(root, name));
        }
        // The baseline: nothing selected, whatever the caller's environment holds.
        None => {
            command.env_remove(SELECTOR_ENV);
        }
    }
    let output = run_with_deadline(command, timeout);
    let results = output.map(|o| parse_libtest(run.target, &o.stdout));
    (results, started.elapsed())
}

fn divergence_dir(root: &Path, mutant: &str) -> PathBuf {
    root.join("target")
        .join("kvroute-divergences")
        .join("mutants")
        .join(mutant)
}

/// The tests libtest's default output reports as passed and failed, as `target::test`.
fn parse_libtest(target: &str, stdout: &str) -> TestResults {
    let mut results = TestResults::default();
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        let (name, passed) = if let Some(name) = rest.strip_suffix(" ... ok") {
            (name, true)
        } else if let Some(name) = rest.strip_suffix(" ... FAILED") {
            (name, false)
        } else {
            continue;
        };
        let name = name.strip_suffix(" - should panic").unwrap_or(name);
        let set = if passed {
            &mut results.passed
        } else {
            &mut results.failed
        };
        set.insert(format!("{target}::{name}"));
    }
    results
}

/// What a finished process printed.
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs `command` in its own process group with a deadline; on timeout the whole group
/// (cargo and the compilers, or a test executable and what it started) is killed and
/// `None` returned.
fn run_with_deadline(mut command: Command, timeout: Duration) -> Option<Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
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
            kill_process_group(child.id());
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        // Short, since many runs are only a fraction of a second.
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    status.map(|s| Output {
        success: s.success(),
        stdout,
        stderr,
    })
}

/// Sends SIGKILL to the process group `leader` leads (it was started with
/// `process_group(0)`, so the group's id is its pid). Through kill(2) itself, not the
/// `kill` program: util-linux `kill -KILL -<pgid>` does not reliably read `-<pgid>` as a
/// group, and a group id of 1 or less would signal far more than the run.
fn kill_process_group(leader: u32) {
    let Ok(group) = libc::pid_t::try_from(leader) else {
        return;
    };
    if group > 1 {
        // SAFETY: kill(2) takes plain integers and touches no memory of this process.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutant(name: &str, killers: &[&str]) -> Mutant {
        Mutant {
            name: name.to_owned(),
            breaks: String::new(),
            killers: killers.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn libtest_output_is_read_per_test() {
        let stdout = "\nrunning 4 tests\n\
            test tenant_boundary ... FAILED\n\
            test stale_epoch ... ok\n\
            test refuses_two - should panic ... ok\n\
            test slow_one ... ignored\n\
            test lab has been running for over 60 seconds\n\
            thread 'tenant_boundary' panicked at tests/tests/fixtures.rs:14:5:\n\
            failures:\n    tenant_boundary\n\n\
            test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 12 filtered out\n";
        let results = parse_libtest("fixtures", stdout);
        assert_eq!(
            results.failed,
            BTreeSet::from(["fixtures::tenant_boundary".to_owned()])
        );
        assert_eq!(
            results.passed,
            BTreeSet::from([
                "fixtures::refuses_two".to_owned(),
                "fixtures::stale_epoch".to_owned()
            ])
        );
    }

    #[test]
    fn cargo_reports_the_test_executables() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kvroute-harness@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"kvroute_harness","src_path":"/w/tests/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"test":false},"features":[],"filenames":["/w/target/mutants/deps/libkvroute_harness-1.rlib"],"executable":null,"fresh":true}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tests#kvroute-harness@0.1.0","manifest_path":"/w/tests/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"sweep","src_path":"/w/tests/tests/sweep.rs","edition":"2021","doc":false,"doctest":false,"test":true},"profile":{"test":true},"features":[],"filenames":["/w/target/mutants/deps/sweep-2"],"executable":"/w/target/mutants/deps/sweep-2","fresh":false}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\nnot json\n"
        );
        let found = test_executables(messages);
        assert_eq!(
            found,
            BTreeMap::from([(
                "sweep".to_owned(),
                TestExecutable {
                    path: PathBuf::from("/w/target/mutants/deps/sweep-2"),
                    package_dir: PathBuf::from("/w/tests"),
                }
            )])
        );
    }

    #[test]
    fn results_print_in_catalogue_order_whatever_finishes_first() {
        let mut printer = InOrder::new(4);
        assert_eq!(printer.finished(2), Vec::<usize>::new());
        assert_eq!(printer.finished(1), Vec::<usize>::new());
        assert_eq!(printer.finished(0), vec![0, 1, 2]);
        assert_eq!(printer.finished(3), vec![3]);
    }

    #[test]
    fn concurrent_runs_report_every_item_once() {
        let items: Vec<u64> = (0..25).collect();
        let mut seen = Vec::new();
        run_concurrently(
            &items,
            3,
            |n| {
                // Later items finish first, so completion order differs from item order.
                std::thread::sleep(Duration::from_millis(30 - n));
                n * 10
            },
            |i, r| seen.push((i, r)),
        );
        seen.sort();
        let expected: Vec<(usize, u64)> = (0..25).map(|i| (i as usize, i * 10)).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_run_past_its_deadline_is_killed_with_its_process_group() {
        // The shell's background child holds stdout open: unless the whole group is
        // killed, reading stdout to its end waits the full 30 s.
        let mut command = Command::new("sh");
        command.args(["-c", "sleep 30 & echo started; wait"]);
        let started = Instant::now();
        assert!(run_with_deadline(command, Duration::from_millis(300)).is_none());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        let mut command = Command::new("sh");
        command.args(["-c", "echo 'test a ... ok'; exit 3"]);
        let output = run_with_deadline(command, Duration::from_secs(30)).expect("finishes");
        assert!(!output.success);
        assert_eq!(output.stdout, "test a ... ok\n");
    }

    #[test]
    fn columns_are_every_killer_of_each_target() {
        let mutants = [
            mutant("a", &["fixtures::one", "sweep::all"]),
            mutant("b", &["fixtures::two", "sweep::all"]),
            mutant("c", &["engine::loop"]),
        ];
        let columns = killer_columns(&mutants);
        assert_eq!(
            columns,
            BTreeMap::from([
                ("engine".to_owned(), BTreeSet::from(["loop".to_owned()])),
                (
                    "fixtures".to_owned(),
                    BTreeSet::from(["one".to_owned(), "two".to_owned()])
                ),
                ("sweep".to_owned(), BTreeSet::from(["all".to_owned()])),
            ])
        );
        assert_eq!(split_killer("fixtures"), None);
        assert_eq!(split_killer("::x"), None);
    }

    #[test]
    fn the_matrix_marks_kills_misses_other_failures_and_runs_not_made() {
        let results = [
            (
                mutant("a", &["fixtures::one", "sweep::all"]),
                Verdict::Caught,
                BTreeSet::from([
                    "fixtures::one".to_owned(),
                    "fixtures::two".to_owned(),
                    "sweep::all".to_owned(),
                ]),
                Duration::ZERO,
            ),
            (
                mutant("b", &["fixtures::two", "engine::loop"]),
                Verdict::Missed(vec!["engine::loop".to_owned()]),
                BTreeSet::from(["fixtures::two".to_owned()]),
                Duration::ZERO,
            ),
        ];
        let text = matrix(&results);
        let rows: Vec<&str> = text.lines().collect();
        // Columns: [0] engine::loop, [1] fixtures::one, [2] fixtures::two, [3] sweep::all.
        assert_eq!(rows[1], "  [0] engine::loop");
        assert_eq!(rows[4], "  [3] sweep::all");
        assert_eq!(rows[6], format!("  {:<40}{}", "a", "       K   x   K"));
        assert_eq!(rows[7], format!("  {:<40}{}", "b", "   -   .   K"));
    }
}
