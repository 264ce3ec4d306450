//! The engine model's parameters (SPEC.md §11, defaults and reasons included) and the
//! trace a simulation runs on.

use crate::input::limits::LimitsProfile;
use crate::input::trace::{fleet_worker_id, EventKind, Trace, WorkerSpec};

/// How a worker's KV cache capacity is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// Resident tokens, summed over blocks (a partial block counts its tokens).
    Tokens(u64),
    /// Resident blocks, whatever their size.
    Blocks(u64),
}

/// The engine model's parameters. Defaults are documented in SPEC.md §11.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateOptions {
    pub capacity: Capacity,
    /// Ticks between a prefill completing and its cache events reaching the router.
    pub publication_lag_ticks: u64,
    /// Up to this many extra ticks per event, drawn from `jitter_seed`; 0 disables it.
    pub jitter_ticks: u64,
    /// The seed of the jitter and of the loss.
    pub jitter_seed: u64,
    /// Per mille of the events completions publish that the bus loses (SPEC.md §11).
    pub loss_per_mille: u64,
}

/// The largest `--loss`: every event lost.
pub const LOSS_PER_MILLE_MAX: u64 = 1000;

/// 262,144 tokens: 512 blocks of 512 tokens, about 40 GiB of KV cache at 160 KiB per
/// token (a 70B-class model with grouped-query attention in 16-bit).
pub const DEFAULT_CACHE_TOKENS: u64 = 262_144;
/// 10 ticks (10 ms at the import's 1 tick = 1 ms): an event bus hop plus batching.
pub const DEFAULT_PUBLICATION_LAG_TICKS: u64 = 10;

impl Default for SimulateOptions {
    fn default() -> Self {
        SimulateOptions {
            capacity: Capacity::Tokens(DEFAULT_CACHE_TOKENS),
            publication_lag_ticks: DEFAULT_PUBLICATION_LAG_TICKS,
            jitter_ticks: 0,
            jitter_seed: 0,
            loss_per_mille: 0,
        }
    }
}

/// Why a trace cannot be simulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulateError(pub String);

impl std::fmt::Display for SimulateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How `--workers N` names its copies (`--worker-names`, SPEC.md §14.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WorkerNames {
    /// `w0` … zero-padded (§10.1).
    #[default]
    W,
    /// `dynamo|0|dp0` …, as §13.7 names Dynamo's workers, so Dynamo records can name
    /// them.
    Dynamo,
}

impl WorkerNames {
    /// The id of copy `index` of `workers`.
    fn id(self, index: u32, workers: u32) -> String {
        match self {
            WorkerNames::W => fleet_worker_id(index, workers),
            WorkerNames::Dynamo => format!("dynamo|{index}|dp0"),
        }
    }
}

/// The trace a simulation runs on: the input's requests, and either its workers or
/// `workers` identical copies of its first worker (ids `w0`…, zero-padded), each with
/// an empty cache and no load. The input's own cache and load events are dropped (the
/// engine model generates them); the count dropped is returned.
pub fn simulation_trace(
    trace: &Trace,
    workers: Option<u32>,
) -> Result<(Trace, usize), SimulateError> {
    simulation_trace_named(trace, workers, WorkerNames::W)
}

/// [`simulation_trace`] with the copies named by `names`, listed in id byte order.
pub fn simulation_trace_named(
    trace: &Trace,
    workers: Option<u32>,
    names: WorkerNames,
) -> Result<(Trace, usize), SimulateError> {
    let mut sim = trace.clone();
    sim.limits = LimitsProfile::Scale;
    let before = sim.events.len();
    sim.events
        .retain(|e| matches!(e.kind, EventKind::Request(_)));
    let dropped = before - sim.events.len();
    if let Some(count) = workers {
        if count == 0 || count as u64 > LimitsProfile::Scale.workers_max() {
            return Err(SimulateError(format!(
                "--workers {count}: expected 1 to {}",
                LimitsProfile::Scale.workers_max()
            )));
        }
        let mut first: WorkerSpec = trace
            .workers
            .iter()
            .min_by(|a, b| a.id.cmp(&b.id))
            .cloned()
            .ok_or_else(|| SimulateError("the trace has no workers to copy".into()))?;
        first.queued_prefill = 0;
        first.active_decode = 0;
        first.cache.clear();
        sim.workers = (0..count)
            .map(|i| WorkerSpec {
                id: names.id(i, count).into(),
                ..first.clone()
            })
            .collect();
        sim.workers.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok((sim, dropped))
}

/// The first worker, in id byte order, of the trace a simulation runs on
/// ([`simulation_trace_named`]) whose id a Dynamo record cannot name, for
/// `--completions-format dynamo` (SPEC.md §14.4.1), without building that trace.
pub fn first_worker_not_dynamo_named(
    trace: &Trace,
    workers: Option<u32>,
    names: WorkerNames,
) -> Option<String> {
    let named = |id: &str| dynamo_worker_numbers(id).is_some();
    match workers {
        Some(count) => {
            let first = (0..count).map(|i| names.id(i, count)).min()?;
            (!named(&first)).then_some(first)
        }
        None => trace
            .workers
            .iter()
            .map(|w| &*w.id)
            .filter(|id| !named(id))
            .min()
            .map(str::to_owned),
    }
}

/// The numbers of a worker named `dynamo|<I>|dp<R>` (SPEC.md §13.7, §14.4.1): `I` from
/// 0 to 2^64 - 1 and `R` from 0 to 2^32 - 1, decimal without a leading zero.
pub fn dynamo_worker_numbers(id: &str) -> Option<(u64, u32)> {
    let rest = id.strip_prefix("dynamo|")?;
    let (worker, rank) = rest.split_once("|dp")?;
    Some((plain_decimal(worker)?, plain_decimal(rank)?))
}

/// A decimal without a sign or a leading zero (`0` itself is `0`), within `T`.
fn plain_decimal<T: std::str::FromStr>(text: &str) -> Option<T> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = crate::simulate::engine_model::tests::TRACE;

    #[test]
    fn replacing_workers_is_bounded_by_the_scale_profile() {
        let trace = crate::parse_trace(TRACE.as_bytes()).unwrap();
        assert_eq!(
            simulation_trace(&trace, Some(4096))
                .unwrap()
                .0
                .workers
                .len(),
            4096
        );
        for count in [0, 4097] {
            let error = simulation_trace(&trace, Some(count)).unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("--workers {count}: expected 1 to 4096")
            );
        }
    }
}
