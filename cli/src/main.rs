//! `kvroute`: replay a routing trace under four policies and explain every decision.
//!
//! Exit status (SPEC.md §7): 0 success; 2 invalid trace, unreadable trace or bad usage;
//! 1 any other failure. Output files are written to a temporary file beside the target
//! and renamed into place only when complete, so a failed run leaves nothing behind.

use clap::{Parser, Subcommand, ValueEnum};
use kvroute_core::input::mooncake::{self, MooncakeOptions};
use kvroute_core::input::trace::EventKind;
use kvroute_core::output::{canonical, csv, jsonl, table, typed};
use kvroute_core::route::compiled::Compiled;
use kvroute_core::simulate::{self, Capacity, SimulateOptions};
use kvroute_core::{parse_trace, Policy, Trace};
use kvroute_harness::verify::VerifyError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod report;
mod swarm;
mod swarm_report;

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
        #[command(flatten)]
        export: ExportArgs,
    },
    /// Route a request-only trace in closed loop: a modelled engine per worker stores
    /// each prefill's blocks in an LRU cache and publishes store/evict events back to
    /// the router (SPEC.md §11). Prints the four-policy comparison.
    Simulate {
        /// Trace file (kvroute-trace/1 JSON); its cache and load events are dropped.
        trace: PathBuf,
        /// Replace the trace's workers by N copies of its first worker.
        #[arg(long, value_name = "N")]
        workers: Option<u32>,
        /// KV cache capacity per worker, in tokens.
        #[arg(long, value_name = "TOKENS", conflicts_with = "cache_blocks",
              default_value_t = simulate::DEFAULT_CACHE_TOKENS)]
        cache_tokens: u64,
        /// KV cache capacity per worker, in blocks (any size), instead of tokens.
        #[arg(long, value_name = "BLOCKS")]
        cache_blocks: Option<u64>,
        /// Ticks from a prefill completing to its cache events reaching the router.
        #[arg(long, value_name = "TICKS", default_value_t = simulate::DEFAULT_PUBLICATION_LAG_TICKS)]
        lag: u64,
        /// Up to this many extra ticks per event, seeded (reorders events: stale epochs).
        #[arg(long, value_name = "TICKS", default_value_t = 0)]
        jitter: u64,
        /// Per mille of published cache events the bus loses before delivery (0 to 1000).
        #[arg(long, value_name = "PER_MILLE", default_value_t = 0)]
        loss: u64,
        /// Seed of the jitter and of the loss.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Replace the trace's policy.stale_rule (SPEC.md §3.2).
        #[arg(long, value_enum, value_name = "RULE")]
        stale_rule: Option<StaleRuleArg>,
        /// Replace the trace's policy.epochs (SPEC.md §3.6); `sequential` detects gaps and
        /// re-queries the worker.
        #[arg(long, value_enum, value_name = "MODE")]
        epochs: Option<EpochsArg>,
        /// Write each policy's generated trace (requests plus the cache events its loop
        /// produced) to DIR/<policy>.trace.json; `kvroute replay` reproduces the run.
        #[arg(long, value_name = "DIR")]
        events_out: Option<PathBuf>,
        /// Output format: the comparison table, or the canonical kvroute-simulate/1
        /// document of SPEC.md §11.1 (figures plus each generated trace's digest).
        #[arg(long, value_enum, default_value_t = SimulateFormat::Table)]
        format: SimulateFormat,
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
        /// The receipt was written with `replay --id-key FILE`: key the recomputed
        /// request ids with the same FILE before comparing.
        #[arg(long, value_name = "FILE")]
        id_key: Option<PathBuf>,
    },
    /// Generate one trace per seed and compare core with the oracle on each, in parallel;
    /// `swarm merge` checks and joins the reports of a sharded sweep.
    Swarm(swarm::SwarmArgs),
    /// Write the lab report: one self-contained HTML page (opens offline) with the
    /// four-policy comparison, a Pareto view of each decision's candidates, assigned
    /// work over time, a shadow diff, the stale and boundary logs and cohort metrics.
    Report {
        /// A trace or a receipt (kvroute-receipt/1 JSON); omit for the built-in lab trace.
        input: Option<PathBuf>,
        /// With a receipt: its trace, for cohort metrics and latency proxies.
        #[arg(long, value_name = "TRACE")]
        trace: Option<PathBuf>,
        /// Where to write the page (atomically: nothing is left on failure).
        #[arg(
            short = 'o',
            long = "out",
            value_name = "OUT",
            default_value = "report.html"
        )]
        out: PathBuf,
        /// The serving policy of the shadow-diff section.
        #[arg(long, value_name = "POLICY", value_parser = report::parse_policy,
              default_value = "least_load")]
        baseline: Policy,
        /// The shadowed policy of the shadow-diff section.
        #[arg(long, value_name = "POLICY", value_parser = report::parse_policy,
              default_value = "cache_plus_load")]
        candidate: Policy,
        /// On a large trace, decisions per policy kept in detail besides the
        /// interesting ones, evenly spaced.
        #[arg(long, value_name = "N", default_value_t = 60)]
        sample: usize,
    },
    /// Shadow mode: the decisions where a candidate policy chooses differently from the
    /// baseline, with both chosen rows and the predicted deltas. One input (trace or
    /// receipt) compares two of its runs; two receipts compare the first's baseline run
    /// with the second's candidate run (default cache_plus_load for both).
    Diff {
        /// A trace or receipt.
        first: PathBuf,
        /// A second receipt of the same requests (e.g. other policy settings).
        second: Option<PathBuf>,
        /// The serving policy.
        #[arg(long, value_name = "POLICY", value_parser = report::parse_policy)]
        baseline: Option<Policy>,
        /// The shadowed policy.
        #[arg(long, value_name = "POLICY", value_parser = report::parse_policy)]
        candidate: Option<Policy>,
        /// With receipts: their trace, for latency proxy deltas.
        #[arg(long, value_name = "TRACE")]
        trace: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = report::DiffFormat::Table)]
        format: report::DiffFormat,
        /// Write to FILE instead of stdout (atomically).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Convert a trace from another format into a kvroute-trace/1 file.
    Import {
        #[command(subcommand)]
        format: ImportFormat,
    },
}

