//! Canonical bytes and digests (SPEC.md §6.1).
//!
//! The canonical trace is the validated trace with defaults filled in and every array
//! whose order means nothing sorted, serialised as RFC 8785 (JCS). Its SHA-256 is the
//! `trace_digest`, so shuffling any input array never changes a digest. The bytes are
//! written by type, members in JCS order (as the receipt's are, [`crate::output::typed`]);
//! the JSON tree ([`canonical_trace_value`]) and the generic serialiser stay as the check.

use crate::input::compact::EventsView;
use crate::input::trace::*;
pub use crate::output::json_text::digest_tag;
use crate::output::json_text::{push_str, push_u64};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::sync::Arc;

/// RFC 8785 bytes of a JSON value.
pub fn jcs_bytes(value: &Value) -> Vec<u8> {
    // Every number kvroute exports is an integer at most 2^53 - 1, which JCS writes
    // exactly, and a `Value` holds no non-finite floats, so serialisation cannot fail.
    serde_json_canonicalizer::to_vec(value).expect("a serde_json::Value always canonicalises")
}

/// `"sha256:" + lowercase hex` of `bytes`.
pub fn sha256_tag(bytes: &[u8]) -> String {
    digest_tag(&Sha256::digest(bytes))
}

fn sorted_strings(items: &[Arc<str>]) -> Vec<&str> {
    let mut items: Vec<&str> = items.iter().map(|s| &**s).collect();
    items.sort();
    items
}

