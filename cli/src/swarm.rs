//! `kvroute swarm`: the seed sweep from the command line, sharded by hand (`--shard K/M`)
//! or by a cluster scheduler (`--shard-from-env`), with an optional JSON report per shard
//! that `kvroute swarm merge` checks and joins (see `swarm_report`).
//!
//! Progress goes to stderr only, never stdout: a bar on a terminal, and on a log file or
//! a pipe (a CI job, a cluster's captured output) one line every few seconds, so a long
//! soak shows it is alive without flooding the log.

use crate::failure::Failure;
use crate::swarm_report::{self, ShardReport};
pub use kvroute_cli::args::{SwarmAction, SwarmArgs};
use kvroute_cli::terminal::counted;
use kvroute_harness::sweep::{self, SweepConfig};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The one documented variable set by hand for a Kubernetes Indexed Job: its
/// `completions`, which Kubernetes does not pass to the pods itself.
pub const SHARD_COUNT_VAR: &str = "KVROUTE_SHARD_COUNT";

/// How often the non-terminal progress line is printed.
const PROGRESS_LINE_INTERVAL: Duration = Duration::from_secs(5);

/// How many divergences the sweep prints on stdout (the report lists more).
const FAILURES_SHOWN_MAX: usize = 20;

/// Reads `(k, m)` from a scheduler's variables; `var` looks one up (the process
/// environment in use, a map in tests).
pub fn shard_from_env(var: impl Fn(&str) -> Option<String>) -> Result<(u64, u64), String> {
    let number = |name: &str| -> Result<Option<u64>, String> {
        match var(name) {
            None => Ok(None),
            Some(text) => text
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| format!("{name}={text:?} is not a non-negative integer")),
        }
    };
    let required = |name: &str, why: &str| -> Result<u64, String> {
        number(name)?.ok_or_else(|| format!("{name} is not set ({why})"))
    };
    let kubernetes_index = number("JOB_COMPLETION_INDEX")?;
    let slurm_task = number("SLURM_ARRAY_TASK_ID")?;
    let (k, m) = match (kubernetes_index, slurm_task) {
        (Some(_), Some(_)) => {
            return Err(
                "both JOB_COMPLETION_INDEX and SLURM_ARRAY_TASK_ID are set: which scheduler?"
                    .to_string(),
            )
        }
        (None, None) => {
            return Err(
                "neither JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) nor \
                        SLURM_ARRAY_TASK_ID (a Slurm job array) is set"
                    .to_string(),
            )
        }
        (Some(index), None) => {
            let count = required(SHARD_COUNT_VAR, "set it to the Indexed Job's completions")?;
            (index.saturating_add(1), count)
        }
        (None, Some(task)) => {
            let min = required("SLURM_ARRAY_TASK_MIN", "Slurm sets it for job arrays")?;
            let count = required("SLURM_ARRAY_TASK_COUNT", "Slurm sets it for job arrays")?;
            // A stepped or listed array (`--array=0-15:2`, `--array=1,4,9`) leaves holes
            // that no shard would cover.
            let stepped = matches!(number("SLURM_ARRAY_TASK_STEP")?, Some(step) if step != 1);
            let spread = matches!(number("SLURM_ARRAY_TASK_MAX")?,
                Some(max) if max.checked_sub(min).map(|span| span + 1) != Some(count));
            if stepped || spread {
                return Err("the Slurm job array must be one contiguous range, such as \
                            --array=0-7 (no step, no list)"
                    .to_string());
            }
            let k = task
                .checked_sub(min)
                .ok_or_else(|| {
                    format!("SLURM_ARRAY_TASK_ID {task} is below SLURM_ARRAY_TASK_MIN {min}")
                })?
                .saturating_add(1);
            (k, count)
        }
    };
    if m == 0 || k > m {
        return Err(format!("the scheduler's shard {k}/{m} is not 1 <= K <= M"));
    }
    Ok((k, m))
}

