//! Streaming receipts (SPEC.md §6.4): JSON Lines written while the runs replay, so a
//! ten-million-request trace never holds its candidate rows in memory.
//!
//! The JSON Lines stream carries exactly the members of the in-memory receipt, one
//! record a line, in the order the canonical receipt lists them: per run its cache log,
//! its decisions, its metrics, then its observation log. That order is what lets the
//! receipt digest be computed incrementally: the SHA-256 is fed the canonical receipt's
//! bytes piece by piece (each record's canonical bytes plus the punctuation between
//! them), so the stream ends with the same `receipt_digest` the in-memory receipt has.
//! The cache log sorts before the decisions, so each run is replayed in three passes:
//! cache events alone (the epoch rule never looks at requests), the full run, and load
//! observations alone. Memory stays O(live cache entries + workers).

use crate::output::canonical::{digest_tag, jcs_bytes};
use crate::output::receipt::{
    cache_entry_value, decision_value, metrics_value, observation_entry_value, RECEIPT_FORMAT,
};
use crate::route::compiled::{Compiled, Step};
use crate::route::engine::{run_with_sink, DecisionRef, RunSink, Runner};
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;
use crate::route::record::{CacheLogEntry, ObservationLogEntry};
use crate::route::state::RouterState;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{self, Write};

/// The `format` of a JSON Lines receipt's first record.
pub const STREAM_FORMAT: &str = "kvroute-receipt-stream/1";

/// What a streamed replay ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSummary {
    /// Equal to the in-memory receipt's `receipt_digest`.
    pub receipt_digest: String,
    /// Each run's metrics, in receipt order.
    pub runs: Vec<(Policy, Metrics)>,
}

/// Writes lines and feeds the digest; keeps the first write error, since sink methods
/// cannot return one, and writes nothing after it.
struct Lines<'w, W: Write + ?Sized> {
    out: &'w mut W,
    hasher: Sha256,
    error: Option<io::Error>,
    /// Whether the next array element needs a comma before it in the digest's bytes.
    separate: bool,
}

impl<W: Write + ?Sized> Lines<'_, W> {
    fn hash(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn line(&mut self, record: &Value) {
        if self.error.is_none() {
            let mut bytes = jcs_bytes(record);
            bytes.push(b'\n');
            if let Err(e) = self.out.write_all(&bytes) {
                self.error = Some(e);
            }
        }
    }

    /// One element of a receipt array: hashed in place, written as its own record.
    fn element(&mut self, policy: Policy, member: &str, value: &Value) {
        if std::mem::replace(&mut self.separate, true) {
            self.hash(b",");
        }
        let bytes = jcs_bytes(value);
        self.hash(&bytes);
        self.record(policy, member, &bytes);
    }

    /// The line `{"<member>":<bytes>,"policy":"<policy>"}`, built from the member's
    /// canonical bytes rather than by serialising them a second time. It is canonical:
    /// every member name sorts before `policy`, and JCS writes a nested value exactly
    /// as it writes that value alone.
    fn record(&mut self, policy: Policy, member: &str, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let mut line = Vec::with_capacity(bytes.len() + member.len() + 40);
        line.extend_from_slice(b"{\"");
        line.extend_from_slice(member.as_bytes());
        line.extend_from_slice(b"\":");
        line.extend_from_slice(bytes);
        line.extend_from_slice(b",\"policy\":");
        line.extend_from_slice(&jcs_bytes(&json!(policy.name())));
        line.extend_from_slice(b"}\n");
        if let Err(e) = self.out.write_all(&line) {
            self.error = Some(e);
        }
    }

    fn open_array(&mut self, bytes: &[u8]) {
        self.hash(bytes);
        self.separate = false;
    }
}

/// Which receipt array a pass writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    CacheLog,
    Decisions,
    ObservationLog,
}

/// The sink of one pass: it writes the elements of one member and ignores the rest.
struct PassSink<'l, 'w, 'i, W: Write + ?Sized> {
    lines: &'l mut Lines<'w, W>,
    ids: &'i [&'i str],
    policy: Policy,
    member: Member,
}

