//! `kvroute`: replay a routing trace under four policies and explain every decision.
//!
//! Exit status (SPEC.md §7): 0 success; 2 invalid trace, unreadable trace or bad usage;
//! 1 any other failure. Output files are written to a temporary file beside the target
//! and renamed into place only when complete, so a failed run leaves nothing behind.

use clap::{Parser, Subcommand, ValueEnum};
use kvroute_core::{canonical, engine, export, parse_trace, Trace};
use kvroute_harness::sweep::{self, SweepConfig};
use kvroute_harness::verify::VerifyError;
use std::io::IsTerminal;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kvroute",
    version,
    about = "Replay a KV-aware routing trace under four policies and explain every decision",
    long_about = "Replay a KV-aware routing trace under four policies and explain every \
                  decision. With no command, replays the built-in lab trace as a table."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace (default: the built-in lab trace) and print or write the receipt.
    Replay {
        /// Trace file (kvroute-trace/1 JSON); omit for the built-in lab trace.
        trace: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write to FILE instead of stdout (atomically: nothing is left on failure).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Check a trace against the contract and print its digest.
    Validate {
        /// Trace file (kvroute-trace/1 JSON).
        trace: PathBuf,
    },
    /// Check a receipt against the trace it claims to explain, by recomputing it with
    /// the independent oracle. Exit 0 when it matches, 1 with the first problem.
    Verify {
        /// The trace the receipt was produced from.
        #[arg(long, value_name = "TRACE")]
        trace: PathBuf,
        /// The receipt (kvroute-receipt/1 JSON).
        receipt: PathBuf,
    },
    /// Generate one trace per seed and compare core with the oracle on each, in parallel.
    Swarm {
        /// How many seeds to run.
        #[arg(long)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Worker threads (default: every core).
        #[arg(long)]
        jobs: Option<usize>,
        /// Run only shard K of M (1-based), e.g. `--shard 2/4`.
        #[arg(long, value_name = "K/M", value_parser = parse_shard)]
        shard: Option<(u64, u64)>,
    },
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (k, m) = text
        .split_once('/')
        .ok_or_else(|| format!("expected K/M, found {text:?}"))?;
    let k: u64 = k
        .parse()
        .map_err(|_| format!("shard K is not a number: {k:?}"))?;
    let m: u64 = m
        .parse()
        .map_err(|_| format!("shard M is not a number: {m:?}"))?;
    if m == 0 || k == 0 || k > m {
        return Err(format!("expected 1 <= K <= M, found {k}/{m}"));
    }
    Ok((k, m))
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// One row of headline metrics per policy, then the digests.
    Table,
    /// The canonical receipt (RFC 8785) plus a newline.
    Json,
    /// One row per (policy, decision, candidate).
    Csv,
}

/// A failure with its exit status.
struct Failure {
    status: u8,
    lines: Vec<String>,
}

