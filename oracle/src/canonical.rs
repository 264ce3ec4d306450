//! Canonical bytes and digests (SPEC.md §6.1). The canonical trace is rebuilt from the
//! typed trace with every default written out, and the arrays whose order means nothing
//! sorted, so that reordering any such input array never changes `trace_digest`. The
//! generic canonicalizer (`jcs`) is the check the serde-written bytes are held to.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::{EpochNumbering, EventKind, Segment, StaleRule, Trace};

/// RFC 8785 (JCS) bytes of a value. serde_json_canonicalizer only fails on values a
/// `serde_json::Value` cannot hold (non-finite numbers), which the oracle never builds.
/// Besides the tests, the small `kvroute-simulate/1` document is written through it.
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

// ---------------------------------------------------------------------------------
// The canonical trace as bytes, through serde: each object is a derived struct
// with its fields declared in JCS member order, written by serde_json's compact
// writer (which formats integers and escapes strings exactly as JCS does). Arrays
// whose order means nothing are sorted first, cache entries and grants by their own
// serialised bytes.

use serde::Serialize;

#[derive(Serialize)]
struct SegmentOut<'a> {
    key: &'a str,
    tokens: u64,
}

fn segments_out(items: &[Segment]) -> Vec<SegmentOut<'_>> {
    items
        .iter()
        .map(|s| SegmentOut {
            key: &s.key,
            tokens: s.tokens,
        })
        .collect()
}

fn sorted_refs(items: &[String]) -> Vec<&str> {
    let mut items: Vec<&str> = items.iter().map(String::as_str).collect();
    items.sort();
    items
}

/// Items in the order of their own serialised bytes.
fn sorted_by_bytes<T: Serialize>(items: Vec<T>) -> Result<Vec<T>, String> {
    let mut keyed = Vec::with_capacity(items.len());
    for item in items {
        let key = serde_json::to_vec(&item).map_err(|e| e.to_string())?;
        keyed.push((key, item));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(keyed.into_iter().map(|(_, item)| item).collect())
}

/// The canonical `policy`: the four version-1 members always (`null` where unset), the
/// four later ones only off their defaults (§6.1), so a default trace keeps its digest.
#[derive(Serialize)]
struct PolicyOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    cold_reserve_milli: Option<u64>,
    decode_weight_milli: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamo_block_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    epochs: Option<&'static str>,
    freshness_ticks: Option<u64>,
    imbalance_penalty_milli: u64,
    max_queued_work: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stale_rule: Option<&'static str>,
}

#[derive(Serialize)]
struct GrantOut<'a> {
    adapter: &'a str,
    model: &'a str,
    tenants: Vec<&'a str>,
}

#[derive(Serialize)]
struct EntryOut<'a> {
    adapter: &'a str,
    key: &'a str,
    model: &'a str,
    tenant: &'a str,
    tokens: u64,
}

#[derive(Serialize)]
struct WorkerOut<'a> {
    active_decode: u64,
    adapters: Vec<&'a str>,
    cache: Vec<EntryOut<'a>>,
    decode_rate: u64,
    epoch: u64,
    id: &'a str,
    model: &'a str,
    observed_tick: u64,
    prefill_rate: u64,
    queued_prefill: u64,
}

/// One event; untagged, so each variant is written as its own struct.
#[derive(Serialize)]
#[serde(untagged)]
enum EventOut<'a> {
    Store {
        adapter: &'a str,
        epoch: u64,
        model: &'a str,
        op: &'static str,
        segments: Vec<SegmentOut<'a>>,
        seq: u64,
        tenant: &'a str,
        tick: u64,
        r#type: &'static str,
        worker: &'a str,
    },
    Evict {
        adapter: &'a str,
        epoch: u64,
        keys: Vec<&'a str>,
        model: &'a str,
        op: &'static str,
        seq: u64,
        tenant: &'a str,
        tick: u64,
        r#type: &'static str,
        worker: &'a str,
    },
    Clear {
        epoch: u64,
        op: &'static str,
        seq: u64,
        tick: u64,
        r#type: &'static str,
        worker: &'a str,
    },
    Load {
        active_decode: u64,
        observed_tick: u64,
        queued_prefill: u64,
        seq: u64,
        tick: u64,
        r#type: &'static str,
        worker: &'a str,
    },
    Request {
        adapter: &'a str,
        decode_tokens: u64,
        id: &'a str,
        model: &'a str,
        prefix: Vec<SegmentOut<'a>>,
        prompt_tokens: u64,
        seq: u64,
        tenant: &'a str,
        tick: u64,
        r#type: &'static str,
    },
}

