//! Canonical receipt bytes written by type (SPEC.md §6, §6.1), straight from the
//! decision records: no JSON tree, no generic canonicalizer on the hot path.
//!
//! Every receipt object has a fixed set of ASCII member names, so RFC 8785's member
//! order is known in advance; each writer below lists its members in that order (byte
//! order equals UTF-16 order for ASCII). Every number is an integer up to 2^53 - 1 and
//! is written in decimal; every string is escaped once, as JCS escapes it. The generic
//! canonicalizer remains the check: tests assert that these bytes equal the canonical
//! form of their own parse and of the receipt's JSON tree (`tests/tests/streaming.rs`,
//! `tests/tests/properties.rs`, the fuzz targets; the tree is built in the test
//! harness).
//!
//! Two sinks receive the records while the runs replay (the replay driver,
//! `crate::replay`, runs them): [`StreamedRuns`] sends the `runs` array piece by piece,
//! for the JSON, JSON Lines and digest-only outputs, so no output holds more than one
//! element in memory; [`RunsBytes`] builds it whole in memory (the differential check's
//! path).

use crate::mutant::{active, Mutant};
use crate::output::json_text::{digest_tag, push_str, push_u64};
use crate::route::candidate::CandidateRow;
use crate::route::metrics::Metrics;
use crate::route::policy::{Policy, RouteKind};
use crate::route::record::{
    CacheLogEntry, Decision, DecisionRef, Member, ObservationLogEntry, RunOrder, RunSink,
};
use sha2::{Digest, Sha256};

/// The `format` member of every receipt.
pub const RECEIPT_FORMAT: &str = "kvroute-receipt/1";

fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

fn push_id_or_null<S: AsRef<str>>(out: &mut Vec<u8>, ids: &[S], worker: Option<usize>) {
    match worker {
        Some(w) => push_str(out, ids[w].as_ref()),
        None => out.extend_from_slice(b"null"),
    }
}

