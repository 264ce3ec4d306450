//! `kvroute`: replay a routing trace under four policies and explain every decision.
//!
//! Exit status (SPEC.md §7): 0 success; 2 invalid trace, unreadable trace or bad usage;
//! 1 any other failure; 3 from `join` when a gate it was given did not pass; 130 and
//! 143 after SIGINT and SIGTERM; 141 when stdout's reader went away. Every output, stdout or a file, goes through [`out`], which holds the
//! rules for files (a temporary file renamed into place, links followed, FIFOs and
//! devices written in place) and for signals.

use clap::{CommandFactory, FromArgMatches};
use kvroute_cli::args::{
    Cli, Command, ExportArgs, Format, PolicyOverrides, SimulateFormat, SAMPLE_MAX,
};
use kvroute_cli::verify::VerifyError;
use kvroute_core::input::EventStore;
use kvroute_core::output;
use kvroute_core::replay;
use kvroute_core::route::{Compiled, DecisionsRouted};
use kvroute_core::simulate::CompletionsLayout;
use kvroute_core::simulate::{self, Capacity, SimulateOptions};
use kvroute_core::{parse_trace, read_trace, read_trace_compact, Policy, ReadTraceError, Trace};
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

/// `eprintln!` that ignores a closed or full stderr instead of panicking.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::out::note(&format!($($arg)*))
    };
}

/// `println!` that returns a [`Failure`] instead of panicking on a closed or full stdout.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::print(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod conform;
mod failure;
mod import;
mod inputs;
mod join;
mod out;
mod peer;
mod progress;
mod publish;
mod record;
mod report;
mod swarm;
mod swarm_report;
mod verify_core;

use failure::Failure;
use inputs::{read_id_key, read_input};
use kvroute_cli::terminal::counted;
use out::{emit, emit_with};

fn main() -> ExitCode {
    out::install_signal_handlers();
    // The matches are kept for the paths check, which finds the paths by their types.
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return usage_error(&error),
    };
    if let Err(problem) = kvroute_cli::args::check(&cli) {
        return fail(&Failure::invalid(vec![problem]));
    }
    if let Err(problem) = kvroute_cli::paths::check(&matches) {
        return fail(&Failure::invalid(vec![problem]));
    }
    let command = cli.command.unwrap_or(Command::Replay {
        trace: None,
        format: Format::Table,
        out: None,
        export: ExportArgs::default(),
    });
    let outcome = run(command);
    // A signal being handled decides the exit code, whatever the run made of it.
    out::yield_to_signal_handler();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}

/// Runs one parsed and checked command.
fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Replay {
            trace,
            format,
            out,
            export,
        } => replay(trace.as_deref(), format, out.as_deref(), &export),
        Command::Validate { trace } => validate(&trace),
        command @ Command::Simulate { .. } => run_simulate(command),
        Command::Verify {
            trace,
            receipt,
            id_key,
        } => match receipt {
            Some(receipt) => verify(&trace, &receipt, id_key.as_deref()),
            None => verify_core::verify_core(&trace, id_key.as_deref()),
        },
        Command::Swarm(args) => swarm::swarm(args),
        command @ Command::Report { .. } => run_report(command),
        command @ Command::Diff { .. } => run_diff(command),
        Command::Join(args) => join::join_command(&args),
        Command::Peer { action } => peer::peer(action),
        Command::Conform(args) => conform::conform(args),
        Command::Publish(args) => publish::publish(args),
        Command::Help { command } => help(&command),
        Command::Record {
            endpoints,
            out,
            count,
            seconds,
            replay,
            replay_wait_ms,
        } => record::record(&record::RecordArgs {
            endpoints: &endpoints,
            out: &out,
            count,
            seconds,
            replay: &replay,
            replay_wait_ms,
        }),
        Command::Import { format } => {
            let (importer, out) = import::importer_of(format);
            import::run_import(importer.as_ref(), &out)
        }
    }
}

