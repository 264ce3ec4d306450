//! kvroute-oracle: a deliberately naive second implementation of SPEC.md, written from
//! the specification alone. The project compares its receipt bytes with those of
//! kvroute-core byte for byte; any difference points at a bug in one of the two or at
//! an unclear sentence in SPEC.md.
//!
//! Modules: `json` (a JSON tree that keeps repeated members), `model` (the typed
//! trace), `validate` (the five validation stages of §2, the overflow bound in
//! saturating 128-bit arithmetic), `canonical` (canonical trace bytes, digests),
//! `replay` (state, candidates, the four policies and the opt-in
//! `dynamo_default` of §4.8, metrics), `receipt` (receipt JSON) and
//! `simulate` (the closed-loop engine model of §11). [`StaleRule`] and [`EpochNumbering`]
//! name the `policy.stale_rule` and `policy.epochs` choices, for `SimOptions`' overrides.

mod canonical;
mod json;
mod model;
mod receipt;
mod replay;
pub mod simulate;
mod validate;

#[cfg(test)]
mod tests;

pub use model::{EpochNumbering, StaleRule};
pub use simulate::{simulate, SimCache, SimOptions, SimOutcome};

/// Canonical trace bytes of an already validated trace; an error line on the
/// (never expected) failure of canonicalization.
fn canonical_trace_bytes(trace: &model::Trace) -> Result<Vec<u8>, Vec<String>> {
    canonical::canonical_trace_bytes(trace)
        .map_err(|message| vec![format!("$: internal error: {message}")])
}

/// Validates and replays a trace (raw JSON bytes). Ok: the canonical receipt bytes
/// (RFC 8785 JCS of the full receipt INCLUDING its "receipt_digest" member; no trailing newline).
/// Err: the validation error lines, each "PATH: reason", exactly as SPEC.md §2 describes
/// (all stages, ordering, at most 100 lines plus the "... and N more errors" line).
pub fn replay(trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>> {
    let trace = validate::check(trace_json)?;
    let trace_digest = canonical::digest(&canonical_trace_bytes(&trace)?);
    let runs = replay::replay_all(&trace);
    receipt::receipt_bytes(&trace_digest, &runs)
        .map_err(|message| vec![format!("$: internal error: {message}")])
}

/// Only validation; Ok(canonical trace bytes, i.e. the JCS bytes whose SHA-256 is trace_digest).
pub fn validate(trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>> {
    let trace = validate::check(trace_json)?;
    canonical_trace_bytes(&trace)
}

/// A trace that passed validation, so that replaying can be timed apart from parsing.
pub struct Validated(model::Trace);

/// Only validation, keeping the typed trace for [`replay_metrics`].
pub fn validated(trace_json: &[u8]) -> Result<Validated, Vec<String>> {
    validate::check(trace_json).map(Validated)
}

/// Replays every policy exactly as [`replay`] does (every candidate row and log entry is
/// built) but writes no receipt: the canonical bytes of
/// `[{"metrics": …, "policy": …}, …]` in receipt order. Benchmarks use it to time the
/// naive routing alone, and tests to check runs that keep no receipt.
pub fn replay_metrics(trace: &Validated) -> Result<Vec<u8>, Vec<String>> {
    let runs = replay::replay_all(&trace.0);
    receipt::metrics_bytes(&runs).map_err(|message| vec![format!("$: internal error: {message}")])
}
