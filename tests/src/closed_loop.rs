//! Checks of the closed-loop engine model (SPEC.md §11), shared by the integration
//! tests and the `closed_loop` fuzz target: a policy's generated trace must validate and
//! replay open-loop to exactly the run the loop made.

use kvroute_core::import::{import_mooncake, MooncakeOptions};
use kvroute_core::output::canonical_trace_bytes;
use kvroute_core::replay;
use kvroute_core::route::CollectSink;
use kvroute_core::route::Compiled;
use kvroute_core::simulate::{generated_trace, simulate_policy, SimRun, SimulateOptions};
use kvroute_core::{parse_trace, Policy, Trace};
use std::io::BufRead;
use std::path::PathBuf;

/// The real Mooncake conversation trace: `$KVROUTE_MOONCAKE` if set, else
/// `../shared/traces/mooncake-conversation.jsonl` beside the checkout.
pub fn mooncake_path() -> PathBuf {
    match std::env::var_os("KVROUTE_MOONCAKE") {
        Some(path) => PathBuf::from(path),
        None => crate::fixtures::root().join("../../shared/traces/mooncake-conversation.jsonl"),
    }
}

/// The first `requests` lines of the Mooncake conversation trace, imported with
/// `workers` workers.
pub fn mooncake_head(requests: usize, workers: u32) -> Trace {
    let path = mooncake_path();
    let file = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CI clones ../shared beside main)", path.display()));
    let head: Vec<u8> = std::io::BufReader::new(file)
        .lines()
        .take(requests)
        .flat_map(|l| (l.expect("the trace is UTF-8 text") + "\n").into_bytes())
        .collect();
    let options = MooncakeOptions {
        workers,
        ..MooncakeOptions::default()
    };
    import_mooncake(head.as_slice(), &options).unwrap_or_else(|e| panic!("import: {e:?}"))
}

/// One policy's loop and the canonical bytes of the trace it generated.
pub struct Reproduced {
    pub run: SimRun,
    pub trace_bytes: Vec<u8>,
}

/// Runs every policy's loop on `sim` (a request-only trace) and checks that each
/// generated trace, written out and validated, replays open-loop to the loop's own
/// decisions, candidate rows, logs and metrics. Returns the loops and their traces.
pub fn check_reproduction(sim: &Trace, options: &SimulateOptions, what: &str) -> Vec<Reproduced> {
    let compiled = Compiled::new(sim);
    let mut runs = Vec::new();
    for &policy in &Policy::STANDARD {
        let mut sink = CollectSink::default();
        let run = simulate_policy(&compiled, policy, options, true, &mut sink);
        let trace_bytes = canonical_trace_bytes(&generated_trace(sim, &run));
        let reparsed = parse_trace(&trace_bytes)
            .unwrap_or_else(|e| panic!("{what}: {}: generated trace invalid: {e}", policy.name()));
        let open_loop = replay::receipt(&reparsed);
        let replayed = open_loop
            .runs
            .iter()
            .find(|r| r.policy == policy)
            .expect("every policy runs");
        let closed = (&sink.decisions, &sink.cache_log, &sink.observation_log);
        let open = (
            &replayed.decisions,
            &replayed.cache_log,
            &replayed.observation_log,
        );
        assert!(
            closed == open,
            "{what}: {}: open-loop replay differs from the closed loop",
            policy.name()
        );
        assert_eq!(run.metrics, replayed.metrics, "{what}: {}", policy.name());
        runs.push(Reproduced { run, trace_bytes });
    }
    runs
}