impl Failure {
    fn invalid(lines: Vec<String>) -> Self {
        Failure { status: 2, lines }
    }
    fn other(line: String) -> Self {
        Failure {
            status: 1,
            lines: vec![line],
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Replay {
        trace: None,
        format: Format::Table,
        out: None,
    });
    let result = match command {
        Command::Replay { trace, format, out } => replay(trace.as_deref(), format, out.as_deref()),
        Command::Validate { trace } => validate(&trace),
        Command::Verify { trace, receipt } => verify(&trace, &receipt),
        Command::Swarm {
            seeds,
            start,
            jobs,
            shard,
        } => swarm(SweepConfig {
            start,
            seeds,
            jobs: jobs.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
            shard,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let stderr = std::io::stderr();
            let mut stderr = stderr.lock();
            for line in &failure.lines {
                let _ = writeln!(stderr, "{line}");
            }
            ExitCode::from(failure.status)
        }
    }
}

fn load_trace(path: Option<&Path>) -> Result<Trace, Failure> {
    let bytes = match path {
        None => kvroute_core::LAB_TRACE_JSON.as_bytes().to_vec(),
        Some(path) => read_input(path, "trace")?,
    };
    parse_trace(&bytes).map_err(|errors| Failure::invalid(errors.lines()))
}

fn replay(trace: Option<&Path>, format: Format, out: Option<&Path>) -> Result<(), Failure> {
    let trace = load_trace(trace)?;
    let receipt = engine::replay(&trace);
    let bytes = match format {
        Format::Table => export::summary_table(&receipt).into_bytes(),
        Format::Json => {
            let mut bytes = receipt.canonical_bytes();
            bytes.push(b'\n');
            bytes
        }
        Format::Csv => export::csv_bytes(&receipt)
            .map_err(|e| Failure::other(format!("kvroute: cannot write CSV: {e}")))?,
    };
    emit(&bytes, out)
}

fn validate(path: &Path) -> Result<(), Failure> {
    let trace = load_trace(Some(path))?;
    println!(
        "ok: {} workers, {} events ({} requests), limits {}, trace {}",
        trace.workers.len(),
        trace.events.len(),
        trace.request_count(),
        trace.limits.name(),
        canonical::trace_digest(&trace)
    );
    Ok(())
}

fn read_input(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|e| Failure::invalid(vec![format!("{}: cannot read {what}: {e}", path.display())]))
}

fn verify(trace: &Path, receipt: &Path) -> Result<(), Failure> {
    let trace_bytes = read_input(trace, "trace")?;
    let receipt_bytes = std::fs::read(receipt)
        .map_err(|e| Failure::other(format!("{}: cannot read receipt: {e}", receipt.display())))?;
    match kvroute_harness::verify::verify(&trace_bytes, &receipt_bytes) {
        Ok(digest) => {
            println!("ok: the receipt matches the recomputation ({digest})");
            Ok(())
        }
        Err(VerifyError::InvalidTrace(lines)) => Err(Failure::invalid(lines)),
        Err(VerifyError::Rejected(problem)) => Err(Failure::other(format!(
            "{}: rejected: {problem}",
            receipt.display()
        ))),
    }
}

fn swarm(config: SweepConfig) -> Result<(), Failure> {
    let seeds = config.seed_list();
    let Some(&first) = seeds.first() else {
        println!("swarm: no seeds to run");
        return Ok(());
    };
    let shard = config
        .shard
        .map_or(String::new(), |(k, m)| format!(", shard {k}/{m}"));
    println!(
        "swarm: first seed {first}, {} seeds from {}{shard}, {} jobs",
        seeds.len(),
        config.start,
        config.jobs
    );
    let progress = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(seeds.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    progress.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {per_sec} eta {eta}")
            .expect("the template is valid"),
    );
    let report = sweep::run(&config, || progress.inc(1));
    progress.finish_and_clear();
    const FAILURES_SHOWN_MAX: usize = 20;
    for failure in report.failures.iter().take(FAILURES_SHOWN_MAX) {
        println!(
            "seed {}: core and oracle diverge {}",
            failure.seed, failure.divergence
        );
        println!(
            "  reproduce: kvroute swarm --seeds 1 --start {}",
            failure.seed
        );
        if let Some(path) = &failure.shrunk_trace {
            println!("  shrunk trace: {}", path.display());
        }
    }
    if report.failures.len() > FAILURES_SHOWN_MAX {
        println!(
            "... and {} more divergent seeds",
            report.failures.len() - FAILURES_SHOWN_MAX
        );
    }
    println!(
        "swarm: {} seeds run, {} divergences, {:.0} seeds/s",
        report.seeds_run,
        report.failures.len(),
        report.seeds_per_second()
    );
    if report.failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::other(format!(
            "swarm: {} divergent seeds",
            report.failures.len()
        )))
    }
}

/// Writes to stdout, or atomically to `out`.
fn emit(bytes: &[u8], out: Option<&Path>) -> Result<(), Failure> {
    let Some(out) = out else {
        let stdout = std::io::stdout();
        let mut stdout = stdout.lock();
        return stdout
            .write_all(bytes)
            .and_then(|()| stdout.flush())
            .map_err(|e| Failure::other(format!("kvroute: cannot write to stdout: {e}")));
    };
    let fail = |e: std::io::Error| Failure::other(format!("{}: cannot write: {e}", out.display()));
    let dir = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // The temporary file is deleted when dropped, so every early return cleans up.
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.as_file().sync_all().map_err(fail)?;
    file.persist(out).map_err(|e| fail(e.error))?;
    Ok(())
}
