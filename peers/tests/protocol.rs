//! The proof that the peer protocol loses nothing (SPEC.md §15): Dynamo driven over
//! `kvroute-peer/1` (`kvroute-peer-dynamo`, a child process fed one event at a time)
//! gives the in-process comparison's tallies, row for row and cause for cause, on every
//! fixture, on a simulated stream, and on the generated chain traces whose keys first
//! occur where the in-process look-ahead places them.

use kvroute_core::input::Trace;
use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::route::Compiled;
use kvroute_core::simulate::Capacity;
use kvroute_core::simulate::{generated_trace, simulate_policy, simulation_trace, SimulateOptions};
use kvroute_core::Policy;
use kvroute_peer_core::chains::ChainShape;
use kvroute_peer_core::run::{run_peer, RunOptions};
use kvroute_peers::compare::{compare, Options, Tally};
use kvroute_peers::sweep::{modes, trace_of};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

const ADAPTER: &str = env!("CARGO_BIN_EXE_kvroute-peer-dynamo");

fn command(positional: bool) -> Vec<OsString> {
    let mut command = vec![OsString::from(ADAPTER)];
    if positional {
        command.push("--positional".into());
    }
    command
}

fn counts(t: &Tally) -> (u64, u64, Vec<u64>) {
    (t.rows_compared, t.rows_differing, t.by_cause.to_vec())
}

