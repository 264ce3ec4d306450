//! `kvroute peer run` and `kvroute peer sweep` (SPEC.md §15): a router or KV indexer
//! that is a child process, driven over `kvroute-peer/1` by `kvroute_peer_core`, whose
//! comparison and classification are the in-process Dynamo comparison's. Nothing of
//! Dynamo is linked here: the peer is whatever COMMAND is given.

use crate::failure::Failure;
use crate::out;
use kvroute_cli::args::{PeerAction, PeerArgs, PeerFormat};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_peer_core::classify::Options;
use kvroute_peer_core::peer_sweep::{shrunk_finding, sweep_peer, Processes, SweepOptions};
use kvroute_peer_core::run::{run_peer, shrunk_first_difference, RunOptions};
use std::time::Duration;

/// `text` with every line made safe for a terminal: a peer's name, messages and stderr
/// lines are the peer's own bytes, and the line breaks between them are kvroute's.
fn printable_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| kvroute_cli::terminal::printable(line))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Peer runs a shrink of `--diff-out` may take (each starts the peer once).
const SHRINK_RUNS_MAX: usize = 2_000;

pub(crate) fn peer(action: PeerAction) -> Result<(), Failure> {
    match action {
        PeerAction::Run {
            trace,
            peer,
            block_tokens,
            full_blocks_only,
            withhold_stale,
            policy,
            format,
            diff_out,
        } => {
            let loaded = crate::load_trace(Some(&trace)).map_err(|f| f.in_file(&trace))?;
            let options = RunOptions {
                compare: Options {
                    block_tokens,
                    full_blocks_only,
                    withhold_stale,
                    known_findings: true,
                },
                timeout: Duration::from_millis(peer.timeout_ms),
                expect_version: peer.expect_version.clone(),
                policy,
            };
            let run = run_peer(&loaded, &peer.command, &options)
                .map_err(|e| Failure::other(printable_lines(&e.to_string())))?;
            match format {
                PeerFormat::Table => out::print(&printable_lines(&run.table()))?,
                PeerFormat::Json => out::print(&format!("{}\n", run.json()))?,
            }
            let Some(path) = diff_out else {
                return Ok(());
            };
            let Some(shrunk) =
                shrunk_first_difference(&loaded, &peer.command, &options, &run, SHRINK_RUNS_MAX)
            else {
                out::note(&format!("no differences: {} not written", path.display()));
                return Ok(());
            };
            let mut bytes = canonical_trace_bytes(&shrunk);
            bytes.push(b'\n');
            out::write_file(&path, |w| w.write_all(&bytes))?;
            out::note(&format!(
                "first difference: {} events, {} workers -> {}",
                shrunk.events.len(),
                shrunk.workers.len(),
                path.display()
            ));
            Ok(())
        }
        PeerAction::Sweep {
            seeds,
            start,
            process_per_trace,
            diff_out,
            peer,
        } => sweep(seeds, start, process_per_trace, diff_out.as_deref(), &peer),
    }
}

/// Each seed's trace in both delivery modes: one peer process for the sweep when the
/// peer offers `reset` (unless `--process-per-trace`), else one a trace.
fn sweep(
    seeds: u64,
    start: u64,
    process_per_trace: bool,
    diff_out: Option<&std::path::Path>,
    peer: &PeerArgs,
) -> Result<(), Failure> {
    let options = SweepOptions {
        timeout: Duration::from_millis(peer.timeout_ms),
        expect_version: peer.expect_version.clone(),
        policy: kvroute_core::Policy::CachePlusLoad,
        processes: if process_per_trace {
            Processes::OnePerTrace
        } else {
            Processes::ResetWhenOffered
        },
    };
    let swept = sweep_peer(&peer.command, seeds, start, &options)
        .map_err(|e| Failure::other(printable_lines(&e)))?;
    out::print(&printable_lines(&swept.table()))?;
    let Some(path) = diff_out else {
        return Ok(());
    };
    let Some(finding) = swept.report.findings.first() else {
        out::note(&format!("no new findings: {} not written", path.display()));
        return Ok(());
    };
    let shrunk = shrunk_finding(&peer.command, finding, &options, SHRINK_RUNS_MAX);
    let mut bytes = canonical_trace_bytes(&shrunk);
    bytes.push(b'\n');
    out::write_file(path, |w| w.write_all(&bytes))?;
    out::note(&format!(
        "first new finding (seed {}, withhold_stale={}): {} events, {} workers -> {}",
        finding.seed,
        finding.options.withhold_stale,
        shrunk.events.len(),
        shrunk.workers.len(),
        path.display()
    ));
    Ok(())
}
