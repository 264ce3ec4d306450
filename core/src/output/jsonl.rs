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
//! observations alone. Memory stays O(live cache entries + workers). The bytes of each
//! record come from the typed writer ([`crate::output::typed`]); the replay driver
//! (`crate::replay::write_jsonl`) runs the passes.

use crate::output::canonical::digest_tag;
use crate::output::json_text::push_str;
use crate::output::typed::{self, RunsOut, RECEIPT_FORMAT};
use crate::route::metrics::Metrics;
use crate::route::policy::Policy;
use crate::route::record::Member;
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

/// Writes lines and feeds the digest: the [`RunsOut`] the streamed `runs` array goes to.
/// Keeps the first write error, since a sink cannot return one mid-run, and writes
/// nothing after it.
pub struct Lines<'w, W: Write + ?Sized> {
    out: &'w mut W,
    hasher: Sha256,
    error: Option<io::Error>,
    line: Vec<u8>,
    trace_digest: &'w str,
}

impl<'w, W: Write + ?Sized> Lines<'w, W> {
    /// Writes the header line and starts the digest with the receipt body's head.
    pub fn start(out: &'w mut W, trace_digest: &'w str) -> Self {
        let mut lines = Lines {
            out,
            hasher: Sha256::new(),
            error: None,
            line: Vec::new(),
            trace_digest,
        };
        lines.line.extend_from_slice(br#"{"format":"#);
        push_str(&mut lines.line, STREAM_FORMAT);
        lines.line.extend_from_slice(br#","receipt_format":"#);
        push_str(&mut lines.line, RECEIPT_FORMAT);
        lines.line.extend_from_slice(br#","trace_digest":"#);
        push_str(&mut lines.line, trace_digest);
        lines.line.push(b'}');
        lines.write_line();
        let (head, _) = typed::body_around_runs(trace_digest);
        lines.hasher.update(&head);
        lines
    }

    /// Ends the digest and writes the closing line, once every run has been streamed.
    pub fn finish(mut self, runs: Vec<(Policy, Metrics)>) -> io::Result<StreamSummary> {
        let (_, tail) = typed::body_around_runs(self.trace_digest);
        self.hasher.update(&tail);
        let receipt_digest = digest_tag(&std::mem::take(&mut self.hasher).finalize());
        self.line.clear();
        self.line.extend_from_slice(br#"{"receipt_digest":"#);
        push_str(&mut self.line, &receipt_digest);
        self.line.push(b'}');
        self.write_line();
        if let Some(e) = self.error {
            return Err(e);
        }
        self.out.flush()?;
        Ok(StreamSummary {
            receipt_digest,
            runs,
        })
    }

    fn write_line(&mut self) {
        self.line.push(b'\n');
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(&self.line) {
                self.error = Some(e);
            }
        }
    }
}

impl<W: Write + ?Sized> RunsOut for Lines<'_, W> {
    fn punctuation(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// One element of a receipt array: hashed in place, and written as the line
    /// `{"<member>":<bytes>,"policy":"<policy>"}`. It is canonical: every member name
    /// sorts before `policy`, and JCS writes a nested value exactly as it writes that
    /// value alone.
    fn element(&mut self, policy: Policy, member: Member, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.line.clear();
        self.line.extend_from_slice(b"{\"");
        self.line.extend_from_slice(member.name().as_bytes());
        self.line.extend_from_slice(b"\":");
        self.line.extend_from_slice(bytes);
        self.line.extend_from_slice(b",\"policy\":");
        push_str(&mut self.line, policy.name());
        self.line.push(b'}');
        self.write_line();
    }
}
