//! The closed-loop engine model (SPEC.md §11): where cache events come from when a
//! trace carries only requests.
//!
//! The router never invents residency, so replaying a bare request stream would route
//! every request cold. `simulate` closes the loop: each policy's run routes a request,
//! and a deterministic model of the chosen engine prefills it (FIFO, at the worker's
//! `prefill_rate`), stores its prefix blocks in a per-worker LRU cache of fixed capacity
//! when the prefill completes, evicts the least recently used blocks to make room, and
//! publishes the `store` and `evict` events, each with the next epoch of that worker,
//! after a publication lag plus an optional seeded jitter. Jitter can deliver a later
//! epoch first, so the router sees stale events exactly as it would from a real fleet;
//! `--loss` drops a seeded fraction of them on the bus. With sequential epochs a gap the
//! router detects is answered by the worker's whole cache (a clear and stores), Dynamo's
//! re-query as SPEC.md §11 models it. Each decision's residency error against the
//! engine's truth is summed as `phantom` (believed, not held) and `missed` (held, not
//! believed).
//!
//! Every policy runs its own loop from a clean state. The events a loop generated,
//! merged with the requests, form an ordinary `kvroute-trace/1` trace; replaying it
//! open-loop reproduces that policy's run exactly, because generated events are given
//! seqs above every request's and ticks never in the past, so `(tick, seq)` order
//! places them where the loop processed them.
//! The folder's files, one job each:
//! - [`options`]: the model's parameters and the trace a simulation runs on;
//! - [`lru`]: one worker's true cache, an LRU over `(namespace, key)` entries;
//! - [`engine_model`]: every worker's engine — what it really reuses, FIFO prefill,
//!   and what a completed prefill stores and evicts;
//! - [`publication`]: when a published event reaches the router (lag and jitter) and
//!   whether it does (loss);
//! - [`closed_loop`]: the scheduler that interleaves routing, completions and
//!   deliveries in one policy's run;
//! - [`trace_out`]: the generated events in the trace's own terms, for `--events-out`;
//! - [`completions`]: each routed request's AIPerf record, for `--completions-out`;
//! - [`table`]: the comparison `kvroute simulate` prints; [`result`]: the same as the
//!   canonical `kvroute-simulate/1` document of SPEC.md §11.1.

pub(crate) mod closed_loop;
pub(crate) mod completions;
pub(crate) mod engine_model;
pub(crate) mod lru;
pub(crate) mod options;
pub(crate) mod publication;
pub(crate) mod result;
pub(crate) mod table;
pub(crate) mod trace_out;

pub use closed_loop::{
    generated_trace, simulate_policy, simulate_policy_with_completions, EngineStats, SimCompletion,
    SimRun,
};
pub use completions::{completion_lines, completions_file, CompletionsLayout, TICKS_PER_MS_MAX};
pub use options::{
    dynamo_worker_numbers, first_worker_not_dynamo_named, simulation_trace, simulation_trace_named,
    Capacity, SimulateError, SimulateOptions, WorkerNames, DEFAULT_CACHE_TOKENS,
    DEFAULT_PUBLICATION_LAG_TICKS, LOSS_PER_MILLE_MAX,
};
pub use result::{simulate_result, SimulateResult, SIMULATE_FORMAT};
pub use table::simulate_table;
pub use trace_out::to_trace_event;