/// `kvroute diff`: the arguments as the diff takes them.
fn run_diff(command: Command) -> Result<(), Failure> {
    let Command::Diff {
        first,
        second,
        baseline,
        candidate,
        trace,
        format,
        out,
        csv_plain,
    } = command
    else {
        unreachable!("run passes only a diff command here");
    };
    report::diff_command(&report::DiffArgs {
        first: first.0,
        second: second.map(|p| p.0),
        baseline,
        candidate,
        trace: trace.map(|p| p.0),
        format,
        out: out.map(|p| p.0),
        csv_plain,
    })
}

/// `kvroute report`: the arguments as the report takes them.
fn run_report(command: Command) -> Result<(), Failure> {
    let Command::Report {
        input,
        trace,
        id_key,
        out,
        baseline,
        candidate,
        sample,
        completions,
        completions_format,
        slo,
        run,
    } = command
    else {
        unreachable!("run passes only a report command here");
    };
    report::report(
        input.as_deref(),
        trace.as_deref(),
        id_key.as_deref(),
        &out,
        (baseline, candidate),
        usize::try_from(sample).unwrap_or(SAMPLE_MAX),
        completions
            .map(|file| report::completions::CompletionsArgs {
                file: file.0,
                format: completions_format.map(|f| f.core()),
                slo,
                run: run.unwrap_or(Policy::CachePlusLoad),
            })
            .as_ref(),
    )
}

/// `kvroute simulate`: the options as the simulator takes them.
fn run_simulate(command: Command) -> Result<(), Failure> {
    let Command::Simulate {
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
        completions_out,
        ticks_per_ms,
        completions_format,
        worker_names,
        format,
    } = command
    else {
        unreachable!("run passes only a simulate command here");
    };
    simulate(
        &trace,
        (workers, worker_names.names()),
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
        PolicyOverrides { stale_rule, epochs },
        events_out.as_deref(),
        completions_out
            .as_deref()
            .map(|dir| (dir, ticks_per_ms, completions_format.layout())),
        format,
    )
}

/// Help and version go to stdout like any output (a full stdout is exit 1, a closed
/// pipe 141); usage errors to stderr with exit 2.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            match out::print(&error.render().to_string()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(failure) => fail(&failure),
            }
        }
        _ => {
            let _ = error.print();
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
        }
    }
}

fn fail(failure: &Failure) -> ExitCode {
    for line in &failure.lines {
        note!("{line}");
    }
    ExitCode::from(failure.status)
}

/// `kvroute help [COMMAND...]`: the long help of the command named.
fn help(path: &[String]) -> Result<(), Failure> {
    let mut command = Cli::command();
    command.build();
    let mut current = &mut command;
    for name in path {
        current = current
            .find_subcommand_mut(name)
            .ok_or_else(|| Failure::invalid(vec![format!("kvroute help: no command {name:?}")]))?;
    }
    out::print(&current.render_long_help().to_string())
}

/// Reads and validates a trace, streamed from the file or stdin (`-`) so that neither
/// its text nor a tree of it is held: memory follows the validated trace, not the file.
pub(crate) fn load_trace(path: Option<&Path>) -> Result<Trace, Failure> {
    let Some(path) = path else {
        return parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes())
            .map_err(|errors| Failure::invalid(errors.lines()));
    };
    read_trace_with(path, read_trace)
}

/// [`load_trace`] with the events held compactly ([`EventStore`]): what `validate`
/// and `replay` keep of a trace, so that their memory is the store and the routing
/// state, not a typed event per event: memory stays bounded by the state.
fn load_trace_compact(path: Option<&Path>) -> Result<(Trace, EventStore), Failure> {
    let Some(path) = path else {
        let mut trace = parse_trace(kvroute_core::LAB_TRACE_JSON.as_bytes())
            .map_err(|errors| Failure::invalid(errors.lines()))?;
        let mut store = EventStore::default();
        for event in std::mem::take(&mut trace.events) {
            store.push(event);
        }
        return Ok((trace, store));
    };
    read_trace_with(path, read_trace_compact)
}