#[derive(Subcommand)]
enum ImportFormat {
    /// Mooncake FAST'25 JSONL (`timestamp` in ms, `input_length`, `output_length`,
    /// `hash_ids`): one request a line, under the `scale` limits (SPEC.md §10).
    Mooncake {
        /// The JSONL file.
        file: PathBuf,
        /// Prompt tokens per hash id (the last block of a request may be partial).
        #[arg(long, default_value_t = 512)]
        block_tokens: u64,
        /// The tenant of every request.
        #[arg(long, default_value = "mooncake")]
        tenant: String,
        /// The model of every request and worker.
        #[arg(long, default_value = "mooncake-model")]
        model: String,
        /// How many identical workers to create (1 to 4096).
        #[arg(long, default_value_t = 8)]
        workers: u32,
        /// Where to write the trace (atomically: nothing is left on failure).
        #[arg(short = 'o', long = "out", value_name = "OUT")]
        out: PathBuf,
    },
}

/// How `replay` exports ids (SPEC.md §6.3, §6.5).
#[derive(clap::Args, Default)]
struct ExportArgs {
    /// Write every request id as the first 16 bytes of HMAC-SHA-256 under the bytes of
    /// FILE, in hex (32 digits), so the export can be shared without the ids.
    #[arg(long, value_name = "FILE")]
    id_key: Option<PathBuf>,
    /// CSV only: write ids exactly as in the receipt. By default an id starting with
    /// `=`, `+`, `-`, `@`, tab or CR gets a leading `'`, so spreadsheets do not run it.
    #[arg(long)]
    csv_plain: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// One row of headline metrics per policy, then the digests.
    Table,
    /// The canonical receipt (RFC 8785) plus a newline.
    Json,
    /// One row per (policy, decision, candidate), written as the runs replay.
    Csv,
    /// The receipt as JSON Lines, written as the runs replay (SPEC.md §6.4); ends with
    /// the same receipt_digest as `json`.
    Jsonl,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StaleRuleArg {
    #[value(name = "worker_epoch")]
    WorkerEpoch,
    #[value(name = "key_epoch")]
    KeyEpoch,
    #[value(name = "arrival_order")]
    ArrivalOrder,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EpochsArg {
    #[value(name = "any")]
    Any,
    #[value(name = "sequential")]
    Sequential,
}

/// `--stale-rule` and `--epochs`, which replace the trace's own policy members.
#[derive(Clone, Copy, Default)]
struct PolicyOverrides {
    stale_rule: Option<StaleRuleArg>,
    epochs: Option<EpochsArg>,
}

impl PolicyOverrides {
    fn apply(self, policy: &mut kvroute_core::input::trace::PolicyParams) {
        use kvroute_core::input::trace::{EpochsMode, StaleRule};
        if let Some(rule) = self.stale_rule {
            policy.stale_rule = match rule {
                StaleRuleArg::WorkerEpoch => StaleRule::WorkerEpoch,
                StaleRuleArg::KeyEpoch => StaleRule::KeyEpoch,
                StaleRuleArg::ArrivalOrder => StaleRule::ArrivalOrder,
            };
        }
        if let Some(mode) = self.epochs {
            policy.epochs = match mode {
                EpochsArg::Any => EpochsMode::Any,
                EpochsArg::Sequential => EpochsMode::Sequential,
            };
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SimulateFormat {
    /// One row per policy: the table in README.
    Table,
    /// The canonical kvroute-simulate/1 document plus a newline.
    Json,
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
        export: ExportArgs::default(),
    });
    let result = match command {
        Command::Replay {
            trace,
            format,
            out,
            export,
        } => replay(trace.as_deref(), format, out.as_deref(), &export),
        Command::Validate { trace } => validate(&trace),
        Command::Simulate {
            trace,
            workers,
            cache_tokens,
            cache_blocks,
            lag,
            jitter,
            loss,
            seed,
            stale_rule,
            epochs,
            events_out,
            format,
        } => simulate(
            &trace,
            workers,
            PolicyOverrides { stale_rule, epochs },
            &SimulateOptions {
                capacity: match cache_blocks {
                    Some(blocks) => Capacity::Blocks(blocks),
                    None => Capacity::Tokens(cache_tokens),
                },
                publication_lag_ticks: lag,
                jitter_ticks: jitter,
                jitter_seed: seed,
                loss_per_mille: loss,
            },
            events_out.as_deref(),
            format,
        ),
        Command::Verify {
            trace,
            receipt,
            id_key,
        } => verify(&trace, &receipt, id_key.as_deref()),
        Command::Swarm(args) => swarm::swarm(args),
        Command::Report {
            input,
            trace,
            out,
            baseline,
            candidate,
            sample,
        } => report::report(
            input.as_deref(),
            trace.as_deref(),
            &out,
            (baseline, candidate),
            sample,
        ),
        Command::Diff {
            first,
            second,
            baseline,
            candidate,
            trace,
            format,
            out,
        } => report::diff_command(&report::DiffArgs {
            first,
            second,
            baseline,
            candidate,
            trace,
            format,
            out,
        }),
        Command::Import {
            format:
                ImportFormat::Mooncake {
                    file,
                    block_tokens,
                    tenant,
                    model,
                    workers,
                    out,
                },
        } => import_mooncake(
            &file,
            &MooncakeOptions {
                block_tokens,
                tenant,
                model,
                workers,
            },
            &out,
        ),
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

fn replay(
    trace: Option<&Path>,
    format: Format,
    out: Option<&Path>,
    export: &ExportArgs,
) -> Result<(), Failure> {
    let mut trace = load_trace(trace)?;
    // The digest names the trace as given; the ids are keyed after it (SPEC.md §6.5).
    let digest = canonical::trace_digest(&trace);
    if let Some(key_file) = &export.id_key {
        kvroute_core::output::ids::key_request_ids(&mut trace, &read_id_key(key_file)?);
    }
    let csv_ids = if export.csv_plain {
        csv::CsvIds::Plain
    } else {
        csv::CsvIds::SpreadsheetSafe
    };
    match format {
        // Streamed: the receipt is never held in memory, whatever the trace's size.
        Format::Json => emit_with(out, |w| {
            typed::write_json(&Compiled::new(&trace), &digest, w)
                .map(|_| ())
                .map_err(|e| Failure::other(format!("kvroute: cannot write: {e}")))
        }),
        Format::Table => {
            // The digest is hashed as the receipt is produced, so a large trace never
            // holds its receipt in memory just to print a table.
            let (receipt_digest, runs) = typed::stream_digest(&Compiled::new(&trace), &digest);
            let table = table::summary_table_of(&runs, &digest, &receipt_digest);
            emit(table.as_bytes(), out)
        }
        Format::Jsonl => emit_with(out, |w| {
            jsonl::write_jsonl(&Compiled::new(&trace), &digest, w)
                .map(|_| ())
                .map_err(|e| Failure::other(format!("kvroute: cannot write: {e}")))
        }),
        Format::Csv => emit_with(out, |w| {
            csv::write_csv(&Compiled::new(&trace), w, csv_ids)
                .map(|_| ())
                .map_err(|e| Failure::other(format!("kvroute: cannot write CSV: {e}")))
        }),
    }
}

fn simulate(
    path: &Path,
    workers: Option<u32>,
    overrides: PolicyOverrides,
    options: &SimulateOptions,
    events_out: Option<&Path>,
    format: SimulateFormat,
) -> Result<(), Failure> {
    if options.loss_per_mille > simulate::LOSS_PER_MILLE_MAX {
        return Err(Failure::invalid(vec![format!(
            "kvroute simulate: --loss {}: expected a per-mille integer from 0 to 1000",
            options.loss_per_mille
        )]));
    }
    let mut trace = load_trace(Some(path))?;
    overrides.apply(&mut trace.policy);
    if format == SimulateFormat::Json {
        let result = simulate::result::simulate_result(&trace, workers, options)
            .map_err(|e| Failure::invalid(vec![format!("kvroute simulate: {e}")]))?;
        note_dropped_events(result.dropped_events);
        if let Some(dir) = events_out {
            for (policy, trace_bytes) in &result.generated_traces {
                write_generated_trace(dir, *policy, trace_bytes)?;
            }
        }
        let mut bytes = result.document;
        bytes.push(b'\n');
        return emit(&bytes, None);
    }
    let (sim_trace, dropped) = simulate::simulation_trace(&trace, workers)
        .map_err(|e| Failure::invalid(vec![format!("kvroute simulate: {e}")]))?;
    note_dropped_events(dropped);
    let compiled = Compiled::new(&sim_trace);
    let keep_events = events_out.is_some();
    let runs: Vec<simulate::SimRun> = Policy::ALL
        .iter()
        .map(|&policy| simulate::simulate_policy(&compiled, policy, options, keep_events, &mut ()))
        .collect();
    print!(
        "{}",
        simulate::table::simulate_table(&runs, sim_trace.workers.len(), sim_trace.request_count())
    );
    if let Some(dir) = events_out {
        for run in &runs {
            let generated = simulate::generated_trace(&sim_trace, run);
            write_generated_trace(
                dir,
                run.policy,
                &canonical::canonical_trace_bytes(&generated),
            )?;
        }
    }
    Ok(())
}

/// Says on stderr that the input's own cache and load events were not used.
fn note_dropped_events(dropped: usize) {
    if dropped > 0 {
        eprintln!(
            "simulate: dropped the trace's {dropped} cache and load events; the engine model generates its own"
        );
    }
}

/// Writes one policy's generated trace to `DIR/<policy>.trace.json`, creating DIR.
fn write_generated_trace(dir: &Path, policy: Policy, trace_bytes: &[u8]) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::other(format!("{}: cannot create: {e}", dir.display())))?;
    let mut bytes = trace_bytes.to_vec();
    bytes.push(b'\n');
    let file = dir.join(format!("{}.trace.json", policy.name()));
    emit(&bytes, Some(&file))?;
    eprintln!("simulate: {} -> {}", policy.name(), file.display());
    Ok(())
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

/// Converts a Mooncake trace; every bad line is printed as `FILE:LINE: reason`.
fn import_mooncake(file: &Path, options: &MooncakeOptions, out: &Path) -> Result<(), Failure> {
    let input = read_input(file, "Mooncake trace")?;
    let trace = mooncake::import_mooncake(input.as_slice(), options).map_err(|errors| {
        Failure::invalid(
            errors
                .iter()
                .map(|e| match e.line {
                    0 => format!("{}: {}", file.display(), e.reason),
                    line => format!("{}:{line}: {}", file.display(), e.reason),
                })
                .collect(),
        )
    })?;
    let mut bytes = canonical::canonical_trace_bytes(&trace);
    // `canonical::trace_digest(&trace)`, without serialising a large trace twice.
    let digest = canonical::sha256_tag(&bytes);
    bytes.push(b'\n');
    emit(&bytes, Some(out))?;
    let segments: usize = trace
        .events
        .iter()
        .map(|event| match &event.kind {
            EventKind::Request(request) => request.prefix.len(),
            _ => 0,
        })
        .sum();
    eprintln!(
        "imported {} requests, {} workers, {segments} segments -> {} ({digest})",
        trace.request_count(),
        trace.workers.len(),
        out.display()
    );
    Ok(())
}

fn read_input(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|e| Failure::invalid(vec![format!("{}: cannot read {what}: {e}", path.display())]))
}

/// The bytes of an `--id-key` file (SPEC.md §6.5): unreadable or empty is bad usage.
fn read_id_key(path: &Path) -> Result<Vec<u8>, Failure> {
    let key = std::fs::read(path).map_err(|e| {
        Failure::invalid(vec![format!("{}: cannot read id key: {e}", path.display())])
    })?;
    if key.is_empty() {
        return Err(Failure::invalid(vec![format!(
            "{}: the id key is empty",
            path.display()
        )]));
    }
    Ok(key)
}

fn verify(trace: &Path, receipt: &Path, id_key: Option<&Path>) -> Result<(), Failure> {
    let key = id_key.map(read_id_key).transpose()?;
    let trace_bytes = read_input(trace, "trace")?;
    let receipt_bytes = std::fs::read(receipt)
        .map_err(|e| Failure::other(format!("{}: cannot read receipt: {e}", receipt.display())))?;
    match kvroute_harness::verify::verify_keyed(&trace_bytes, &receipt_bytes, key.as_deref()) {
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

/// Writes to stdout, or atomically to `out`.
fn emit(bytes: &[u8], out: Option<&Path>) -> Result<(), Failure> {
    emit_with(out, |w| {
        w.write_all(bytes)
            .map_err(|e| Failure::other(format!("kvroute: cannot write: {e}")))
    })
}

/// Runs `write` against stdout, or against a temporary file beside `out` that is
/// renamed into place only when `write` succeeds.
fn emit_with(
    out: Option<&Path>,
    write: impl FnOnce(&mut dyn Write) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let Some(out) = out else {
        let stdout = std::io::stdout();
        let mut stdout = std::io::BufWriter::new(stdout.lock());
        write(&mut stdout)?;
        return stdout
            .flush()
            .map_err(|e| Failure::other(format!("kvroute: cannot write to stdout: {e}")));
    };
    let fail = |e: std::io::Error| Failure::other(format!("{}: cannot write: {e}", out.display()));
    let dir = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // The temporary file is deleted when dropped, so every early return cleans up.
    let mut builder = tempfile::Builder::new();
    // Created like any output file (0666 less the umask), not tempfile's owner-only 0600,
    // since the file is renamed into place as the user's result.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let file = builder.tempfile_in(dir).map_err(fail)?;
    let mut writer = std::io::BufWriter::new(file);
    write(&mut writer)?;
    let file = writer.into_inner().map_err(|e| fail(e.into_error()))?;
    file.as_file().sync_all().map_err(fail)?;
    file.persist(out).map_err(|e| fail(e.error))?;
    Ok(())
}