/// Runs `kvroute swarm` (or `swarm merge`).
pub fn swarm(args: SwarmArgs) -> Result<(), Failure> {
    if let Some(SwarmAction::Merge { reports }) = args.action {
        let reports: Vec<_> = reports.into_iter().map(|path| path.0).collect();
        return swarm_report::merge_command(&reports);
    }
    let Some(seeds) = args.seeds else {
        return Err(Failure::invalid(vec![
            "kvroute swarm: --seeds is required".to_string()
        ]));
    };
    let config = sweep_config(&args, seeds)?;
    let seeds_in_shard = config.seed_count();
    announce(&config, seeds_in_shard)?;
    let progress = Progress::new(seeds_in_shard);
    let mode = if args.closed_loop {
        sweep::SweepMode::ClosedLoop
    } else {
        sweep::SweepMode::Receipts
    };
    let report = sweep::run_mode(&config, mode, || progress.seed_done())
        .map_err(|e| Failure::invalid(vec![format!("kvroute swarm: {e}")]))?;
    progress.finish();
    print_failures(&report, mode)?;
    outln!(
        "swarm: {} run, {}, {:.0} seeds/s",
        counted(report.seeds_run, "seed", "seeds"),
        counted(report.failures.len() as u64, "divergence", "divergences"),
        report.seeds_per_second()
    )?;
    if let Some(path) = &args.report {
        let document = ShardReport::of_sweep(&config, mode, &report);
        crate::out::emit(&document.to_bytes(), Some(path))?;
    }
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::other(format!(
            "swarm: {}",
            counted(
                report.failures.len() as u64,
                "divergent seed",
                "divergent seeds"
            )
        )))
    }
}

/// The sweep `args` ask for over `seeds` seeds, its shard from the scheduler's
/// environment with `--shard-from-env`; checked.
fn sweep_config(args: &SwarmArgs, seeds: u64) -> Result<SweepConfig, Failure> {
    let shard = if args.shard_from_env {
        Some(
            shard_from_env(|name| std::env::var(name).ok()).map_err(|e| {
                Failure::invalid(vec![format!("kvroute swarm --shard-from-env: {e}")])
            })?,
        )
    } else {
        args.shard
    };
    let config = SweepConfig {
        start: args.start,
        seeds,
        jobs: args.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        }),
        shard,
    };
    config
        .check()
        .map_err(|e| Failure::invalid(vec![format!("kvroute swarm: {e}")]))?;
    Ok(config)
}

/// The opening line: the first seed, how many, from where, in which shard, on how many
/// jobs.
fn announce(config: &SweepConfig, seeds_in_shard: u64) -> Result<(), Failure> {
    match config.seed_iter().next() {
        None => outln!("swarm: no seeds to run")?,
        Some(first) => {
            let shard = config
                .shard
                .map_or(String::new(), |(k, m)| format!(", shard {k}/{m}"));
            outln!(
                "swarm: first seed {first}, {seeds_in_shard} seeds from {}{shard}, {} jobs",
                config.start,
                config.jobs
            )?;
        }
    }
    Ok(())
}

/// The first divergent seeds, each with the command that reproduces it, and how many
/// more there are.
fn print_failures(report: &sweep::SweepReport, mode: sweep::SweepMode) -> Result<(), Failure> {
    for failure in report.failures.iter().take(FAILURES_SHOWN_MAX) {
        outln!(
            "seed {}: core and oracle diverge {}",
            failure.seed,
            failure.divergence
        )?;
        outln!(
            "  reproduce: {}",
            swarm_report::reproduce_line(failure.seed, mode)
        )?;
        if let Some(path) = &failure.shrunk_trace {
            outln!("  shrunk trace: {}", path.display())?;
        }
    }
    if report.failures.len() > FAILURES_SHOWN_MAX {
        outln!(
            "... and {} more divergent seeds",
            report.failures.len() - FAILURES_SHOWN_MAX
        )?;
    }
    Ok(())
}