/// Reads the trace at `path` (stdin for `-`) with `read`.
fn read_trace_with<T>(
    path: &Path,
    read: fn(Box<dyn Read>) -> Result<T, ReadTraceError>,
) -> Result<T, Failure> {
    let read = if path.as_os_str() == "-" {
        read(Box::new(std::io::stdin().lock()))
    } else {
        std::fs::File::open(path)
            .map_err(ReadTraceError::Io)
            .and_then(|file| read(Box::new(file)))
    };
    read.map_err(|e| match e {
        ReadTraceError::Io(e) => {
            Failure::invalid(vec![format!("{}: cannot read trace: {e}", path.display())])
        }
        ReadTraceError::Invalid(errors) => Failure::invalid(errors.lines()),
    })
}

fn replay(
    trace: Option<&Path>,
    format: Format,
    out: Option<&Path>,
    export: &ExportArgs,
) -> Result<(), Failure> {
    let progress = progress::Progress::start("replay", "reading and validating the trace");
    let (trace, mut events) = load_trace_compact(trace)?;
    // The digest names the trace as given; the ids are keyed after it (SPEC.md §6.5).
    let digest = output::trace_digest_of(&trace, &events);
    if let Some(key_file) = &export.id_key {
        let key = read_id_key(key_file)?;
        events.rename_request_ids(|id| kvroute_core::output::keyed_id(&key, id));
    }
    let csv_ids = if export.csv_plain {
        output::CsvIds::Plain
    } else {
        output::CsvIds::SpreadsheetSafe
    };
    progress.phase("replaying each policy");
    let compiled = Compiled::from_compact(&trace, &events);
    // `write_json` replays once for the digest and once to write (its doc says so).
    let replays = if matches!(format, Format::Json) { 2 } else { 1 };
    progress.count_decisions(
        &compiled.decisions_routed,
        replays * replay::decisions_per_replay(&compiled),
    );
    match format {
        // Streamed: the receipt is never held in memory, whatever the trace's size.
        Format::Json => emit_with(out, |w| {
            replay::write_json(&compiled, &digest, &mut progress.counting(w)).map(|_| ())
        }),
        Format::Table => {
            // The digest is hashed as the receipt is produced, so a large trace never
            // holds its receipt in memory just to print a table.
            let (receipt_digest, runs) = replay::stream_digest(&compiled, &digest);
            let table = output::summary_table_of(&runs, &digest, &receipt_digest);
            emit(table.as_bytes(), out)
        }
        Format::Jsonl => emit_with(out, |w| {
            replay::write_jsonl(&compiled, &digest, &mut progress.counting(w)).map(|_| ())
        }),
        Format::Csv => emit_with(out, |w| {
            replay::write_csv(&compiled, &mut progress.counting(w), csv_ids)
                .map(|_| ())
                .map_err(out::csv_io)
        }),
    }
}

/// The settings `simulate`'s table header echoes: the cache, lag, jitter (and its
/// seed), loss, and the stale rule and epoch numbering in force.
fn simulate_settings(options: &SimulateOptions, trace: &Trace) -> String {
    let cache = match options.capacity {
        Capacity::Tokens(tokens) => format!("cache {tokens} tokens"),
        Capacity::Blocks(blocks) => format!("cache {blocks} blocks"),
    };
    format!(
        "{cache}, lag {} ticks, jitter {} ticks (seed {}), loss {} per mille, stale rule {}, \
         epochs {}",
        options.publication_lag_ticks,
        options.jitter_ticks,
        options.jitter_seed,
        options.loss_per_mille,
        trace.policy.stale_rule.name(),
        trace.policy.epochs.name()
    )
}

