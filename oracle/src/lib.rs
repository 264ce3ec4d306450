//! kvroute-oracle: a deliberately naive second implementation of SPEC.md, written from
//! the specification and the RFCs it cites alone. The project compares its receipt
//! bytes with those of kvroute-core byte for byte; any difference points at a bug in
//! one of the two or at an unclear sentence in SPEC.md.
//!
//! Modules by SPEC part: `json` (an RFC 8259 reader that keeps repeated members and
//! number literals as written, with the syntax error lines of §2), `model` (the typed
//! trace of §1), `validate` (the five stages of §2), `canonical` (the canonical trace
//! of §6.1), `jcs` (the RFC 8785 writer and digests), `state` (§3), `candidates` (§4),
//! `policies` (§5), `run` (one policy's run and its metrics, §3.5, §6.2), `receipt`
//! (§6, streamed), `simulate` (§11, and the completion records of §14.4 in AIPerf's and Dynamo's layouts), `keyed` (the keyed request ids of §6.5, HMAC from
//! RFC 2104) and `join` (completion records against a receipt's run, §14: AIPerf, Dynamo and
//! `vllm bench serve` layouts, their detection, cohorts with `--trace`, and the text of
//! `--slo` read into objectives in microseconds).
//! Below them sit `paths` (the number bound and error-line paths of §1.1, §2.1 and §2.2,
//! shared by `validate` and `limits`) and `policy_kind` (the policies by name, shared by
//! `candidates` and `policies`).

mod candidates;
mod canonical;
mod jcs;
mod join;
mod json;
mod keyed;
mod limits;
mod model;
mod paths;
mod policies;
mod policy_kind;
mod receipt;
mod run;
pub mod simulate;
mod state;
mod validate;

use std::ops::ControlFlow;

pub use join::{gate_lines, join, join_inputs, parse_slo, JoinFailure, JoinInputs, Slo};
pub use model::{EpochNumbering, StaleRule};
pub use simulate::{
    simulate, simulate_completions, simulate_with_completions, CompletionRecord, SimCache,
    SimCompletions, SimLayout, SimOptions, SimOutcome, SimWorkerNames,
};

/// One piece of the canonical receipt without its `receipt_digest` member, in byte order:
/// concatenating every piece's bytes gives exactly those canonical bytes (SPEC §6.1, §6.4).
pub enum ReceiptPiece<'a> {
    /// Bytes between elements, e.g. `{"format":"kvroute-receipt/1","runs":[{"cache_log":[`, `,`, `],"decisions":[`.
    Structure(&'a [u8]),
    /// One element: a run's cache_log entry, decision, metrics object or observation_log entry.
    /// `path` is its JSON path as SPEC §2.1 writes paths, rooted at the receipt (`runs[2].decisions[17]`, `runs[0].metrics`, `runs[1].cache_log[3]`).
    Element { path: &'a str, bytes: &'a [u8] },
}

/// How [`replay_streaming`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Streamed {
    /// Every piece was handed out; the digest of their concatenation (SPEC §6.1).
    Complete { receipt_digest: String },
    /// The sink asked to stop.
    Stopped,
}

/// Canonical trace bytes of a validated trace; an error line on the (never expected)
/// failure of canonicalization.
fn canonical_trace_bytes(trace: &model::Trace) -> Result<Vec<u8>, Vec<String>> {
    canonical::canonical_trace_bytes(trace)
        .map_err(|message| vec![format!("$: internal error: {message}")])
}

/// Validates and replays, handing each piece to `sink` as it is produced; `sink` returns
/// ControlFlow::Break(()) to stop early (then Ok(Streamed::Stopped)). Err: the validation error lines.
pub fn replay_streaming(
    trace_json: &[u8],
    sink: &mut dyn FnMut(ReceiptPiece<'_>) -> ControlFlow<()>,
) -> Result<Streamed, Vec<String>> {
    let trace = validate::check(trace_json)?;
    let trace_digest = jcs::digest(&canonical_trace_bytes(&trace)?);
    Ok(receipt::stream(&trace, &trace_digest, sink))
}

/// Validates and replays a trace (raw JSON bytes). Ok: the canonical receipt bytes
/// (RFC 8785 JCS of the full receipt INCLUDING its "receipt_digest" member; no trailing newline).
/// Err: the validation error lines, each "PATH: reason", exactly as SPEC.md §2 describes
/// (all stages, ordering, at most 100 lines plus the "... and N more errors" line).
pub fn replay(trace_json: &[u8]) -> Result<Vec<u8>, Vec<String>> {
    let mut receipt = Vec::new();
    let streamed = replay_streaming(trace_json, &mut |piece| {
        match piece {
            ReceiptPiece::Structure(bytes) | ReceiptPiece::Element { bytes, .. } => {
                receipt.extend_from_slice(bytes)
            }
        }
        ControlFlow::Continue(())
    })?;
    let Streamed::Complete { receipt_digest } = streamed else {
        return Err(vec![
            "$: internal error: the receipt stopped early".to_owned()
        ]);
    };
    // `receipt_digest` sorts right after `format`, the receipt's first member.
    let mut member = b"\"receipt_digest\":".to_vec();
    jcs::write_string(&receipt_digest, &mut member);
    member.push(b',');
    let mut format = b"{\"format\":".to_vec();
    jcs::write_string(receipt::FORMAT, &mut format);
    format.push(b',');
    if !receipt.starts_with(&format) {
        return Err(vec![
            "$: internal error: the receipt does not start with its format".to_owned(),
        ]);
    }
    receipt.splice(format.len()..format.len(), member);
    Ok(receipt)
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

/// Replays every policy exactly as [`replay`] does (every candidate row is built) but
/// writes no receipt: the canonical bytes of `[{"metrics": …, "policy": …}, …]` in
/// receipt order. Benchmarks use it to time the routing alone.
pub fn replay_metrics(trace: &Validated) -> Result<Vec<u8>, Vec<String>> {
    Ok(receipt::metrics_bytes(&trace.0))
}

/// SPEC §6.5: the keyed form of a request id under the key file's bytes (the first 16
/// bytes of HMAC-SHA-256, as 32 lowercase hex digits).
pub fn keyed_request_id(key: &[u8], id: &str) -> String {
    keyed::keyed_id(key, id)
}