/// Progress on stderr: indicatif's bar on a terminal, otherwise a plain line at most
/// every [`PROGRESS_LINE_INTERVAL`].
enum Progress {
    Bar(indicatif::ProgressBar),
    Lines {
        total: u64,
        done: AtomicU64,
        started: Instant,
        /// Milliseconds after `started` when the last line was printed.
        last_line_ms: AtomicU64,
    },
}

impl Progress {
    fn new(total: u64) -> Self {
        if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} seeds {per_sec} eta {eta}",
                )
                .expect("the template is valid"),
            );
            Progress::Bar(bar)
        } else {
            Progress::Lines {
                total,
                done: AtomicU64::new(0),
                started: Instant::now(),
                last_line_ms: AtomicU64::new(0),
            }
        }
    }

    fn seed_done(&self) {
        match self {
            Progress::Bar(bar) => bar.inc(1),
            Progress::Lines {
                total,
                done,
                started,
                last_line_ms,
            } => {
                let done = done.fetch_add(1, Ordering::Relaxed) + 1;
                let elapsed = started.elapsed();
                let now_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
                let last_ms = last_line_ms.load(Ordering::Relaxed);
                let interval_ms = PROGRESS_LINE_INTERVAL.as_millis() as u64;
                // One thread wins the exchange and prints; the others carry on.
                if now_ms.saturating_sub(last_ms) >= interval_ms
                    && last_line_ms
                        .compare_exchange(last_ms, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    let per_second = done as f64 / elapsed.as_secs_f64().max(1e-9);
                    let left_secs = (total - done.min(*total)) as f64 / per_second.max(1e-9);
                    note!(
                        "swarm: {done}/{total} seeds ({:.1}%), {per_second:.0} seeds/s, eta {}",
                        done as f64 * 100.0 / (*total).max(1) as f64,
                        indicatif::HumanDuration(Duration::from_secs_f64(left_secs.min(1e12)))
                    );
                }
            }
        }
    }

    fn finish(&self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shard_from_env;
    use std::collections::HashMap;

    fn shard(vars: &[(&str, &str)]) -> Result<(u64, u64), String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        shard_from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn kubernetes_indexes_count_from_zero() {
        let env = |index| {
            shard(&[
                ("JOB_COMPLETION_INDEX", index),
                ("KVROUTE_SHARD_COUNT", "4"),
            ])
        };
        assert_eq!(env("0"), Ok((1, 4)));
        assert_eq!(env("3"), Ok((4, 4)));
        assert!(env("4").unwrap_err().contains("5/4"));
        assert!(shard(&[("JOB_COMPLETION_INDEX", "0")])
            .unwrap_err()
            .contains("KVROUTE_SHARD_COUNT"));
    }

    #[test]
    fn slurm_tasks_count_from_the_array_minimum() {
        let env = |id, min, max| {
            shard(&[
                ("SLURM_ARRAY_TASK_ID", id),
                ("SLURM_ARRAY_TASK_MIN", min),
                ("SLURM_ARRAY_TASK_MAX", max),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
            ])
        };
        assert_eq!(env("0", "0", "2"), Ok((1, 3)));
        assert_eq!(env("7", "5", "7"), Ok((3, 3)));
        // `--array=0-4:2` runs tasks 0, 2, 4: three tasks over a span of five.
        assert!(env("2", "0", "4").unwrap_err().contains("contiguous"));
    }

    #[test]
    fn a_missing_or_ambiguous_scheduler_is_an_error() {
        assert!(shard(&[]).unwrap_err().contains("neither"));
        assert!(
            shard(&[("JOB_COMPLETION_INDEX", "0"), ("SLURM_ARRAY_TASK_ID", "0")])
                .unwrap_err()
                .contains("both")
        );
        assert!(
            shard(&[("JOB_COMPLETION_INDEX", "-1"), ("KVROUTE_SHARD_COUNT", "2")])
                .unwrap_err()
                .contains("not a non-negative integer")
        );
    }
}