fn simulate(
    path: &Path,
    (workers, names): (Option<u32>, simulate::WorkerNames),
    options: &SimulateOptions,
    overrides: PolicyOverrides,
    events_out: Option<&Path>,
    completions_out: Option<(&Path, u64, CompletionsLayout)>,
    format: SimulateFormat,
) -> Result<(), Failure> {
    if options.loss_per_mille > simulate::LOSS_PER_MILLE_MAX {
        return Err(Failure::invalid(vec![format!(
            "kvroute simulate: --loss {}: expected a per-mille integer from 0 to 1000",
            options.loss_per_mille
        )]));
    }
    let progress = progress::Progress::start("simulate", "reading and validating the trace");
    let mut trace = load_trace(Some(path))?;
    overrides.apply(&mut trace.policy);
    if let Some((_, _, CompletionsLayout::Dynamo)) = completions_out {
        if let Some(id) = simulate::first_worker_not_dynamo_named(&trace, workers, names) {
            return Err(Failure::invalid(vec![format!(
                "kvroute simulate: --completions-format dynamo: worker {} is not named \
                 dynamo|<worker_id>|dp<rank>, so a Dynamo record cannot name it (give \
                 --workers N --worker-names dynamo)",
                kvroute_core::output::quote_str(&id)
            )]));
        }
    }
    progress.phase("running the closed loop of each policy");
    let keep_completions = completions_out.is_some();
    let simulated = if format == SimulateFormat::Json {
        simulate_document(
            &trace,
            (workers, names),
            options,
            keep_completions,
            &progress,
        )?
    } else {
        simulate_table_runs(
            &trace,
            (workers, names),
            options,
            events_out.is_some(),
            keep_completions,
            &progress,
        )?
    };
    if let Some(dir) = events_out {
        progress.phase("validating and writing the generated traces");
        write_generated_traces(dir, &simulated.generated)?;
    }
    if let Some((dir, ticks_per_ms, layout)) = completions_out {
        progress.phase("writing the completion records");
        write_completions(dir, ticks_per_ms, layout, &simulated)?;
    }
    let stdout_bytes = simulated.stdout;
    progress.finish();
    emit(&stdout_bytes, None)?;
    note_written(events_out, completions_out.map(|(dir, _, _)| dir));
    Ok(())
}

/// Writes each policy's completion records, at `ticks_per_ms` in `layout`, into `dir`.
fn write_completions(
    dir: &Path,
    ticks_per_ms: u64,
    layout: CompletionsLayout,
    simulated: &Simulated,
) -> Result<(), Failure> {
    let files: Vec<(Policy, Vec<u8>)> = simulated
        .completions
        .iter()
        .map(|(policy, served)| {
            (
                *policy,
                simulate::completions_file(served, ticks_per_ms, layout, &simulated.worker_ids),
            )
        })
        .collect();
    write_policy_files(dir, &files, "completions.jsonl")
}

/// Notes on stderr each file written into the events and completions directories.
fn note_written(events_dir: Option<&Path>, completions_dir: Option<&Path>) {
    let written = [
        (events_dir, "trace.json"),
        (completions_dir, "completions.jsonl"),
    ];
    for (dir, suffix) in written {
        let Some(dir) = dir else { continue };
        for policy in Policy::STANDARD {
            let file = dir.join(format!("{}.{suffix}", policy.name()));
            note!("simulate: {} -> {}", policy.name(), file.display());
        }
    }
}

/// What a simulation gives the command: its stdout, each policy's generated trace
/// (when `--events-out` asks) and each policy's served requests (when
/// `--completions-out` asks), in receipt order.
struct Simulated {
    stdout: Vec<u8>,
    generated: Vec<(Policy, Vec<u8>)>,
    completions: Vec<(Policy, Vec<simulate::SimCompletion>)>,
    /// The simulated trace's worker ids, which each completion's worker index names.
    worker_ids: Vec<String>,
}