fn event_out(e: &crate::model::Event) -> EventOut<'_> {
    let (seq, tick) = (e.seq, e.tick);
    match &e.kind {
        EventKind::Store {
            worker,
            epoch,
            tenant,
            model,
            adapter,
            segments: items,
        } => EventOut::Store {
            adapter,
            epoch: *epoch,
            model,
            op: "store",
            segments: segments_out(items),
            seq,
            tenant,
            tick,
            r#type: "cache",
            worker,
        },
        EventKind::Evict {
            worker,
            epoch,
            tenant,
            model,
            adapter,
            keys,
        } => EventOut::Evict {
            adapter,
            epoch: *epoch,
            keys: sorted_refs(keys),
            model,
            op: "evict",
            seq,
            tenant,
            tick,
            r#type: "cache",
            worker,
        },
        EventKind::Clear { worker, epoch } => EventOut::Clear {
            epoch: *epoch,
            op: "clear",
            seq,
            tick,
            r#type: "cache",
            worker,
        },
        EventKind::Load {
            worker,
            observed_tick,
            queued_prefill,
            active_decode,
        } => EventOut::Load {
            active_decode: *active_decode,
            observed_tick: *observed_tick,
            queued_prefill: *queued_prefill,
            seq,
            tick,
            r#type: "load",
            worker,
        },
        EventKind::Request {
            id,
            tenant,
            model,
            adapter,
            prefix,
            prompt_tokens,
            decode_tokens,
        } => EventOut::Request {
            adapter,
            decode_tokens: *decode_tokens,
            id,
            model,
            prefix: segments_out(prefix),
            prompt_tokens: *prompt_tokens,
            seq,
            tenant,
            tick,
            r#type: "request",
        },
    }
}

#[derive(Serialize)]
struct TraceOut<'a> {
    events: Vec<EventOut<'a>>,
    format: &'static str,
    limits: &'static str,
    policy: PolicyOut,
    sharing: Vec<GrantOut<'a>>,
    workers: Vec<WorkerOut<'a>>,
}

/// The canonical trace bytes (what `trace_digest` hashes).
pub fn canonical_trace_bytes(trace: &Trace) -> Result<Vec<u8>, String> {
    let grants = trace
        .sharing
        .iter()
        .map(|g| GrantOut {
            adapter: &g.adapter,
            model: &g.model,
            tenants: sorted_refs(&g.tenants),
        })
        .collect();
    let mut workers: Vec<&crate::model::Worker> = trace.workers.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    let mut worker_outs = Vec::with_capacity(workers.len());
    for w in workers {
        let cache = w
            .cache
            .iter()
            .map(|e| EntryOut {
                adapter: &e.adapter,
                key: &e.key,
                model: &e.model,
                tenant: &e.tenant,
                tokens: e.tokens,
            })
            .collect();
        worker_outs.push(WorkerOut {
            active_decode: w.active_decode,
            adapters: sorted_refs(&w.adapters),
            cache: sorted_by_bytes(cache)?,
            decode_rate: w.decode_rate,
            epoch: w.epoch,
            id: &w.id,
            model: &w.model,
            observed_tick: w.observed_tick,
            prefill_rate: w.prefill_rate,
            queued_prefill: w.queued_prefill,
        });
    }
    let mut events: Vec<&crate::model::Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    let out = TraceOut {
        events: events.into_iter().map(event_out).collect(),
        format: "kvroute-trace/1",
        limits: trace.limits.name(),
        policy: PolicyOut {
            cold_reserve_milli: trace.policy.cold_reserve_milli,
            decode_weight_milli: trace.policy.decode_weight_milli,
            dynamo_block_tokens: trace.policy.dynamo_block_tokens,
            epochs: match trace.policy.epochs {
                EpochNumbering::Any => None,
                numbering => Some(numbering.name()),
            },
            freshness_ticks: trace.policy.freshness_ticks,
            imbalance_penalty_milli: trace.policy.imbalance_penalty_milli,
            max_queued_work: trace.policy.max_queued_work,
            stale_rule: match trace.policy.stale_rule {
                StaleRule::WorkerEpoch => None,
                rule => Some(rule.name()),
            },
        },
        sharing: sorted_by_bytes(grants)?,
        workers: worker_outs,
    };
    serde_json::to_vec(&out).map_err(|e| format!("serialization failed: {e}"))
}