impl<W: Write + ?Sized> RunSink for PassSink<'_, '_, '_, W> {
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        if self.member == Member::CacheLog {
            let value = cache_entry_value(self.ids, entry);
            self.lines.element(self.policy, "cache_log", &value);
        }
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        if self.member == Member::ObservationLog {
            let value = observation_entry_value(self.ids, entry);
            self.lines.element(self.policy, "observation_log", &value);
        }
    }
    fn decided(&mut self, decision: &DecisionRef) {
        if self.member == Member::Decisions {
            let value = decision_value(self.ids, &decision.to_decision());
            self.lines.element(self.policy, "decisions", &value);
        }
    }
}

/// Replays every policy and writes the receipt as JSON Lines to `out`.
pub fn write_jsonl<W: Write + ?Sized>(
    compiled: &Compiled,
    trace_digest: &str,
    out: &mut W,
) -> io::Result<StreamSummary> {
    let ids = &compiled.worker_ids;
    let mut lines = Lines {
        out,
        hasher: Sha256::new(),
        error: None,
        separate: false,
    };
    lines.line(&json!({
        "format": STREAM_FORMAT,
        "receipt_format": RECEIPT_FORMAT,
        "trace_digest": trace_digest,
    }));
    lines.hash(br#"{"format":"#);
    lines.hash(&jcs_bytes(&json!(RECEIPT_FORMAT)));
    lines.hash(br#","runs":["#);
    let mut runs = Vec::new();
    for (i, &policy) in Policy::ALL.iter().enumerate() {
        if i > 0 {
            lines.hash(b",");
        }
        lines.open_array(br#"{"cache_log":["#);
        log_pass(compiled, policy, &mut lines, Member::CacheLog);
        lines.open_array(br#"],"decisions":["#);
        let mut sink = PassSink {
            lines: &mut lines,
            ids,
            policy,
            member: Member::Decisions,
        };
        let (metrics, _) =
            run_with_sink(compiled, policy, RouterState::initial(compiled), &mut sink);
        let metrics_bytes = jcs_bytes(&metrics_value(&metrics));
        lines.hash(br#"],"metrics":"#);
        lines.hash(&metrics_bytes);
        lines.record(policy, "metrics", &metrics_bytes);
        lines.open_array(br#","observation_log":["#);
        log_pass(compiled, policy, &mut lines, Member::ObservationLog);
        lines.hash(br#"],"policy":"#);
        lines.hash(&jcs_bytes(&json!(policy.name())));
        lines.hash(b"}");
        runs.push((policy, metrics));
    }
    lines.hash(br#"],"trace_digest":"#);
    lines.hash(&jcs_bytes(&json!(trace_digest)));
    lines.hash(b"}");
    let digest = std::mem::take(&mut lines.hasher).finalize();
    let receipt_digest = digest_tag(&digest);
    lines.line(&json!({ "receipt_digest": receipt_digest }));
    if let Some(e) = lines.error {
        return Err(e);
    }
    lines.out.flush()?;
    Ok(StreamSummary {
        receipt_digest,
        runs,
    })
}

/// Replays only the events behind one log, writing its records. Cache and load
/// outcomes never depend on routing, so this gives the full run's log.
fn log_pass<W: Write + ?Sized>(
    compiled: &Compiled,
    policy: Policy,
    lines: &mut Lines<'_, W>,
    member: Member,
) {
    let mut sink = PassSink {
        lines,
        ids: &compiled.worker_ids,
        policy,
        member,
    };
    let keep = |step: &Step| match member {
        Member::CacheLog => matches!(step, Step::Cache { .. }),
        Member::ObservationLog => matches!(step, Step::Load { .. }),
        Member::Decisions => false,
    };
    let mut runner = Runner::new(compiled, policy);
    for event in compiled.events.iter().filter(|e| keep(&e.step)) {
        runner.step(event, &mut sink);
    }
}