/// Sorts values by their own canonical bytes.
fn sorted_by_canonical_bytes(items: Vec<Value>) -> Vec<Value> {
    let mut keyed: Vec<(Vec<u8>, Value)> = items.into_iter().map(|v| (jcs_bytes(&v), v)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().map(|(_, v)| v).collect()
}

fn segments_value(segments: &[Segment]) -> Value {
    Value::Array(
        segments
            .iter()
            .map(|s| json!({ "key": &*s.key, "tokens": s.tokens }))
            .collect(),
    )
}

fn event_value(event: &Event) -> Value {
    match &event.kind {
        EventKind::Cache { worker, epoch, op } => {
            let mut value = json!({
                "seq": event.seq, "tick": event.tick, "type": "cache",
                "op": op.kind().name(), "worker": &**worker, "epoch": epoch,
            });
            let fields = value.as_object_mut().expect("built as an object");
            match op {
                CacheOp::Store {
                    namespace,
                    segments,
                } => {
                    fields.insert("tenant".into(), json!(&*namespace.tenant));
                    fields.insert("model".into(), json!(&*namespace.model));
                    fields.insert("adapter".into(), json!(&*namespace.adapter));
                    fields.insert("segments".into(), segments_value(segments));
                }
                CacheOp::Evict { namespace, keys } => {
                    fields.insert("tenant".into(), json!(&*namespace.tenant));
                    fields.insert("model".into(), json!(&*namespace.model));
                    fields.insert("adapter".into(), json!(&*namespace.adapter));
                    fields.insert("keys".into(), json!(sorted_strings(keys)));
                }
                CacheOp::Clear => {}
            }
            value
        }
        EventKind::Load {
            worker,
            observed_tick,
            queued_prefill,
            active_decode,
        } => json!({
            "seq": event.seq, "tick": event.tick, "type": "load", "worker": &**worker,
            "observed_tick": observed_tick, "queued_prefill": queued_prefill,
            "active_decode": active_decode,
        }),
        EventKind::Request(request) => json!({
            "seq": event.seq, "tick": event.tick, "type": "request", "id": &*request.id,
            "tenant": &*request.namespace.tenant, "model": &*request.namespace.model,
            "adapter": &*request.namespace.adapter, "prefix": segments_value(&request.prefix),
            "prompt_tokens": request.prompt_tokens, "decode_tokens": request.decode_tokens,
        }),
    }
}

fn worker_value(worker: &WorkerSpec) -> Value {
    let cache = worker
        .cache
        .iter()
        .map(|e| {
            json!({
                "tenant": &*e.namespace.tenant, "model": &*e.namespace.model,
                "adapter": &*e.namespace.adapter, "key": &*e.key, "tokens": e.tokens,
            })
        })
        .collect();
    json!({
        "id": &*worker.id, "model": &*worker.model, "adapters": sorted_strings(&worker.adapters),
        "prefill_rate": worker.prefill_rate, "decode_rate": worker.decode_rate,
        "queued_prefill": worker.queued_prefill, "active_decode": worker.active_decode,
        "observed_tick": worker.observed_tick, "epoch": worker.epoch,
        "cache": sorted_by_canonical_bytes(cache),
    })
}

/// The canonical trace as a JSON value (the whole trace in one tree: for small traces
/// and tests; [`canonical_trace_pieces`] produces the same bytes piece by piece).
pub fn canonical_trace_value(trace: &Trace) -> Value {
    let mut value = canonical_head_value(trace);
    let fields = value.as_object_mut().expect("built as an object");
    let workers: Vec<Value> = sorted_workers(trace)
        .into_iter()
        .map(worker_value)
        .collect();
    let events: Vec<Value> = sorted_events(trace).into_iter().map(event_value).collect();
    fields.insert("workers".into(), Value::Array(workers));
    fields.insert("events".into(), Value::Array(events));
    value
}

fn sorted_workers(trace: &Trace) -> Vec<&WorkerSpec> {
    let mut workers: Vec<&WorkerSpec> = trace.workers.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    workers
}

fn sorted_events(trace: &Trace) -> Vec<&Event> {
    let mut events: Vec<&Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    events
}

/// Every member of the canonical trace except `workers` and `events`.
fn canonical_head_value(trace: &Trace) -> Value {
    let grants = trace
        .sharing
        .iter()
        .map(|g| json!({ "model": &*g.model, "adapter": &*g.adapter, "tenants": sorted_strings(&g.tenants) }))
        .collect();
    let mut head = json!({
        "format": "kvroute-trace/1",
        "limits": trace.limits.name(),
        "policy": {
            "decode_weight_milli": trace.policy.decode_weight_milli,
            "imbalance_penalty_milli": trace.policy.imbalance_penalty_milli,
            "freshness_ticks": trace.policy.freshness_ticks,
            "max_queued_work": trace.policy.max_queued_work,
        },
        "sharing": sorted_by_canonical_bytes(grants),
    });
    // The members added after contract version 1 are written only off their defaults,
    // so a trace without them keeps its digest (SPEC.md §6.1).
    let policy = head["policy"].as_object_mut().expect("policy is an object");
    if trace.policy.stale_rule != StaleRule::default() {
        policy.insert("stale_rule".into(), json!(trace.policy.stale_rule.name()));
    }
    if trace.policy.epochs != EpochsMode::default() {
        policy.insert("epochs".into(), json!(trace.policy.epochs.name()));
    }
    if let Some(reserve) = trace.policy.cold_reserve_milli {
        policy.insert("cold_reserve_milli".into(), json!(reserve));
    }
    if let Some(block_tokens) = trace.policy.dynamo_block_tokens {
        policy.insert("dynamo_block_tokens".into(), json!(block_tokens));
    }
    head
}

/// Hands the canonical trace bytes to `emit` piece by piece: one event or one worker at
/// a time, so a trace of millions of events is never held as one JSON tree (that tree
/// took about 40 bytes of memory per byte of trace). The members are written in JCS
/// order (`events` < `format` < `limits` < `policy` < `sharing` < `workers`), each
/// object's members in JCS order too.
pub fn canonical_trace_pieces(trace: &Trace, emit: impl FnMut(&[u8])) {
    canonical_pieces_of(trace, &trace.events, emit);
}

/// [`canonical_trace_pieces`] of `trace`'s members but `events` and of `events` (any
/// [`EventsView`], such as a compactly held trace's), read one event at a time.
pub fn canonical_pieces_of<E: EventsView + ?Sized>(
    trace: &Trace,
    events: &E,
    mut emit: impl FnMut(&[u8]),
) {
    let mut piece = Vec::new();
    emit(EVENTS_OPEN);
    for (i, index) in events.sorted_order().into_iter().enumerate() {
        piece.clear();
        if i > 0 {
            piece.push(b',');
        }
        events.with_event(index as usize, |event| push_event(&mut piece, event));
        emit(&piece);
    }
    canonical_pieces_after_events(trace, emit);
}

/// What the canonical trace bytes start with: the `events` member sorts first.
const EVENTS_OPEN: &[u8] = br#"{"events":["#;

/// The canonical trace bytes after the last event: every other member. `trace.events`
/// is not read.
fn canonical_pieces_after_events(trace: &Trace, mut emit: impl FnMut(&[u8])) {
    let mut piece = Vec::new();
    piece.extend_from_slice(br#"],"format":"kvroute-trace/1","limits":"#);
    push_str(&mut piece, trace.limits.name());
    // Policy members in JCS order; the four added after contract version 1 only off
    // their defaults (SPEC.md §6.1), so existing digests are unchanged.
    piece.extend_from_slice(br#","policy":{"#);
    if let Some(reserve) = trace.policy.cold_reserve_milli {
        piece.extend_from_slice(br#""cold_reserve_milli":"#);
        push_u64(&mut piece, reserve);
        piece.push(b',');
    }
    piece.extend_from_slice(br#""decode_weight_milli":"#);
    push_u64(&mut piece, trace.policy.decode_weight_milli);
    if let Some(block_tokens) = trace.policy.dynamo_block_tokens {
        piece.extend_from_slice(br#","dynamo_block_tokens":"#);
        push_u64(&mut piece, block_tokens);
    }
    if trace.policy.epochs != EpochsMode::default() {
        piece.extend_from_slice(br#","epochs":"#);
        push_str(&mut piece, trace.policy.epochs.name());
    }
    piece.extend_from_slice(br#","freshness_ticks":"#);
    push_optional(&mut piece, trace.policy.freshness_ticks);
    piece.extend_from_slice(br#","imbalance_penalty_milli":"#);
    push_u64(&mut piece, trace.policy.imbalance_penalty_milli);
    piece.extend_from_slice(br#","max_queued_work":"#);
    push_optional(&mut piece, trace.policy.max_queued_work);
    if trace.policy.stale_rule != StaleRule::default() {
        piece.extend_from_slice(br#","stale_rule":"#);
        push_str(&mut piece, trace.policy.stale_rule.name());
    }
    piece.extend_from_slice(br#"},"sharing":"#);
    push_grants(&mut piece, trace);
    piece.extend_from_slice(br#","workers":["#);
    emit(&piece);
    for (i, worker) in sorted_workers(trace).into_iter().enumerate() {
        piece.clear();
        if i > 0 {
            piece.push(b',');
        }
        push_worker(&mut piece, worker);
        emit(&piece);
    }
    emit(b"]}");
}

/// The `sharing` grants, in canonical order.
fn push_grants(out: &mut Vec<u8>, trace: &Trace) {
    let grants = trace.sharing.iter().map(|g| {
        let mut bytes = br#"{"adapter":"#.to_vec();
        push_str(&mut bytes, &g.adapter);
        bytes.extend_from_slice(br#","model":"#);
        push_str(&mut bytes, &g.model);
        bytes.extend_from_slice(br#","tenants":"#);
        push_sorted_strings(&mut bytes, &g.tenants);
        bytes.push(b'}');
        bytes
    });
    push_sorted_pieces(out, grants);
}

fn push_optional(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        Some(v) => push_u64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON array of strings in byte order (what JCS's sorted arrays here mean).
fn push_sorted_strings(out: &mut Vec<u8>, items: &[Arc<str>]) {
    let mut sorted: Vec<&str> = items.iter().map(|s| &**s).collect();
    sorted.sort();
    out.push(b'[');
    for (i, item) in sorted.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_str(out, item);
    }
    out.push(b']');
}

/// A JSON array of already-canonical elements, sorted by their own bytes.
fn push_sorted_pieces(out: &mut Vec<u8>, items: impl Iterator<Item = Vec<u8>>) {
    let mut items: Vec<Vec<u8>> = items.collect();
    items.sort();
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
}

fn push_segments(out: &mut Vec<u8>, segments: &[Segment]) {
    out.push(b'[');
    for (i, segment) in segments.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"key":"#);
        push_str(out, &segment.key);
        out.extend_from_slice(br#","tokens":"#);
        push_u64(out, segment.tokens);
        out.push(b'}');
    }
    out.push(b']');
}

/// `"seq":…,"tenant":…,"tick":…,"type":"…"`: the members every store, evict and
/// request event has in the same sorted place.
fn push_seq_tenant_tick_type(out: &mut Vec<u8>, event: &Event, tenant: &str, kind: &str) {
    out.extend_from_slice(br#","seq":"#);
    push_u64(out, event.seq);
    out.extend_from_slice(br#","tenant":"#);
    push_str(out, tenant);
    out.extend_from_slice(br#","tick":"#);
    push_u64(out, event.tick);
    out.extend_from_slice(br#","type":"#);
    push_str(out, kind);
}

fn push_event(out: &mut Vec<u8>, event: &Event) {
    match &event.kind {
        EventKind::Cache { worker, epoch, op } => {
            push_cache_op(out, event, *epoch, op);
            out.extend_from_slice(br#","worker":"#);
            push_str(out, worker);
            out.push(b'}');
        }
        EventKind::Load {
            worker,
            observed_tick,
            queued_prefill,
            active_decode,
        } => {
            out.extend_from_slice(br#"{"active_decode":"#);
            push_u64(out, *active_decode);
            out.extend_from_slice(br#","observed_tick":"#);
            push_u64(out, *observed_tick);
            out.extend_from_slice(br#","queued_prefill":"#);
            push_u64(out, *queued_prefill);
            out.extend_from_slice(br#","seq":"#);
            push_u64(out, event.seq);
            out.extend_from_slice(br#","tick":"#);
            push_u64(out, event.tick);
            out.extend_from_slice(br#","type":"load","worker":"#);
            push_str(out, worker);
            out.push(b'}');
        }
        EventKind::Request(request) => push_request(out, event, request),
    }
}

/// A cache event's members up to its `worker` (the last member, which the caller
/// writes, with the closing brace).
fn push_cache_op(out: &mut Vec<u8>, event: &Event, epoch: u64, op: &CacheOp) {
    match op {
        CacheOp::Store {
            namespace,
            segments,
        } => {
            out.extend_from_slice(br#"{"adapter":"#);
            push_str(out, &namespace.adapter);
            out.extend_from_slice(br#","epoch":"#);
            push_u64(out, epoch);
            out.extend_from_slice(br#","model":"#);
            push_str(out, &namespace.model);
            out.extend_from_slice(br#","op":"store","segments":"#);
            push_segments(out, segments);
            push_seq_tenant_tick_type(out, event, &namespace.tenant, "cache");
        }
        CacheOp::Evict { namespace, keys } => {
            out.extend_from_slice(br#"{"adapter":"#);
            push_str(out, &namespace.adapter);
            out.extend_from_slice(br#","epoch":"#);
            push_u64(out, epoch);
            out.extend_from_slice(br#","keys":"#);
            push_sorted_strings(out, keys);
            out.extend_from_slice(br#","model":"#);
            push_str(out, &namespace.model);
            out.extend_from_slice(br#","op":"evict""#);
            push_seq_tenant_tick_type(out, event, &namespace.tenant, "cache");
        }
        CacheOp::Clear => {
            out.extend_from_slice(br#"{"epoch":"#);
            push_u64(out, epoch);
            out.extend_from_slice(br#","op":"clear","seq":"#);
            push_u64(out, event.seq);
            out.extend_from_slice(br#","tick":"#);
            push_u64(out, event.tick);
            out.extend_from_slice(br#","type":"cache""#);
        }
    }
}

/// A request event, members in sorted order.
fn push_request(out: &mut Vec<u8>, event: &Event, request: &Request) {
    out.extend_from_slice(br#"{"adapter":"#);
    push_str(out, &request.namespace.adapter);
    out.extend_from_slice(br#","decode_tokens":"#);
    push_u64(out, request.decode_tokens);
    out.extend_from_slice(br#","id":"#);
    push_str(out, &request.id);
    out.extend_from_slice(br#","model":"#);
    push_str(out, &request.namespace.model);
    out.extend_from_slice(br#","prefix":"#);
    push_segments(out, &request.prefix);
    out.extend_from_slice(br#","prompt_tokens":"#);
    push_u64(out, request.prompt_tokens);
    push_seq_tenant_tick_type(out, event, &request.namespace.tenant, "request");
    out.push(b'}');
}

fn push_worker(out: &mut Vec<u8>, worker: &WorkerSpec) {
    out.extend_from_slice(br#"{"active_decode":"#);
    push_u64(out, worker.active_decode);
    out.extend_from_slice(br#","adapters":"#);
    push_sorted_strings(out, &worker.adapters);
    out.extend_from_slice(br#","cache":"#);
    let entries = worker.cache.iter().map(|e| {
        let mut bytes = br#"{"adapter":"#.to_vec();
        push_str(&mut bytes, &e.namespace.adapter);
        bytes.extend_from_slice(br#","key":"#);
        push_str(&mut bytes, &e.key);
        bytes.extend_from_slice(br#","model":"#);
        push_str(&mut bytes, &e.namespace.model);
        bytes.extend_from_slice(br#","tenant":"#);
        push_str(&mut bytes, &e.namespace.tenant);
        bytes.extend_from_slice(br#","tokens":"#);
        push_u64(&mut bytes, e.tokens);
        bytes.push(b'}');
        bytes
    });
    push_sorted_pieces(out, entries);
    out.extend_from_slice(br#","decode_rate":"#);
    push_u64(out, worker.decode_rate);
    out.extend_from_slice(br#","epoch":"#);
    push_u64(out, worker.epoch);
    out.extend_from_slice(br#","id":"#);
    push_str(out, &worker.id);
    out.extend_from_slice(br#","model":"#);
    push_str(out, &worker.model);
    out.extend_from_slice(br#","observed_tick":"#);
    push_u64(out, worker.observed_tick);
    out.extend_from_slice(br#","prefill_rate":"#);
    push_u64(out, worker.prefill_rate);
    out.extend_from_slice(br#","queued_prefill":"#);
    push_u64(out, worker.queued_prefill);
    out.push(b'}');
}

/// Writes the canonical trace bytes of a trace whose events arrive one at a time, and
/// hashes them as they go, so a trace too large to hold (a long Mooncake import) is
/// never held: memory is one event's bytes. The events must come in canonical
/// `(tick, seq)` order (SPEC.md §6.1); one out of order is refused, since sorting would
/// mean holding them all. The bytes equal [`canonical_trace_bytes`] of the whole trace.
pub struct CanonicalTraceStream<W: Write> {
    out: W,
    hasher: Sha256,
    piece: Vec<u8>,
    /// `(tick, seq)` of the last event written.
    last: Option<(u64, u64)>,
}

impl<W: Write> CanonicalTraceStream<W> {
    /// Starts the document on `out`.
    pub fn new(out: W) -> io::Result<Self> {
        let mut stream = CanonicalTraceStream {
            out,
            hasher: Sha256::new(),
            piece: Vec::new(),
            last: None,
        };
        stream.write(EVENTS_OPEN)?;
        Ok(stream)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.hasher.update(bytes);
        self.out.write_all(bytes)
    }

    /// Writes the next event.
    pub fn event(&mut self, event: &Event) -> io::Result<()> {
        let at = (event.tick, event.seq);
        if let Some((tick, seq)) = self.last.filter(|&last| last >= at) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "event seq {} at tick {} comes after seq {seq} at tick {tick}: \
                     not in (tick, seq) order",
                    event.seq, event.tick
                ),
            ));
        }
        self.piece.clear();
        if self.last.is_some() {
            self.piece.push(b',');
        }
        push_event(&mut self.piece, event);
        self.last = Some(at);
        self.hasher.update(&self.piece);
        self.out.write_all(&self.piece)
    }

    /// Writes every member after `events` from `head` (its own `events` are not read)
    /// and returns the output and the trace digest of what was written.
    pub fn finish(mut self, head: &Trace) -> io::Result<(W, String)> {
        let mut tail = Vec::new();
        canonical_pieces_after_events(head, |piece| tail.extend_from_slice(piece));
        self.write(&tail)?;
        Ok((self.out, digest_tag(&self.hasher.finalize())))
    }
}

/// The canonical trace bytes of a held trace as a reader, made one event at a time as
/// they are read, so that reading them back (validating an import's trace with
/// [`crate::input::validate::read_trace_compact`]) never holds them all. The bytes
/// equal [`canonical_trace_bytes`].
pub struct CanonicalTraceReader<'t> {
    trace: &'t Trace,
    /// Event indexes in `(tick, seq)` order.
    order: Vec<u32>,
    /// How many of `order` are in `piece` or were read already.
    events_made: usize,
    piece: Vec<u8>,
    /// How much of `piece` was read.
    read: usize,
    /// Which part is made next.
    next: ReaderPart,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReaderPart {
    Open,
    Events,
    Tail,
    Done,
}

impl<'t> CanonicalTraceReader<'t> {
    pub fn new(trace: &'t Trace) -> Self {
        CanonicalTraceReader {
            trace,
            order: trace.events.sorted_order(),
            events_made: 0,
            piece: Vec::new(),
            read: 0,
            next: ReaderPart::Open,
        }
    }

    /// Makes the next piece into `piece`; false when there is none.
    fn make_piece(&mut self) -> bool {
        self.piece.clear();
        self.read = 0;
        match self.next {
            ReaderPart::Open => {
                self.piece.extend_from_slice(EVENTS_OPEN);
                self.next = ReaderPart::Events;
            }
            ReaderPart::Events => match self.order.get(self.events_made) {
                Some(&index) => {
                    if self.events_made > 0 {
                        self.piece.push(b',');
                    }
                    push_event(&mut self.piece, &self.trace.events[index as usize]);
                    self.events_made += 1;
                }
                None => {
                    let piece = &mut self.piece;
                    canonical_pieces_after_events(self.trace, |p| piece.extend_from_slice(p));
                    self.next = ReaderPart::Tail;
                }
            },
            ReaderPart::Tail | ReaderPart::Done => {
                self.next = ReaderPart::Done;
                return false;
            }
        }
        true
    }
}

impl io::Read for CanonicalTraceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.read == self.piece.len() {
            if !self.make_piece() {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.piece.len() - self.read);
        buf[..n].copy_from_slice(&self.piece[self.read..self.read + n]);
        self.read += n;
        Ok(n)
    }
}

/// One event's canonical bytes, as the canonical trace writes it (SPEC.md §6.1): what
/// the peer protocol sends as an event (§15.2).
pub fn canonical_event_bytes(event: &Event, out: &mut Vec<u8>) {
    push_event(out, event);
}

/// `"workers":[…],"sharing":[…]` of the canonical trace, as the peer protocol's `fleet`
/// message carries them (SPEC.md §15.2): the workers in byte order of ids, each with its
/// sorted cache entries, and the grants in canonical order.
pub fn canonical_fleet_members(trace: &Trace, out: &mut Vec<u8>) {
    out.extend_from_slice(br#""workers":["#);
    for (i, worker) in sorted_workers(trace).into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_worker(out, worker);
    }
    out.extend_from_slice(br#"],"sharing":"#);
    push_grants(out, trace);
}

/// The canonical trace bytes.
pub fn canonical_trace_bytes(trace: &Trace) -> Vec<u8> {
    let mut bytes = Vec::new();
    canonical_trace_pieces(trace, |piece| bytes.extend_from_slice(piece));
    bytes
}

/// The trace digest, `sha256:<hex>` of the canonical trace, hashed as it is produced.
pub fn trace_digest(trace: &Trace) -> String {
    trace_digest_of(trace, &trace.events)
}

/// [`trace_digest`] of `trace`'s members but `events` and of `events`.
pub fn trace_digest_of<E: EventsView + ?Sized>(trace: &Trace, events: &E) -> String {
    let mut hasher = Sha256::new();
    canonical_pieces_of(trace, events, |piece| hasher.update(piece));
    digest_tag(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_the_canonical_bytes_of_the_whole_tree() {
        for json in [
            crate::LAB_TRACE_JSON,
            include_str!("../../../fixtures/sharing_grant/trace.json"),
            include_str!("../../../fixtures/stale_epoch/trace.json"),
            // Off-default policy members (SPEC.md §6.1): both writers must agree on them.
            include_str!("../../../fixtures/key_epoch/trace.json"),
            include_str!("../../../fixtures/evidence_gap/trace.json"),
            include_str!("../../../fixtures/cold_reserve/trace.json"),
        ] {
            let trace = crate::parse_trace(json.as_bytes()).unwrap();
            let whole = jcs_bytes(&canonical_trace_value(&trace));
            assert_eq!(canonical_trace_bytes(&trace), whole);
            assert_eq!(trace_digest(&trace), sha256_tag(&whole));
        }
    }

    #[test]
    fn the_reader_gives_the_canonical_bytes_whatever_its_reads_take() {
        use std::io::Read;
        let json = include_str!("../../../fixtures/sharing_grant/trace.json");
        let mut trace = crate::parse_trace(json.as_bytes()).unwrap();
        // Out of (tick, seq) order as held: the reader writes them in that order.
        trace.events.reverse();
        let whole = canonical_trace_bytes(&trace);
        for read_bytes in [1, 7, 4096] {
            let mut reader = CanonicalTraceReader::new(&trace);
            let mut read = Vec::new();
            let mut buf = vec![0u8; read_bytes];
            loop {
                match reader.read(&mut buf).unwrap() {
                    0 => break,
                    n => read.extend_from_slice(&buf[..n]),
                }
            }
            assert_eq!(read, whole, "reads of {read_bytes} bytes");
            assert_eq!(reader.read(&mut buf).unwrap(), 0, "it stays at its end");
        }
    }

    #[test]
    fn event_and_fleet_pieces_are_the_canonical_trace_members() {
        // The peer protocol (SPEC.md §15.2) sends these pieces as "the trace's
        // canonical form writes it": they must be the JCS bytes of those members.
        let json = include_str!("../../../fixtures/sharing_grant/trace.json");
        let trace = crate::parse_trace(json.as_bytes()).unwrap();
        let value = canonical_trace_value(&trace);
        let mut fleet = b"{".to_vec();
        canonical_fleet_members(&trace, &mut fleet);
        fleet.push(b'}');
        let fleet: Value = serde_json::from_slice(&fleet).unwrap();
        assert_eq!(jcs_bytes(&fleet["workers"]), jcs_bytes(&value["workers"]));
        assert_eq!(jcs_bytes(&fleet["sharing"]), jcs_bytes(&value["sharing"]));
        assert!(!value["sharing"].as_array().unwrap().is_empty());
        for (event, value) in sorted_events(&trace)
            .into_iter()
            .zip(value["events"].as_array().unwrap())
        {
            let mut bytes = Vec::new();
            canonical_event_bytes(event, &mut bytes);
            assert_eq!(bytes, jcs_bytes(value));
        }
    }
}
