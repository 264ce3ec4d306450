//! kvroute core: a deterministic replayer for KV-aware LLM request routing.
//!
//! A `kvroute-trace/1` document (workers, cache events, load observations, requests) is
//! validated into a [`Trace`], replayed under four policies (five when the trace sets
//! `policy.dynamo_block_tokens`: Dynamo's default selector, SPEC.md §4.8), and
//! explained in a [`Receipt`] whose canonical bytes and SHA-256 digest are the same on every run.
//! `SPEC.md` at the repository root is the behaviour this crate implements.
//!
//! # The API
//!
//! Other crates (the CLI, the peers, the benchmarks, the fuzz targets) use only what
//! this file declares public: the root items below ([`Trace`], [`parse_trace`],
//! [`read_trace`], [`read_trace_compact`], [`ReadTraceError`], [`ValidationErrors`],
//! [`Receipt`], [`Policy`], [`LAB_TRACE_JSON`], [`replay_bytes`]) and seven façade
//! modules, one per part of SPEC.md, each re-exporting its items from the files
//! beneath it (every module below a façade is private to this crate):
//! - [`input`]: the trace as types, the limits, the compact event store, and the
//!   receipt reader (`read_receipt`, `ReceiptSink`, the receipt's layout);
//! - [`route`]: the compiled trace, a run (whole, or stepped by a `Runner`), the router
//!   state and the reuse walk, the tenant rule, metrics, and the records and sinks a
//!   run produces;
//! - [`output`]: canonical bytes and digests, the receipt as a value, CSV, request-id
//!   keying, the summary table and JSON string quoting;
//! - [`import`]: the `Importer` trait and every format's importer with its options;
//! - [`replay`]: which runs, into which output (receipt, JSON Lines, CSV, metrics);
//! - [`simulate`]: the closed loop, its options, results and completions;
//! - [`join`]: a receipt's run against completion records, its figures and writers.
//!
//! An item is named by its façade and its own name, never by the file it lives in
//! (`kvroute_core::route::Compiled`, not `route::compiled::Compiled`); the layering
//! test (`core/tests/layout.rs`) fails any file of `cli/`, `peers/`, `bench/` or
//! `fuzz/` that names a path below a façade, or the hidden `harness` module that the
//! test crates use. `docs/core-api.md` lists the items and the rule for adding one.
//!
//! # Inside
//!
//! The folders follow SPEC.md's parts and depend one way only: [`input`] ← [`route`] ←
//! [`output`] ← [`import`] ← [`replay`] ← [`simulate`] ← [`join`] (`core/tests/layout.rs`
//! checks it). Where each rule lives:
//! - **limits** (profiles, integer literals, the per-request token limit, the overflow
//!   bound, the error-line cap): `input::limits`; value, shape and cross-reference
//!   rules: `input::validate`, one file a stage;
//! - the **epoch rule** (when an event or a mutation is news): `input::epoch`; the
//!   **stale rules** that apply it (`worker_epoch`, `key_epoch` with tombstones and the
//!   clear floor, `arrival_order`) and **evidence gaps** of sequential epochs:
//!   `route::state` (`RouterState::apply_cache_event`, `WorkerState::receive_epoch`);
//! - the **tenant rule** (whose prefix may be reused, boundary reasons):
//!   `route::tenant`; how far reuse reaches: `route::cache::reuse`;
//! - **freshness**, eligibility, work and after-placement figures:
//!   `route::candidate`; dominance: `route::candidate::dominance`; the reasons
//!   rows list: `route::reason`;
//! - the **policy rule** (cost score, ties, margins, the overload cap and the cold
//!   reserve, route kind, which runs a trace has):
//!   `route::policy`; the Dynamo cost of `dynamo_default`: `route::candidate`; one
//!   run's loop: `route::engine`; which runs, each from a clean state, into which
//!   output: [`replay`];
//! - **canonical bytes and digests**: `output::canonical` (integers, string escapes
//!   and digest tags: `output::json_text`); the receipt:
//!   `output::receipt`, its bytes written by type in `output::typed`; JSON Lines:
//!   `output::jsonl`; CSV: `output::csv` (each run into them by [`replay`]);
//! - **importing** other formats (Mooncake, vLLM and SGLang KV events, Dynamo's
//!   RouterEvent lines), each behind the one `import::importer::Importer` trait:
//!   [`import`];
//! - the **closed-loop engine model** (LRU, prefill, publication lag, jitter and loss,
//!   re-query, residency error):
//!   [`simulate`];
//! - the **join** of a receipt's run with measured completion records (counts,
//!   prediction figures, goodput): [`join`], the last layer.

#[cfg(test)]
mod fixed_sequence;
pub mod import;
pub mod input;
pub mod join;
pub(crate) mod mutant;
pub mod output;
pub mod replay;
pub mod route;
pub mod simulate;

pub use input::trace::Trace;
pub use input::validate::{
    parse_trace, read_trace, read_trace_compact, ReadTraceError, ValidationErrors,
};
pub use output::receipt::Receipt;
pub use route::policy::Policy;

/// What only the test harness needs (the `kvroute-tests` and `kvroute-mutants` crates
/// and core's own integration tests): work counters, the planted-bug switch, the
/// whole-run collector and the pieces a differential test compares one by one. Not
/// part of the API: hidden from the documentation, and the layering test
/// (`core/tests/layout.rs`) fails any file of `cli/`, `peers/`, `bench/` or `fuzz/`
/// that names it. A module rather than a cargo feature because features unify across
/// a workspace build: with one, `cargo build` at the root would give the shipped
/// binary the harness's view.
#[doc(hidden)]
pub mod harness {
    pub use crate::import::mooncake::{check_mooncake, import_mooncake_each};
    pub use crate::mutant::{parse_selection, Mutant, SELECTOR_ENV};
    pub use crate::route::cache::reuse::reuse_walk_rows;
    pub use crate::route::cache::work::{reset_dominance_operations, reset_entry_operations};
    pub use crate::route::candidate::Rows;
    pub use crate::simulate::publication::is_lost;
}

/// The built-in lab trace, replayed when the CLI is given no trace.
pub const LAB_TRACE_JSON: &str = include_str!("../../fixtures/lab/trace.json");

/// Validates and replays trace bytes: the canonical receipt bytes (no trailing newline)
/// or the validation errors. The same contract as the oracle's `replay`.
pub fn replay_bytes(trace_json: &[u8]) -> Result<Vec<u8>, ValidationErrors> {
    let trace = parse_trace(trace_json)?;
    let compiled = route::compiled::Compiled::new(&trace);
    Ok(replay::receipt_bytes(
        &compiled,
        &output::canonical::trace_digest(&trace),
    ))
}