/// One candidate row (members in canonical order).
pub fn push_row<S: AsRef<str>>(out: &mut Vec<u8>, ids: &[S], row: &CandidateRow) {
    out.extend_from_slice(br#"{"active_decode":"#);
    push_u64(out, row.active_decode);
    out.extend_from_slice(br#","after_milli":"#);
    push_u64(out, row.after_milli);
    out.extend_from_slice(br#","cost_milli":"#);
    push_u64(out, row.cost_milli);
    out.extend_from_slice(br#","dominated_by":"#);
    push_id_or_null(out, ids, row.dominated_by);
    out.extend_from_slice(br#","dominated_count":"#);
    push_u64(out, row.dominated_count);
    out.extend_from_slice(br#","eligible":"#);
    push_bool(out, row.eligible);
    out.extend_from_slice(br#","queued_prefill":"#);
    push_u64(out, row.queued_prefill);
    out.extend_from_slice(br#","reasons":["#);
    for (i, reason) in row.reasons.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Reason names are plain ASCII identifiers: nothing to escape.
        out.push(b'"');
        out.extend_from_slice(reason.name().as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(br#"],"recomputed":"#);
    push_u64(out, row.recomputed);
    out.extend_from_slice(br#","reuse":"#);
    push_u64(out, row.reuse);
    out.extend_from_slice(br#","work_milli":"#);
    push_u64(out, row.work_milli);
    out.extend_from_slice(br#","worker":"#);
    push_str(out, ids[row.worker].as_ref());
    out.push(b'}');
}

/// What a decision says besides its rows, borrowed from either record form.
#[derive(Debug, Clone, Copy)]
pub struct DecisionHead<'a> {
    pub seq: u64,
    pub tick: u64,
    pub request: &'a str,
    pub chosen: Option<usize>,
    pub route_kind: RouteKind,
    pub tie_count: u64,
    pub margin_milli: u64,
}

impl<'a> DecisionHead<'a> {
    pub fn of_record(d: &'a Decision) -> Self {
        DecisionHead {
            seq: d.seq,
            tick: d.tick,
            request: &d.request,
            chosen: d.chosen,
            route_kind: d.route_kind,
            tie_count: d.tie_count,
            margin_milli: d.margin_milli,
        }
    }

    pub fn of_ref(d: &DecisionRef<'a>) -> Self {
        DecisionHead {
            seq: d.seq,
            tick: d.tick,
            request: d.request,
            chosen: d.choice.chosen,
            route_kind: d.route_kind,
            tie_count: d.choice.tie_count,
            margin_milli: d.choice.margin_milli,
        }
    }
}

/// Whether a row is exported. Always, except under the mutant that exports only the
/// chosen worker's row.
fn exported(head: &DecisionHead, row: &CandidateRow) -> bool {
    !active(Mutant::ChosenOnlyReceipt) || Some(row.worker) == head.chosen
}

/// One decision (members in canonical order) with the given rows, in id order.
pub fn push_decision<S: AsRef<str>>(
    out: &mut Vec<u8>,
    ids: &[S],
    head: &DecisionHead,
    rows: impl Iterator<Item = CandidateRow>,
) {
    out.extend_from_slice(br#"{"candidates":["#);
    let mut first = true;
    for row in rows.filter(|row| exported(head, row)) {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        push_row(out, ids, &row);
    }
    out.extend_from_slice(br#"],"chosen":"#);
    push_id_or_null(out, ids, head.chosen);
    out.extend_from_slice(br#","margin_milli":"#);
    push_u64(out, head.margin_milli);
    out.extend_from_slice(br#","request":"#);
    push_str(out, head.request);
    out.extend_from_slice(br#","route_kind":""#);
    out.extend_from_slice(head.route_kind.name().as_bytes());
    out.extend_from_slice(br#"","seq":"#);
    push_u64(out, head.seq);
    out.extend_from_slice(br#","tick":"#);
    push_u64(out, head.tick);
    out.extend_from_slice(br#","tie_count":"#);
    push_u64(out, head.tie_count);
    out.push(b'}');
}

/// A decision straight from the engine's scratch rows: each row is built on the stack
/// as it is written.
pub fn push_decision_ref<S: AsRef<str>>(out: &mut Vec<u8>, ids: &[S], decision: &DecisionRef) {
    let rows = decision.rows;
    push_decision(
        out,
        ids,
        &DecisionHead::of_ref(decision),
        (0..rows.len()).map(|w| rows.candidate_row(w)),
    );
}

/// One cache log entry (members in canonical order).
pub fn push_cache_entry<S: AsRef<str>>(out: &mut Vec<u8>, ids: &[S], e: &CacheLogEntry) {
    out.extend_from_slice(br#"{"epoch":"#);
    push_u64(out, e.epoch);
    out.extend_from_slice(br#","op":""#);
    out.extend_from_slice(e.op.name().as_bytes());
    out.extend_from_slice(br#"","outcome":""#);
    out.extend_from_slice(e.outcome.name().as_bytes());
    out.extend_from_slice(br#"","seq":"#);
    push_u64(out, e.seq);
    if let Some(stale) = e.stale_mutations {
        out.extend_from_slice(br#","stale_mutations":"#);
        push_u64(out, stale);
    }
    out.extend_from_slice(br#","tick":"#);
    push_u64(out, e.tick);
    out.extend_from_slice(br#","worker":"#);
    push_str(out, ids[e.worker].as_ref());
    out.push(b'}');
}

/// One observation log entry (members in canonical order).
pub fn push_observation_entry<S: AsRef<str>>(
    out: &mut Vec<u8>,
    ids: &[S],
    e: &ObservationLogEntry,
) {
    out.extend_from_slice(br#"{"observed_tick":"#);
    push_u64(out, e.observed_tick);
    out.extend_from_slice(br#","outcome":""#);
    out.extend_from_slice(e.outcome.name().as_bytes());
    out.extend_from_slice(br#"","seq":"#);
    push_u64(out, e.seq);
    out.extend_from_slice(br#","tick":"#);
    push_u64(out, e.tick);
    out.extend_from_slice(br#","worker":"#);
    push_str(out, ids[e.worker].as_ref());
    out.push(b'}');
}

/// One run's metrics (members in canonical order).
pub fn push_metrics(out: &mut Vec<u8>, m: &Metrics) {
    out.push(b'{');
    for (i, (name, value)) in m.members().into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(out, name);
        out.push(b':');
        push_u64(out, value);
    }
    out.push(b'}');
}

/// The version-1 metrics writer, kept to check [`Metrics::members`] against it.
#[cfg(test)]
fn push_metrics_v1(out: &mut Vec<u8>, m: &Metrics) {
    let members: [(&[u8], u64); 15] = [
        (br#"{"boundary_rejections":"#, m.boundary_rejections),
        (br#","cache_hits":"#, m.cache_hits),
        (br#","dominated_choices":"#, m.dominated_choices),
        (br#","latency_proxy_max_milli":"#, m.latency_proxy_max_milli),
        (
            br#","latency_proxy_mean_milli":"#,
            m.latency_proxy_mean_milli,
        ),
        (br#","latency_proxy_p95_milli":"#, m.latency_proxy_p95_milli),
        (br#","load_skew_milli":"#, m.load_skew_milli),
        (br#","overload_escapes":"#, m.overload_escapes),
        (br#","recomputed_tokens":"#, m.recomputed_tokens),
        (br#","rejected":"#, m.rejected),
        (br#","reused_tokens":"#, m.reused_tokens),
        (br#","route_churn":"#, m.route_churn),
        (br#","routed":"#, m.routed),
        (br#","stale_event_rejections":"#, m.stale_event_rejections),
        (
            br#","stale_observation_rejections":"#,
            m.stale_observation_rejections,
        ),
    ];
    for (name, value) in members {
        out.extend_from_slice(name);
        push_u64(out, value);
    }
    out.push(b'}');
}

/// The bytes of the receipt body (without `receipt_digest`) that come before and after
/// the `runs` array's own bytes.
pub fn body_around_runs(trace_digest: &str) -> (Vec<u8>, Vec<u8>) {
    let mut head = br#"{"format":"#.to_vec();
    push_str(&mut head, RECEIPT_FORMAT);
    head.extend_from_slice(br#","runs":"#);
    let mut tail = br#","trace_digest":"#.to_vec();
    push_str(&mut tail, trace_digest);
    tail.push(b'}');
    (head, tail)
}

/// The bytes of the full receipt before its `runs` array: the same head with
/// `receipt_digest` in its canonical place, between `format` and `runs`.
pub fn full_head(receipt_digest: &str) -> Vec<u8> {
    let mut head = br#"{"format":"#.to_vec();
    push_str(&mut head, RECEIPT_FORMAT);
    head.extend_from_slice(br#","receipt_digest":"#);
    push_str(&mut head, receipt_digest);
    head.extend_from_slice(br#","runs":"#);
    head
}

/// `receipt_digest` of a receipt whose `runs` array has the canonical bytes `runs`.
pub fn receipt_digest_of_runs(runs: &[u8], trace_digest: &str) -> String {
    let (head, tail) = body_around_runs(trace_digest);
    let mut hasher = Sha256::new();
    hasher.update(&head);
    hasher.update(runs);
    hasher.update(&tail);
    digest_tag(&hasher.finalize())
}

/// The full canonical receipt from its `runs` array's canonical bytes.
pub fn assemble_receipt(runs: &[u8], trace_digest: &str) -> Vec<u8> {
    let digest = receipt_digest_of_runs(runs, trace_digest);
    let head = full_head(&digest);
    let (_, tail) = body_around_runs(trace_digest);
    let mut out = Vec::with_capacity(head.len() + runs.len() + tail.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(runs);
    out.extend_from_slice(&tail);
    out
}

/// Appends one run (members in canonical order) from its members' bytes: each log and
/// the decisions are their elements already joined by commas.
fn push_run(
    out: &mut Vec<u8>,
    policy: Policy,
    cache_log: &[u8],
    decisions: &[u8],
    metrics: &Metrics,
    observation_log: &[u8],
) {
    out.extend_from_slice(br#"{"cache_log":["#);
    out.extend_from_slice(cache_log);
    out.extend_from_slice(br#"],"decisions":["#);
    out.extend_from_slice(decisions);
    out.extend_from_slice(br#"],"metrics":"#);
    push_metrics(out, metrics);
    out.extend_from_slice(br#","observation_log":["#);
    out.extend_from_slice(observation_log);
    out.extend_from_slice(br#"],"policy":""#);
    out.extend_from_slice(policy.name().as_bytes());
    out.extend_from_slice(b"\"}");
}

/// The `runs` array of an in-memory receipt's records.
pub fn runs_bytes_of_records<S: AsRef<str>>(
    ids: &[S],
    runs: &[crate::route::record::Run],
) -> Vec<u8> {
    let mut out = vec![b'['];
    let (mut cache_log, mut decisions, mut observation_log) = (Vec::new(), Vec::new(), Vec::new());
    for (i, run) in runs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        cache_log.clear();
        decisions.clear();
        observation_log.clear();
        for (j, e) in run.cache_log.iter().enumerate() {
            comma(&mut cache_log, j);
            push_cache_entry(&mut cache_log, ids, e);
        }
        for (j, d) in run.decisions.iter().enumerate() {
            comma(&mut decisions, j);
            let head = DecisionHead::of_record(d);
            push_decision(&mut decisions, ids, &head, d.candidates.iter().copied());
        }
        for (j, e) in run.observation_log.iter().enumerate() {
            comma(&mut observation_log, j);
            push_observation_entry(&mut observation_log, ids, e);
        }
        push_run(
            &mut out,
            run.policy,
            &cache_log,
            &decisions,
            &run.metrics,
            &observation_log,
        );
    }
    out.push(b']');
    out
}

fn comma(out: &mut Vec<u8>, index: usize) {
    if index > 0 {
        out.push(b',');
    }
}

/// Writes the `runs` array of a receipt into memory as the runs replay
/// ([`RunOrder::AsReplayed`]): each run's three arrays go to their own buffers, and the
/// run object is assembled when its metrics arrive. No record is kept.
pub struct RunsBytes<'i> {
    ids: &'i [&'i str],
    policy: Option<Policy>,
    cache_log: Vec<u8>,
    decisions: Vec<u8>,
    observation_log: Vec<u8>,
    runs: Vec<u8>,
}

impl<'i> RunsBytes<'i> {
    pub fn new(ids: &'i [&'i str]) -> Self {
        RunsBytes {
            ids,
            policy: None,
            cache_log: Vec::new(),
            decisions: Vec::new(),
            observation_log: Vec::new(),
            runs: vec![b'['],
        }
    }

    /// The `runs` array's canonical bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.runs.push(b']');
        self.runs
    }
}

fn separate(out: &mut Vec<u8>) {
    if !out.is_empty() {
        out.push(b',');
    }
}

impl RunSink for RunsBytes<'_> {
    fn run_started(&mut self, index: usize, policy: Policy) {
        comma(&mut self.runs, index);
        self.policy = Some(policy);
    }
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        separate(&mut self.cache_log);
        push_cache_entry(&mut self.cache_log, self.ids, entry);
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        separate(&mut self.observation_log);
        push_observation_entry(&mut self.observation_log, self.ids, entry);
    }
    fn decided(&mut self, decision: &DecisionRef) {
        separate(&mut self.decisions);
        push_decision_ref(&mut self.decisions, self.ids, decision);
    }
    fn metrics_computed(&mut self, metrics: &Metrics) {
        let policy = self.policy.take().expect("a run was started");
        push_run(
            &mut self.runs,
            policy,
            &self.cache_log,
            &self.decisions,
            metrics,
            &self.observation_log,
        );
        self.cache_log.clear();
        self.decisions.clear();
        self.observation_log.clear();
    }
}

/// Where [`StreamedRuns`] sends the `runs` array: its punctuation, and each element
/// (log entry, decision, metrics) of one run's member.
pub trait RunsOut {
    fn punctuation(&mut self, bytes: &[u8]);
    fn element(&mut self, policy: Policy, member: Member, bytes: &[u8]);
}

/// Feeds the array's bytes, unchanged, to a hasher: the receipt digest.
impl RunsOut for Sha256 {
    fn punctuation(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
    fn element(&mut self, _: Policy, _: Member, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// Sends the receipt's `runs` array to a [`RunsOut`] piece by piece as the runs replay
/// ([`RunOrder::ReceiptMembers`]), so no output holds more than one element: the JSON,
/// JSON Lines and digest-only outputs.
pub struct StreamedRuns<'o, 'i, O: RunsOut + ?Sized> {
    out: &'o mut O,
    ids: &'i [&'i str],
    policy: Policy,
    scratch: Vec<u8>,
    /// Whether the current member has an element yet (the next one needs a comma).
    written: bool,
}

impl<'o, 'i, O: RunsOut + ?Sized> StreamedRuns<'o, 'i, O> {
    /// Opens the `runs` array on `out`.
    pub fn new(out: &'o mut O, ids: &'i [&'i str]) -> Self {
        out.punctuation(b"[");
        StreamedRuns {
            out,
            ids,
            policy: Policy::ALL[0],
            scratch: Vec::new(),
            written: false,
        }
    }

    /// Closes the `runs` array.
    pub fn finish(self) {
        self.out.punctuation(b"]");
    }

    fn emit(&mut self, member: Member) {
        if std::mem::replace(&mut self.written, true) {
            self.out.punctuation(b",");
        }
        self.out.element(self.policy, member, &self.scratch);
    }
}

impl<O: RunsOut + ?Sized> RunSink for StreamedRuns<'_, '_, O> {
    fn order(&self) -> RunOrder {
        RunOrder::ReceiptMembers
    }
    fn run_started(&mut self, index: usize, policy: Policy) {
        if index > 0 {
            self.out.punctuation(b",");
        }
        self.policy = policy;
    }
    fn member_started(&mut self, member: Member) {
        self.written = false;
        self.out.punctuation(match member {
            Member::CacheLog => br#"{"cache_log":["#,
            Member::Decisions => br#"],"decisions":["#,
            Member::Metrics => br#"],"metrics":"#,
            Member::ObservationLog => br#","observation_log":["#,
        });
    }
    fn cache_logged(&mut self, entry: &CacheLogEntry) {
        self.scratch.clear();
        push_cache_entry(&mut self.scratch, self.ids, entry);
        self.emit(Member::CacheLog);
    }
    fn observation_logged(&mut self, entry: &ObservationLogEntry) {
        self.scratch.clear();
        push_observation_entry(&mut self.scratch, self.ids, entry);
        self.emit(Member::ObservationLog);
    }
    fn decided(&mut self, decision: &DecisionRef) {
        self.scratch.clear();
        push_decision_ref(&mut self.scratch, self.ids, decision);
        self.emit(Member::Decisions);
    }
    fn metrics_computed(&mut self, metrics: &Metrics) {
        self.scratch.clear();
        push_metrics(&mut self.scratch, metrics);
        self.emit(Member::Metrics);
    }
    fn run_finished(&mut self) {
        self.scratch.clear();
        self.scratch.extend_from_slice(br#"],"policy":"#);
        push_str(&mut self.scratch, self.policy.name());
        self.scratch.push(b'}');
        self.out.punctuation(&self.scratch);
    }
}

/// Writes what a [`RunsOut`] is sent to a writer, keeping the first error (a sink
/// cannot return one mid-run) and writing nothing after it.
pub struct WriteOut<'w, W: std::io::Write + ?Sized> {
    out: &'w mut W,
    error: Option<std::io::Error>,
}

impl<'w, W: std::io::Write + ?Sized> WriteOut<'w, W> {
    pub fn new(out: &'w mut W) -> Self {
        WriteOut { out, error: None }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(bytes) {
                self.error = Some(e);
            }
        }
    }

    /// The first error, or the writer flushed.
    pub fn finish(self) -> std::io::Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.out.flush()
    }
}

impl<W: std::io::Write + ?Sized> RunsOut for WriteOut<'_, W> {
    fn punctuation(&mut self, bytes: &[u8]) {
        self.write(bytes);
    }
    fn element(&mut self, _: Policy, _: Member, bytes: &[u8]) {
        self.write(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::canonical::jcs_bytes;
    use serde_json::json;

    fn sample_metrics() -> Metrics {
        let mut m = Metrics::default();
        let fields = [
            &mut m.routed,
            &mut m.rejected,
            &mut m.cache_hits,
            &mut m.reused_tokens,
            &mut m.recomputed_tokens,
            &mut m.route_churn,
            &mut m.load_skew_milli,
            &mut m.latency_proxy_mean_milli,
            &mut m.latency_proxy_p95_milli,
            &mut m.latency_proxy_max_milli,
            &mut m.stale_event_rejections,
            &mut m.stale_observation_rejections,
            &mut m.boundary_rejections,
            &mut m.overload_escapes,
            &mut m.dominated_choices,
        ];
        for (i, field) in fields.into_iter().enumerate() {
            *field = 100 + i as u64;
        }
        m
    }

    /// Default-policy metrics are written exactly as before the optional members, and
    /// the optional ones land in canonical order (SPEC.md §6.2).
    #[test]
    fn metrics_bytes_are_unchanged_by_default_and_canonical_with_every_member() {
        let mut m = sample_metrics();
        let (mut now, mut v1) = (Vec::new(), Vec::new());
        push_metrics(&mut now, &m);
        push_metrics_v1(&mut v1, &m);
        assert_eq!(now, v1);
        m.stale_mutation_rejections = Some(1);
        m.evidence_gaps = Some(2);
        m.evidence_gap_rows = Some(3);
        m.cold_reserve_exclusions = Some(4);
        m.cold_reserve_fallbacks = Some(5);
        now.clear();
        push_metrics(&mut now, &m);
        let value = serde_json::to_value(&m).unwrap();
        assert_eq!(value.as_object().unwrap().len(), 20);
        assert_eq!(now, jcs_bytes(&value));
    }

    #[test]
    fn strings_are_escaped_as_the_canonicalizer_escapes_them() {
        let mut every_control: String = (0u8..0x20).map(char::from).collect();
        every_control.push_str("\"\\/\u{7f}é\u{2028}😀plain");
        for text in ["", "w0", "a\"b", every_control.as_str()] {
            let mut typed = Vec::new();
            push_str(&mut typed, text);
            assert_eq!(typed, jcs_bytes(&json!(text)), "{text:?}");
        }
    }

    #[test]
    fn integers_are_written_in_decimal() {
        for value in [0, 7, 10, 99, 100, 9_007_199_254_740_991, u64::MAX] {
            let mut typed = Vec::new();
            push_u64(&mut typed, value);
            assert_eq!(typed, value.to_string().into_bytes());
        }
    }
}
