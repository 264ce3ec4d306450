//! `kvroute-peers`: kvroute's reuse answers against NVIDIA Dynamo's KV indexers.
//!
//! A binary of its own rather than a `kvroute peer` subcommand: the peer crate takes
//! minutes to build and pulls an async stack, and a feature of `cli` would still put it
//! in `cli`'s lockfile graph and make `cargo clippy --workspace` builds of `cli` differ
//! by feature. Here the default `kvroute` binary never sees Dynamo.
//!
//! Exit codes as `kvroute`'s: 0 ok, 2 invalid input or usage, 1 anything else.

use clap::{Parser, Subcommand};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_peers::compare::{compare, Options};
use kvroute_peers::shrink::{cut_reproducing, shows, shrink};
use kvroute_peers::sweep::sweep;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kvroute-peers",
    about = "kvroute's reuse answers against peer KV indexers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay TRACE's cache events into kvroute and Dynamo's RadixTree and
    /// PositionalIndexer; print the agreement table.
    Dynamo {
        trace: PathBuf,
        /// Tokens of a whole block (Dynamo hashes only whole blocks).
        #[arg(long, default_value_t = 512)]
        block_tokens: u64,
        /// Compare only what Dynamo can express: whole blocks.
        #[arg(long)]
        full_blocks_only: bool,
        /// Give Dynamo only the events kvroute's epoch rule applied.
        #[arg(long)]
        withhold_stale: bool,
        /// Count the known Dynamo defect as a new finding.
        #[arg(long)]
        no_known_findings: bool,
        /// Write the first difference, cut and shrunk, as a trace reproducing it.
        #[arg(long)]
        diff_out: Option<PathBuf>,
    },
    /// Compare kvroute with each Dynamo indexer on generated chain-structured traces.
    Sweep {
        #[arg(long, default_value_t = 1000)]
        seeds: u64,
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Count the known Dynamo defect as a new finding.
        #[arg(long)]
        no_known_findings: bool,
    },
}

enum Failure {
    Invalid(String),
    Other(String),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Dynamo {
            trace,
            block_tokens,
            full_blocks_only,
            withhold_stale,
            no_known_findings,
            diff_out,
        } => dynamo(
            &trace,
            Options {
                block_tokens,
                full_blocks_only,
                withhold_stale,
                known_findings: !no_known_findings,
            },
            diff_out.as_deref(),
        ),
        Command::Sweep {
            seeds,
            start,
            no_known_findings,
        } => {
            let report = sweep(start..start + seeds, !no_known_findings);
            print!("{}", report.summary());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Invalid(message)) => {
            eprintln!("{message}");
            ExitCode::from(2)
        }
        Err(Failure::Other(message)) => {
            eprintln!("{message}");
            ExitCode::from(1)
        }
    }
}

fn dynamo(path: &Path, options: Options, diff_out: Option<&Path>) -> Result<(), Failure> {
    if options.block_tokens == 0 {
        return Err(Failure::Invalid(
            "block_tokens: expected a positive integer, found 0".into(),
        ));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::Invalid(format!("{}: cannot read trace: {e}", path.display())))?;
    let trace = kvroute_core::parse_trace(&bytes).map_err(|errors| {
        Failure::Invalid(
            errors
                .lines()
                .iter()
                .map(|l| format!("{}: {l}", path.display()))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    })?;
    let started = std::time::Instant::now();
    let report = compare(&trace, options);
    println!(
        "peer dynamo: {} requests on {} workers (dynamo-kv-router 1.6.1), block_tokens {}{}{}; {} keys not in chains",
        report.requests,
        report.workers,
        options.block_tokens,
        if options.full_blocks_only { ", full blocks only" } else { "" },
        if options.withhold_stale { ", stale events withheld" } else { "" },
        report.forked_keys
    );
    print!("{}", report.table());
    eprintln!("compared in {:.2} s", started.elapsed().as_secs_f64());
    let Some(out) = diff_out else { return Ok(()) };
    let Some(first) = report.first.first() else {
        eprintln!("no differences: {} not written", out.display());
        return Ok(());
    };
    let base = if options.full_blocks_only {
        kvroute_peers::compare::full_blocks_view(&trace, options.block_tokens)
    } else {
        trace.clone()
    };
    let exact = Options {
        full_blocks_only: false,
        ..options
    };
    let Some(cut) = cut_reproducing(&base, first, exact) else {
        return Err(Failure::Other(format!(
            "{}: the first difference does not reproduce on a cut of the trace",
            out.display()
        )));
    };
    let (comparison, cause) = (first.comparison.as_str(), first.cause);
    let shrunk = shrink(cut, |t| shows(t, exact, comparison, cause), 20_000);
    let mut bytes = canonical_trace_bytes(&shrunk);
    bytes.push(b'\n');
    write_new_file(out, &bytes)?;
    eprintln!(
        "{} ({} row, {}): {} events, {} workers -> {}",
        comparison,
        first.request_id,
        cause.name(),
        shrunk.events.len(),
        shrunk.workers.len(),
        out.display()
    );
    Ok(())
}

/// Writes `bytes` to a temporary file beside `out`, renamed into place when complete;
/// an existing `out` that is not a regular file (a symlink, a device) is refused.
fn write_new_file(out: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::Other(format!("{}: cannot write: {e}", out.display()));
    if let Ok(meta) = std::fs::symlink_metadata(out) {
        if !meta.file_type().is_file() {
            return Err(Failure::Other(format!(
                "{}: cannot write: exists and is not a regular file",
                out.display()
            )));
        }
    }
    let dir = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    // Created like any output file (0666 less the umask), not tempfile's owner-only
    // 0600, since it is renamed into place as the user's result (as `kvroute` does).
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut file = builder.tempfile_in(dir).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.as_file().sync_all().map_err(fail)?;
    file.persist(out).map_err(|e| fail(e.error))?;
    Ok(())
}