/// Runs both indexers both ways and checks the protocol's tally against the in-process
/// one; returns how many rows differed in-process (so a caller can see the check was
/// not only over agreeing rows).
fn same_both_ways(trace: &Trace, options: Options, what: &str) -> u64 {
    let in_process = compare(trace, options);
    let mut differing = 0;
    for (positional, name) in [(false, "radix_tree"), (true, "positional")] {
        let run = run_peer(
            trace,
            &command(positional),
            &RunOptions {
                compare: options,
                timeout: Duration::from_secs(20),
                expect_version: Some("1.6.1".into()),
                policy: Policy::CachePlusLoad,
            },
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(run.report.tallies.len(), 1, "{what}");
        let expected = in_process.tally(name);
        assert_eq!(
            counts(&run.report.tallies[0]),
            counts(expected),
            "{what} ({name}, {options:?}):\nprotocol:   {}\nin-process: {}",
            run.report.tallies[0].table_line(),
            expected.table_line()
        );
        assert_eq!(run.report.requests, in_process.requests);
        differing += expected.rows_differing;
    }
    differing
}

fn load(path: &Path) -> Trace {
    kvroute_core::parse_trace(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn every_fixture_gives_the_in_process_table_through_the_protocol() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut paths: Vec<_> = std::fs::read_dir(root.join("fixtures"))
        .unwrap()
        .map(|e| e.unwrap().path().join("trace.json"))
        .filter(|p| p.exists())
        .collect();
    paths.push(root.join("peers/fixtures/positional_removed_abort/trace.json"));
    // A key an evict names first: placed by the request after it on both sides.
    paths.push(root.join("peers/fixtures/ray_evict_names_key_first/trace.json"));
    paths.sort();
    let mut differing = 0;
    for path in &paths {
        let trace = load(path);
        for (full_blocks_only, withhold_stale) in [(false, false), (true, false), (false, true)] {
            let options = Options {
                block_tokens: 16,
                full_blocks_only,
                withhold_stale,
                known_findings: true,
            };
            differing += same_both_ways(&trace, options, &path.display().to_string());
        }
    }
    assert!(paths.len() >= 15, "{paths:?}");
    // The fixtures differ from Dynamo in places (partial blocks, stale epochs, the
    // positional defect): the equality covers classified rows, not only agreeing ones.
    assert!(differing > 50, "{differing}");
}

#[test]
fn simulated_streams_give_the_in_process_table_through_the_protocol() {
    // The closed loop's streams (`simulate --events-out`): the requests of generated
    // chain traces on 8 workers, then the stores and evictions their prefills cause.
    let mut events = 0;
    for seed in 0..10 {
        let (sim, _) = simulation_trace(&trace_of(seed), Some(8)).unwrap();
        let compiled = Compiled::new(&sim);
        let run = simulate_policy(
            &compiled,
            Policy::CachePlusLoad,
            &SimulateOptions {
                // Small caches, so the stream evicts; jitter, so some events arrive stale.
                capacity: Capacity::Tokens(64),
                jitter_ticks: 5,
                jitter_seed: seed,
                ..SimulateOptions::default()
            },
            true,
            &mut (),
        );
        // As `simulate --events-out` writes it: canonical, so an eviction lists its keys
        // in byte order, as the protocol sends them (the positional indexer's abort at an
        // unknown block depends on that order).
        let stream = generated_trace(&sim, &run);
        let stream = kvroute_core::parse_trace(&canonical_trace_bytes(&stream)).unwrap();
        events += stream.events.len();
        for options in modes(true) {
            same_both_ways(&stream, options, &format!("the stream of seed {seed}"));
        }
    }
    assert!(events > 250, "{events}");
}

#[test]
fn generated_chain_traces_give_the_in_process_table_where_first_occurrences_agree() {
    let (mut checked, mut skipped, mut differing) = (0, 0, 0);
    for seed in 0..1000 {
        let trace = trace_of(seed);
        let compiled = Compiled::new(&trace);
        let streamed = ChainShape::streamed(&compiled, &vec![false; compiled.events.len()]);
        if !streamed.same_positions(&ChainShape::new(&compiled)) {
            skipped += 1;
            continue;
        }
        checked += 1;
        differing += same_both_ways(&trace, modes(true)[0], &format!("seed {seed}"));
    }
    // Enough seeds qualify for the check to mean something, and some of them differ.
    assert!(checked >= 10, "{checked} checked, {skipped} skipped");
    assert!(differing > 0);
}

#[test]
fn the_sweep_through_the_protocol_has_no_new_finding() {
    // A peer learns a key's position at its first occurrence (SPEC.md §15.2), so on the
    // generated traces, whose stores often come before the requests naming their keys,
    // the adapter's chains are not the in-process comparison's; the comparison then
    // counts those keys as forks, and every differing row still has a documented cause.
    let mut report = kvroute_peer_core::sweep::SweepReport::default();
    for seed in 0..60 {
        let trace = trace_of(seed);
        for options in modes(true) {
            for positional in [false, true] {
                let run = run_peer(
                    &trace,
                    &command(positional),
                    &RunOptions {
                        compare: options,
                        timeout: Duration::from_secs(20),
                        expect_version: None,
                        policy: Policy::CachePlusLoad,
                    },
                )
                .unwrap();
                report.add(seed, options, &run.report);
            }
        }
    }
    assert!(report.rows_differing > 100, "{}", report.summary());
    assert!(report.findings.is_empty(), "{}", report.summary());
}

#[test]
fn the_first_difference_is_shrunk_by_rerunning_the_peer() {
    // The regression fixture of the positional defect: through the protocol, the
    // positional adapter differs there (removed_abort) and the radix tree does not.
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/positional_removed_abort/trace.json");
    let trace = load(&path);
    let options = RunOptions {
        compare: Options {
            block_tokens: 16,
            ..Options::default()
        },
        timeout: Duration::from_secs(20),
        expect_version: None,
        policy: Policy::CachePlusLoad,
    };
    let run = run_peer(&trace, &command(true), &options).unwrap();
    let first = run
        .report
        .first
        .first()
        .expect("the fixture differs")
        .clone();
    let shrunk = kvroute_peer_core::run::shrunk_first_difference(
        &trace,
        &command(true),
        &options,
        &run,
        500,
    )
    .expect("a difference to shrink");
    // Still a valid trace that shows the same cause through the protocol, and no
    // larger than what it came from.
    let shrunk = kvroute_core::parse_trace(&canonical_trace_bytes(&shrunk)).unwrap();
    assert!(shrunk.events.len() <= trace.events.len());
    let again = run_peer(&shrunk, &command(true), &options).unwrap();
    assert!(
        again.report.tallies[0].count(first.cause) > 0,
        "{}",
        again.table()
    );
    let radix = run_peer(&trace, &command(false), &options).unwrap();
    assert!(radix.report.first.is_empty());
    assert!(kvroute_peer_core::run::shrunk_first_difference(
        &trace,
        &command(false),
        &options,
        &radix,
        500
    )
    .is_none());
}

#[test]
fn a_sweep_from_one_reset_process_gives_a_process_per_traces_figures() {
    // The adapter offers reset (SPEC.md §15.2, message 4): one process serves every
    // trace, and nothing of one trace reaches the next, so every figure equals the one
    // fresh processes give.
    use kvroute_peer_core::peer_sweep::{sweep_peer, Processes, SweepOptions};
    for positional in [false, true] {
        let swept = |processes| {
            sweep_peer(
                &command(positional),
                30,
                100,
                &SweepOptions {
                    timeout: Duration::from_secs(20),
                    expect_version: Some("1.6.1".into()),
                    policy: Policy::CachePlusLoad,
                    processes,
                },
            )
            .unwrap()
        };
        let (reset, fresh) = (
            swept(Processes::ResetWhenOffered),
            swept(Processes::OnePerTrace),
        );
        assert!(reset.hello.reset && reset.reset_used);
        assert_eq!((reset.processes, fresh.processes), (1, 60));
        assert!(!fresh.reset_used);
        assert!(reset.report.rows_differing > 0, "{}", reset.table());
        assert_eq!(
            reset.report.summary(),
            fresh.report.summary(),
            "positional={positional}"
        );
        assert_eq!(
            (reset.report.rows_compared, reset.report.rows_differing),
            (fresh.report.rows_compared, fresh.report.rows_differing)
        );
        assert_eq!(reset.report.by_cause, fresh.report.by_cause);
    }
}