/// `--format json`: the canonical kvroute-simulate/1 document, which already holds the
/// generated traces.
fn simulate_document(
    trace: &Trace,
    (workers, names): (Option<u32>, simulate::WorkerNames),
    options: &SimulateOptions,
    keep_completions: bool,
    progress: &progress::Progress,
) -> Result<Simulated, Failure> {
    let routed = DecisionsRouted::default();
    // The closed loop routes each request once a policy.
    let total = Policy::STANDARD.len() as u64 * trace.request_count() as u64;
    progress.count_decisions(&routed, total);
    let result =
        simulate::simulate_result(trace, workers, names, options, &routed, keep_completions)
            .map_err(|e| Failure::invalid(vec![format!("kvroute simulate: {e}")]))?;
    note_dropped_events(result.dropped_events);
    let mut stdout = result.document;
    stdout.push(b'\n');
    Ok(Simulated {
        stdout,
        generated: result.generated_traces,
        completions: result.completions,
        worker_ids: result.worker_ids,
    })
}

/// The table: one closed loop a policy, keeping its generated events and its served
/// requests only when they are to be written.
fn simulate_table_runs(
    trace: &Trace,
    (workers, names): (Option<u32>, simulate::WorkerNames),
    options: &SimulateOptions,
    keep_events: bool,
    keep_completions: bool,
    progress: &progress::Progress,
) -> Result<Simulated, Failure> {
    let (sim_trace, dropped) = simulate::simulation_trace_named(trace, workers, names)
        .map_err(|e| Failure::invalid(vec![format!("kvroute simulate: {e}")]))?;
    note_dropped_events(dropped);
    let compiled = Compiled::new(&sim_trace);
    let policy_count = Policy::STANDARD.len();
    progress.count_decisions(
        &compiled.decisions_routed,
        policy_count as u64 * compiled.request_count(),
    );
    let (runs, completions): (Vec<simulate::SimRun>, Vec<_>) = Policy::STANDARD
        .iter()
        .enumerate()
        .map(|(i, &policy)| {
            progress.phase(&format!(
                "running the closed loop of {} ({} of {policy_count})",
                policy.name(),
                i + 1
            ));
            let (run, served) = if keep_completions {
                simulate::simulate_policy_with_completions(
                    &compiled,
                    policy,
                    options,
                    keep_events,
                    &mut (),
                )
            } else {
                let run =
                    simulate::simulate_policy(&compiled, policy, options, keep_events, &mut ());
                (run, Vec::new())
            };
            (run, (policy, served))
        })
        .unzip();
    let table = simulate::simulate_table(
        &runs,
        sim_trace.workers.len(),
        sim_trace.request_count(),
        &simulate_settings(options, &sim_trace),
    );
    let generated = if keep_events {
        runs.iter()
            .map(|run| {
                let trace = simulate::generated_trace(&sim_trace, run);
                (run.policy, output::canonical_trace_bytes(&trace))
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Simulated {
        stdout: table.into_bytes(),
        generated,
        completions,
        worker_ids: compiled
            .worker_ids
            .iter()
            .map(|&id| id.to_owned())
            .collect(),
    })
}

/// Says on stderr that the input's own cache and load events were not used.
fn note_dropped_events(dropped: usize) {
    if dropped > 0 {
        note!(
            "simulate: dropped the trace's {dropped} cache and load events; the engine model generates its own"
        );
    }
}

/// Writes each policy's generated trace to `DIR/<policy>.trace.json`, creating DIR, or
/// nothing at all: every trace is validated first (SPEC.md §11: a written trace
/// replays), all four are staged beside their targets, and only then renamed into
/// place; a failure removes the directories this run created.
fn write_generated_traces(dir: &Path, traces: &[(Policy, Vec<u8>)]) -> Result<(), Failure> {
    for (policy, bytes) in traces {
        if let Err(errors) = parse_trace(bytes) {
            let mut lines = vec![format!(
                "kvroute simulate: the generated {} trace would not validate, so --events-out \
                 writes nothing (lower --lag or --jitter, or use fewer requests):",
                policy.name()
            )];
            lines.extend(errors.lines().into_iter().take(5).map(|l| format!("  {l}")));
            return Err(Failure::invalid(lines));
        }
    }
    let with_newlines: Vec<(Policy, Vec<u8>)> = traces
        .iter()
        .map(|(policy, bytes)| (*policy, [bytes.as_slice(), b"\n"].concat()))
        .collect();
    write_policy_files(dir, &with_newlines, "trace.json")
}

/// Writes `DIR/<policy>.<suffix>` for each policy, all or none: every file is staged
/// before any is renamed into place, and directories this created go if one fails.
fn write_policy_files(
    dir: &Path,
    files: &[(Policy, Vec<u8>)],
    suffix: &str,
) -> Result<(), Failure> {
    let created = out::CreatedDirs::create(dir)
        .map_err(|e| Failure::other(format!("{}: cannot create: {e}", dir.display())))?;
    let mut staged = Vec::new();
    for (policy, bytes) in files {
        let file = dir.join(format!("{}.{suffix}", policy.name()));
        staged.push(out::stage(&file, |w| w.write_all(bytes))?);
    }
    for file in staged {
        file.commit()?;
    }
    created.keep();
    Ok(())
}

fn validate(path: &Path) -> Result<(), Failure> {
    let (trace, events) = load_trace_compact(Some(path))?;
    let requests = (0..events.len())
        .filter(|&i| events.request_id_of(i).is_some())
        .count();
    outln!(
        "ok: {}, {} ({}), limits {}, trace {}",
        counted(trace.workers.len() as u64, "worker", "workers"),
        counted(events.len() as u64, "event", "events"),
        counted(requests as u64, "request", "requests"),
        trace.limits.name(),
        output::trace_digest_of(&trace, &events)
    )
}

/// `kvroute verify --trace TRACE RECEIPT`: the receipt is streamed from its file or
/// stdin and compared with the oracle's recomputation as it is produced (SPEC.md §7).
/// (That at most one of TRACE and RECEIPT is `-` was checked with every command's paths.)
fn verify(trace: &Path, receipt: &Path, id_key: Option<&Path>) -> Result<(), Failure> {
    let key = id_key.map(read_id_key).transpose()?;
    let progress = progress::Progress::start("verify", "reading the trace");
    let trace_bytes = read_input(trace, "trace")?;
    let cannot_read = |e: std::io::Error| {
        Failure::invalid(vec![format!(
            "{}: cannot read receipt: {e}",
            receipt.display()
        )])
    };
    let source: Box<dyn Read> = if receipt.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(receipt).map_err(cannot_read)?;
        // A regular file's size is the total the progress line counts towards.
        if let Some(meta) = file.metadata().ok().filter(|m| m.is_file()) {
            progress.expect_read_total(meta.len());
        }
        Box::new(file)
    };
    let mut reader = std::io::BufReader::with_capacity(256 * 1024, progress.reading(source));
    let phase = |name: &str| progress.phase(name);
    let verdict =
        kvroute_cli::verify::verify_stream(&trace_bytes, &mut reader, key.as_deref(), &phase);
    drop(reader);
    progress.finish();
    match verdict {
        Ok(verified) => outln!(
            "ok: the receipt matches the recomputation ({})",
            verified.receipt_digest
        ),
        Err(VerifyError::InvalidTrace(lines)) => Err(Failure::invalid(lines)),
        Err(VerifyError::Unreadable(reason)) => Err(Failure::invalid(vec![format!(
            "{}: {reason}",
            receipt.display()
        )])),
        // Values in the problem are quoted as SPEC.md §2.2 quotes them; what a quote
        // leaves raw (C1 controls, bidirectional overrides) is escaped here.
        Err(VerifyError::Rejected(problem)) => Err(Failure::other(format!(
            "{}: rejected: {}",
            receipt.display(),
            kvroute_cli::terminal::printable(&problem)
        ))),
    }
}
