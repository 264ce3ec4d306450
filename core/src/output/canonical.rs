//! Canonical bytes and digests (SPEC.md §6.1).
//!
//! The canonical trace is the validated trace with defaults filled in and every array
//! whose order means nothing sorted, serialised as RFC 8785 (JCS). Its SHA-256 is the
//! `trace_digest`, so shuffling any input array never changes a digest. The same JCS
//! serialiser produces the receipt's canonical bytes.

use crate::input::trace::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

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

/// `"sha256:" + lowercase hex` of a finished SHA-256 digest (for digests fed
/// incrementally, as the streaming receipt's is).
pub fn digest_tag(digest: &[u8]) -> String {
    let mut tag = String::with_capacity(7 + 64);
    tag.push_str("sha256:");
    for byte in digest {
        tag.push_str(&format!("{byte:02x}"));
    }
    tag
}

fn sorted_strings(items: &[String]) -> Vec<String> {
    let mut items = items.to_vec();
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
            .map(|s| json!({ "key": s.key, "tokens": s.tokens }))
            .collect(),
    )
}

fn event_value(event: &Event) -> Value {
    match &event.kind {
        EventKind::Cache { worker, epoch, op } => {
            let mut value = json!({
                "seq": event.seq, "tick": event.tick, "type": "cache",
                "op": op.kind().name(), "worker": worker, "epoch": epoch,
            });
            let fields = value.as_object_mut().expect("built as an object");
            match op {
                CacheOp::Store {
                    namespace,
                    segments,
                } => {
                    fields.insert("tenant".into(), json!(namespace.tenant));
                    fields.insert("model".into(), json!(namespace.model));
                    fields.insert("adapter".into(), json!(namespace.adapter));
                    fields.insert("segments".into(), segments_value(segments));
                }
                CacheOp::Evict { namespace, keys } => {
                    fields.insert("tenant".into(), json!(namespace.tenant));
                    fields.insert("model".into(), json!(namespace.model));
                    fields.insert("adapter".into(), json!(namespace.adapter));
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
            "seq": event.seq, "tick": event.tick, "type": "load", "worker": worker,
            "observed_tick": observed_tick, "queued_prefill": queued_prefill,
            "active_decode": active_decode,
        }),
        EventKind::Request(request) => json!({
            "seq": event.seq, "tick": event.tick, "type": "request", "id": request.id,
            "tenant": request.namespace.tenant, "model": request.namespace.model,
            "adapter": request.namespace.adapter, "prefix": segments_value(&request.prefix),
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
                "tenant": e.namespace.tenant, "model": e.namespace.model,
                "adapter": e.namespace.adapter, "key": e.key, "tokens": e.tokens,
            })
        })
        .collect();
    json!({
        "id": worker.id, "model": worker.model, "adapters": sorted_strings(&worker.adapters),
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
        .map(|g| json!({ "model": g.model, "adapter": g.adapter, "tenants": sorted_strings(&g.tenants) }))
        .collect();
    json!({
        "format": "kvroute-trace/1",
        "limits": trace.limits.name(),
        "policy": {
            "decode_weight_milli": trace.policy.decode_weight_milli,
            "imbalance_penalty_milli": trace.policy.imbalance_penalty_milli,
            "freshness_ticks": trace.policy.freshness_ticks,
            "max_queued_work": trace.policy.max_queued_work,
        },
        "sharing": sorted_by_canonical_bytes(grants),
    })
}

/// Hands the canonical trace bytes to `emit` piece by piece: one event or one worker at
/// a time, so a trace of millions of events is never held as one JSON tree (that tree
/// took about 40 bytes of memory per byte of trace). The members are written in JCS
/// order (`events` < `format` < `limits` < `policy` < `sharing` < `workers`), and each
/// piece is the JCS of its own value, which is what JCS writes inside the whole.
pub fn canonical_trace_pieces(trace: &Trace, mut emit: impl FnMut(&[u8])) {
    emit(br#"{"events":"#);
    emit_array(sorted_events(trace).into_iter().map(event_value), &mut emit);
    emit(b",");
    // The head's members sort between `events` and `workers`: write its object without
    // its braces.
    let head = jcs_bytes(&canonical_head_value(trace));
    emit(&head[1..head.len() - 1]);
    emit(br#","workers":"#);
    emit_array(
        sorted_workers(trace).into_iter().map(worker_value),
        &mut emit,
    );
    emit(b"}");
}

/// A JSON array written one element at a time.
fn emit_array(items: impl Iterator<Item = Value>, emit: &mut impl FnMut(&[u8])) {
    emit(b"[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            emit(b",");
        }
        emit(&jcs_bytes(&item));
    }
    emit(b"]");
}

/// The canonical trace bytes.
pub fn canonical_trace_bytes(trace: &Trace) -> Vec<u8> {
    let mut bytes = Vec::new();
    canonical_trace_pieces(trace, |piece| bytes.extend_from_slice(piece));
    bytes
}

/// The trace digest, `sha256:<hex>` of the canonical trace, hashed as it is produced.
pub fn trace_digest(trace: &Trace) -> String {
    let mut hasher = Sha256::new();
    canonical_trace_pieces(trace, |piece| hasher.update(piece));
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
        ] {
            let trace = crate::parse_trace(json.as_bytes()).unwrap();
            let whole = jcs_bytes(&canonical_trace_value(&trace));
            assert_eq!(canonical_trace_bytes(&trace), whole);
            assert_eq!(trace_digest(&trace), sha256_tag(&whole));
        }
    }
}
