//! `kvroute swarm` end to end: the checks on its range and threads, streaming and
//! progress on a long sweep, and sharded sweeps run as the cluster schedulers run them —
//! the Slurm array script and the Kubernetes Indexed Job's command, one process per shard
//! with the schedulers' variables set — then merged and compared with one process.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The range the sharded tests sweep: few enough seeds for a debug build.
const ARRAY_START: u64 = 5000;
const ARRAY_SEEDS: u64 = 72;

fn kvroute_bin() -> &'static str {
    env!("CARGO_BIN_EXE_kvroute")
}

fn kvroute(args: &[&str]) -> Output {
    Command::new(kvroute_bin())
        .args(args)
        .output()
        .expect("the kvroute binary runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh scratch folder under cargo's per-target temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("swarm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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

/// The single-process report of the sharded tests' range, written once.
fn single_process_report() -> &'static [u8] {
    static REPORT: OnceLock<Vec<u8>> = OnceLock::new();
    REPORT.get_or_init(|| {
        let dir = scratch("single");
        let report = dir.join("report.json");
        let out = without_scheduler(&mut Command::new(kvroute_bin()))
            .args(["swarm", "--seeds", &ARRAY_SEEDS.to_string()])
            .args(["--start", &ARRAY_START.to_string(), "--jobs", "2"])
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
        std::fs::read(&report).unwrap()
    })
}

/// Runs every child to the end and checks that each succeeded.
fn wait_all(children: Vec<Child>) {
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "a shard failed:\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// The Slurm array of 3 tasks, run as `sbatch --array=0-2` would: the script, once per
/// task, with the variables Slurm sets. Returns the report folder (once per test run).
fn slurm_array_reports() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("slurm");
        let children = (0..3)
            .map(|task| {
                without_scheduler(&mut Command::new("bash"))
                    .arg(repo().join("deploy/slurm/swarm.sbatch"))
                    .current_dir(&dir)
                    .env("SLURM_JOB_ID", format!("{}", 4242 + task))
                    .env("SLURM_ARRAY_JOB_ID", "4242")
                    .env("SLURM_ARRAY_TASK_ID", task.to_string())
                    .env("SLURM_ARRAY_TASK_MIN", "0")
                    .env("SLURM_ARRAY_TASK_MAX", "2")
                    .env("SLURM_ARRAY_TASK_COUNT", "3")
                    .env("SLURM_ARRAY_TASK_STEP", "1")
                    .env("SLURM_CPUS_PER_TASK", "1")
                    .env("SWARM_SEEDS", ARRAY_SEEDS.to_string())
                    .env("SWARM_START", ARRAY_START.to_string())
                    .env("KVROUTE", kvroute_bin())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        wait_all(children);
        dir.join("kvroute-swarm-reports")
    })
}

fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn merge(files: &[PathBuf]) -> Output {
    Command::new(kvroute_bin())
        .args(["swarm", "merge"])
        .args(files)
        .output()
        .unwrap()
}

#[test]
fn the_slurm_array_merges_into_the_single_process_run() {
    let files = shard_files(slurm_array_reports());
    let names: Vec<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["shard-0.json", "shard-1.json", "shard-2.json"]);
    let out = merge(&files);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(single_process_report()));
    assert!(
        text(&out.stderr).contains(&format!(
            "swarm merge: 3 reports, seeds {ARRAY_START}..{}, {ARRAY_SEEDS} seeds run, 0 divergences",
            ARRAY_START + ARRAY_SEEDS - 1
        )),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_missing_shard_fails_the_merge() {
    let mut files = shard_files(slurm_array_reports());
    let removed = files.remove(1);
    assert!(removed.ends_with("shard-1.json"));
    let out = merge(&files);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(out.stdout.is_empty(), "no union is printed");
    assert!(
        text(&out.stderr).contains(&format!(
            "gap: no report for shard 2/3 of seeds {ARRAY_START}..{}",
            ARRAY_START + ARRAY_SEEDS - 1
        )),
        "{}",
        text(&out.stderr)
    );
    // A shard given twice is an overlap.
    let out = merge(&[
        files[0].clone(),
        files[0].clone(),
        removed,
        files[1].clone(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("overlap: shard 1/3"),
        "{}",
        text(&out.stderr)
    );
}

/// A manifest container's environment, `(name, value)` in order; every value plain.
fn container_env(container: &serde_json::Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|var| {
            (
                var["name"].as_str().unwrap().to_string(),
                var["value"].as_str().expect("plain values").to_string(),
            )
        })
        .collect()
}

/// A manifest container's command line: its `command`, then its `args`.
fn container_argv(container: &serde_json::Value) -> Vec<String> {
    container["command"]
        .as_array()
        .unwrap()
        .iter()
        .chain(container["args"].as_array().unwrap())
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// Reads the manifest's Job, checks what an Indexed Job sweep needs, then runs its
/// container command once per completion index with the manifest's environment (the
/// sweep shrunk to the test's range) and merges the reports.
#[test]
fn the_kubernetes_indexed_job_merges_into_the_single_process_run() {
    let manifest = std::fs::read_to_string(repo().join("deploy/k8s/swarm-job.yaml")).unwrap();
    let documents: Vec<serde_json::Value> = serde_norway::Deserializer::from_str(&manifest)
        .map(|document| serde::Deserialize::deserialize(document).expect("valid YAML"))
        .collect();
    let job = documents
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the manifest holds a Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let completions = spec["completions"].as_u64().expect("completions");
    assert_eq!(spec["parallelism"].as_u64(), Some(completions));
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never", "podFailurePolicy needs it");
    let container = &pod["containers"][0];
    let env = container_env(container);
    let var = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(
        var("KVROUTE_SHARD_COUNT"),
        Some(completions.to_string()),
        "KVROUTE_SHARD_COUNT must equal completions"
    );
    let report_dir = var("SWARM_REPORT_DIR").expect("SWARM_REPORT_DIR");
    let mounted = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|mount| mount["mountPath"] == report_dir.as_str());
    assert!(mounted, "the reports go to a mounted volume");
    let argv = container_argv(container);
    let script = argv.join(" ");
    assert!(script.contains("--shard-from-env"), "{script}");
    assert!(script.contains("$JOB_COMPLETION_INDEX"), "{script}");

    let dir = scratch("kubernetes");
    let bin_dir = Path::new(kvroute_bin()).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let children = (0..completions)
        .map(|index| {
            without_scheduler(&mut Command::new(&argv[0]))
                .args(&argv[1..])
                .envs(env.iter().map(|(n, v)| (n, v)))
                .env("PATH", &path)
                .env("JOB_COMPLETION_INDEX", index.to_string())
                // The manifest's sweep, shrunk to the test's range and folder.
                .env("SWARM_SEEDS", ARRAY_SEEDS.to_string())
                .env("SWARM_START", ARRAY_START.to_string())
                .env("SWARM_REPORT_DIR", &dir)
                .env("KVROUTE_DIVERGENCE_DIR", dir.join("divergences"))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_all(children);
    let files = shard_files(&dir);
    assert_eq!(files.len() as u64, completions);
    let out = merge(&files);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(single_process_report()));
}

/// The closed-loop sweep compares the two engine models seed by seed, and says so in
/// its shard report; a receipt report and a closed-loop report never merge.
#[test]
fn the_closed_loop_sweep_compares_engine_models_and_reports_its_mode() {
    let dir = scratch("closed-loop");
    let closed = dir.join("closed.json");
    let out = kvroute(&[
        "swarm",
        "--closed-loop",
        "--seeds",
        "40",
        "--jobs",
        "2",
        "--report",
        closed.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("swarm: 40 seeds run, 0 divergences"),
        "{}",
        text(&out.stdout)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&closed).unwrap()).unwrap();
    assert_eq!(report["mode"], "closed_loop");
    let receipts = dir.join("receipts.json");
    let out = kvroute(&[
        "swarm",
        "--seeds",
        "40",
        "--start",
        "40",
        "--report",
        receipts.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged = merge(&[closed, receipts]);
    assert_eq!(merged.status.code(), Some(2), "{}", text(&merged.stdout));
    assert!(
        text(&merged.stderr).contains("closed_loop sweep"),
        "{}",
        text(&merged.stderr)
    );
}
