//! `kvroute peer run` and `kvroute peer sweep` (SPEC.md §15): a router or KV indexer
//! that is a child process, driven over `kvroute-peer/1` by `kvroute_peer_core`, whose
//! comparison and classification are the in-process Dynamo comparison's. Nothing of
//! Dynamo is linked here: the peer is whatever COMMAND is given.

use crate::failure::Failure;
use crate::out;
use kvroute_cli::args::{PeerAction, PeerArgs, PeerFormat};
use kvroute_core::output::canonical::canonical_trace_bytes;
use kvroute_peer_core::classify::Options;
use kvroute_peer_core::run::{run_peer, shrunk_first_difference, RunOptions};
use kvroute_peer_core::sweep::{modes, trace_of, SweepReport};
use std::time::Duration;

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
            let loaded = crate::load_trace(Some(&trace))?;
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
                .map_err(|e| Failure::other(e.to_string()))?;
            match format {
                PeerFormat::Table => out::print(&run.table())?,
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
        PeerAction::Sweep { seeds, start, peer } => sweep(seeds, start, &peer),
    }
}

/// Each seed's trace in both delivery modes, one peer process per trace (the protocol
/// has no reset, and a fresh process is what makes one trace's state unable to reach
/// the next).
fn sweep(seeds: u64, start: u64, peer: &PeerArgs) -> Result<(), Failure> {
    let mut report = SweepReport::default();
    for seed in start..start.saturating_add(seeds) {
        let trace = trace_of(seed);
        for compare in modes(true) {
            let options = RunOptions {
                compare,
                timeout: Duration::from_millis(peer.timeout_ms),
                expect_version: peer.expect_version.clone(),
                policy: kvroute_core::Policy::CachePlusLoad,
            };
            let run = run_peer(&trace, &peer.command, &options).map_err(|e| {
                Failure::other(format!(
                    "seed {seed} (withhold_stale={}): {e}",
                    compare.withhold_stale
                ))
            })?;
            report.add(seed, compare, &run.report);
        }
    }
    out::print(&report.summary())
}
