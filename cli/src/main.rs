//! `kvroute`: replay a routing trace under four policies and explain every decision.
//!
//! Exit status (SPEC.md §7): 0 success; 2 invalid trace, unreadable trace or bad usage;
//! 1 any other failure. Output files are written to a temporary file beside the target
//! and renamed into place only when complete, so a failed run leaves nothing behind.

use clap::{Parser, Subcommand, ValueEnum};
use kvroute_core::{canonical, engine, export, parse_trace, Trace};
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
        Some(path) => std::fs::read(path).map_err(|e| {
            Failure::invalid(vec![format!("{}: cannot read trace: {e}", path.display())])
        })?,
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
