//! The simulate result as one canonical document (`kvroute-simulate/1`, SPEC.md §11.1):
//! the table's figures per policy plus the digest of each generated trace, so a second
//! implementation of the engine model can be compared byte for byte.

use crate::input::trace::Trace;
use crate::output::canonical::{canonical_trace_bytes, jcs_bytes, sha256_tag, trace_digest};
use crate::route::compiled::{Compiled, DecisionsRouted};
use crate::route::policy::Policy;
use crate::simulate::closed_loop::{
    generated_trace, simulate_policy, simulate_policy_with_completions, SimCompletion, SimRun,
};
use crate::simulate::options::{
    simulation_trace_named, Capacity, SimulateError, SimulateOptions, WorkerNames,
};
use serde_json::json;

/// The `format` of the document.
pub const SIMULATE_FORMAT: &str = "kvroute-simulate/1";

/// A whole simulation: the document and, per policy in receipt order, the canonical
/// bytes of the trace its loop generated (what `--events-out` writes, without `\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateResult {
    pub document: Vec<u8>,
    pub runs: Vec<SimRun>,
    pub generated_traces: Vec<(Policy, Vec<u8>)>,
    /// Each policy's routed requests as the engine model served them, in receipt
    /// order, when asked for (SPEC.md §14.4); else empty.
    pub completions: Vec<(Policy, Vec<SimCompletion>)>,
    /// The simulated trace's worker ids, in byte order: what a completion's worker
    /// index points into.
    pub worker_ids: Vec<String>,
    /// How many of the input's cache and load events were dropped (§11).
    pub dropped_events: usize,
}

/// Simulates every policy on `trace` (the input, before `--workers`) and builds the
/// §11.1 document, counting each routed decision into `decisions_routed` (one per
/// request and policy of the simulated trace), and keeping each run's completions when
/// `keep_completions`.
pub fn simulate_result(
    trace: &Trace,
    workers: Option<u32>,
    names: WorkerNames,
    options: &SimulateOptions,
    decisions_routed: &DecisionsRouted,
    keep_completions: bool,
) -> Result<SimulateResult, SimulateError> {
    let (sim_trace, dropped_events) = simulation_trace_named(trace, workers, names)?;
    let mut compiled = Compiled::new(&sim_trace);
    compiled.decisions_routed = decisions_routed.clone();
    let (runs, completions) = simulate_every_policy(&compiled, options, keep_completions);
    let generated_traces: Vec<(Policy, Vec<u8>)> = runs
        .iter()
        .map(|run| {
            let generated = generated_trace(&sim_trace, run);
            (run.policy, canonical_trace_bytes(&generated))
        })
        .collect();
    let (cache_tokens, cache_blocks) = match options.capacity {
        Capacity::Tokens(t) => (Some(t), None),
        Capacity::Blocks(b) => (None, Some(b)),
    };
    let run_values: Vec<_> = runs
        .iter()
        .zip(&generated_traces)
        .map(|(run, (_, bytes))| run_value(run, bytes))
        .collect();
    let document = jcs_bytes(&json!({
        "format": SIMULATE_FORMAT,
        "options": {
            "cache_blocks": cache_blocks,
            "cache_tokens": cache_tokens,
            "jitter_ticks": options.jitter_ticks,
            "lag_ticks": options.publication_lag_ticks,
            "loss_per_mille": options.loss_per_mille,
            "seed": options.jitter_seed,
            "workers": workers,
        },
        "trace_digest": trace_digest(&sim_trace),
        "runs": run_values,
    }));
    Ok(SimulateResult {
        document,
        runs,
        generated_traces,
        completions,
        worker_ids: compiled
            .worker_ids
            .iter()
            .map(|&id| id.to_owned())
            .collect(),
        dropped_events,
    })
}

/// Every standard policy's closed-loop run, and each one's completions when
/// `keep_completions` (otherwise none at all).
fn simulate_every_policy(
    compiled: &Compiled,
    options: &SimulateOptions,
    keep_completions: bool,
) -> (Vec<SimRun>, Vec<(Policy, Vec<SimCompletion>)>) {
    let (runs, completions): (Vec<SimRun>, Vec<(Policy, Vec<SimCompletion>)>) = Policy::STANDARD
        .iter()
        .map(|&policy| {
            let (run, served) = if keep_completions {
                simulate_policy_with_completions(compiled, policy, options, true, &mut ())
            } else {
                (
                    simulate_policy(compiled, policy, options, true, &mut ()),
                    Vec::new(),
                )
            };
            (run, (policy, served))
        })
        .unzip();
    let completions = if keep_completions {
        completions
    } else {
        Vec::new()
    };
    (runs, completions)
}

/// One run's entry in the document's `runs`: its table figures and the digest of its
/// generated trace's canonical `bytes`.
fn run_value(run: &SimRun, bytes: &[u8]) -> serde_json::Value {
    let m = &run.metrics;
    json!({
        "policy": run.policy.name(),
        "routed": m.routed,
        "hit_pm": m.hits_per_mille(),
        "reused": m.reused_tokens,
        "recomputed": m.recomputed_tokens,
        "skew_m": m.load_skew_milli,
        "lat_mean_m": m.latency_proxy_mean_milli,
        "lat_p95_m": m.latency_proxy_p95_milli,
        "stale": m.stale_event_rejections,
        "stores": run.stats.store_events,
        "evicts": run.stats.evict_events,
        "lost": run.stats.lost_events,
        "resyncs": run.stats.resyncs,
        "phantom": run.stats.phantom_reuse_tokens,
        "missed": run.stats.missed_reuse_tokens,
        "events_digest": sha256_tag(bytes),
    })
}
