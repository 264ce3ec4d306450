//! Canonical bytes and digests (SPEC.md §6.1). The canonical trace is rebuilt from the
//! typed trace with every default written out, and the arrays whose order means nothing
//! sorted, so that reordering any such input array never changes `trace_digest`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::model::{EventKind, Segment, Trace};

/// RFC 8785 (JCS) bytes of a value. serde_json_canonicalizer only fails on values a
/// `serde_json::Value` cannot hold (non-finite numbers), which the oracle never builds.
pub fn jcs(value: &Value) -> Result<Vec<u8>, String> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| format!("canonicalization failed: {e}"))
}

/// `"sha256:" + lowercase hex(SHA-256(bytes))`.
pub fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut text = String::from("sha256:");
    for byte in hash.iter() {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

fn optional(value: Option<u64>) -> Value {
    match value {
        Some(v) => json!(v),
        None => Value::Null,
    }
}

fn sorted_strings(items: &[String]) -> Vec<String> {
    let mut items = items.to_vec();
    // `String` ordering is UTF-8 byte order, as SPEC's "byte order" requires.
    items.sort();
    items
}

/// Sorts values by their own canonical bytes (cache entries, sharing grants).
fn sorted_by_canonical_bytes(values: Vec<Value>) -> Result<Vec<Value>, String> {
    let mut keyed = Vec::with_capacity(values.len());
    for value in values {
        keyed.push((jcs(&value)?, value));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(keyed.into_iter().map(|(_, v)| v).collect())
}

fn segments(items: &[Segment]) -> Value {
    // Segment order is meaningful (store: last wins; prefix: walk order): kept as given.
    Value::Array(
        items
            .iter()
            .map(|s| json!({ "key": s.key, "tokens": s.tokens }))
            .collect(),
    )
}

/// The canonical trace as a JSON value.
pub fn canonical_trace(trace: &Trace) -> Result<Value, String> {
    let policy = json!({
        "decode_weight_milli": trace.policy.decode_weight_milli,
        "imbalance_penalty_milli": trace.policy.imbalance_penalty_milli,
        "freshness_ticks": optional(trace.policy.freshness_ticks),
        "max_queued_work": optional(trace.policy.max_queued_work),
    });

    // Grants: tenants sorted first, then the grants by their canonical bytes.
    let grants: Vec<Value> = trace
        .sharing
        .iter()
        .map(|g| {
            json!({
                "model": g.model,
                "adapter": g.adapter,
                "tenants": sorted_strings(&g.tenants),
            })
        })
        .collect();
    let grants = sorted_by_canonical_bytes(grants)?;

    // Workers by id (unique after validation), each with sorted adapters and cache.
    let mut workers: Vec<&crate::model::Worker> = trace.workers.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    let mut worker_values = Vec::with_capacity(workers.len());
    for w in workers {
        let cache: Vec<Value> = w
            .cache
            .iter()
            .map(|e| {
                json!({
                    "tenant": e.tenant,
                    "model": e.model,
                    "adapter": e.adapter,
                    "key": e.key,
                    "tokens": e.tokens,
                })
            })
            .collect();
        worker_values.push(json!({
            "id": w.id,
            "model": w.model,
            "adapters": sorted_strings(&w.adapters),
            "prefill_rate": w.prefill_rate,
            "decode_rate": w.decode_rate,
            "queued_prefill": w.queued_prefill,
            "active_decode": w.active_decode,
            "observed_tick": w.observed_tick,
            "epoch": w.epoch,
            "cache": sorted_by_canonical_bytes(cache)?,
        }));
    }

    // Events by (tick, seq); seq is unique, so this order is total.
    let mut events: Vec<&crate::model::Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    let event_values: Vec<Value> = events
        .into_iter()
        .map(|e| match &e.kind {
            EventKind::Store {
                worker,
                epoch,
                tenant,
                model,
                adapter,
                segments: items,
            } => json!({
                "seq": e.seq, "tick": e.tick, "type": "cache", "op": "store",
                "worker": worker, "epoch": epoch,
                "tenant": tenant, "model": model, "adapter": adapter,
                "segments": segments(items),
            }),
            EventKind::Evict {
                worker,
                epoch,
                tenant,
                model,
                adapter,
                keys,
            } => json!({
                "seq": e.seq, "tick": e.tick, "type": "cache", "op": "evict",
                "worker": worker, "epoch": epoch,
                "tenant": tenant, "model": model, "adapter": adapter,
                "keys": sorted_strings(keys),
            }),
            EventKind::Clear { worker, epoch } => json!({
                "seq": e.seq, "tick": e.tick, "type": "cache", "op": "clear",
                "worker": worker, "epoch": epoch,
            }),
            EventKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => json!({
                "seq": e.seq, "tick": e.tick, "type": "load",
                "worker": worker, "observed_tick": observed_tick,
                "queued_prefill": queued_prefill, "active_decode": active_decode,
            }),
            EventKind::Request {
                id,
                tenant,
                model,
                adapter,
                prefix,
                prompt_tokens,
                decode_tokens,
            } => json!({
                "seq": e.seq, "tick": e.tick, "type": "request",
                "id": id, "tenant": tenant, "model": model, "adapter": adapter,
                "prefix": segments(prefix),
                "prompt_tokens": prompt_tokens, "decode_tokens": decode_tokens,
            }),
        })
        .collect();

    Ok(json!({
        "format": "kvroute-trace/1",
        "limits": trace.limits.name(),
        "policy": policy,
        "sharing": grants,
        "workers": worker_values,
        "events": event_values,
    }))
}
