//! SPEC §6.1, the canonical trace: the trace with its defaults filled in (`limits`,
//! `sharing`, the four version-1 `policy` members, `null` where unset; the four later
//! members only off their defaults), and the arrays whose order means nothing sorted:
//! workers by id, adapters and tenants and evict keys by byte order, cache entries and
//! grants by their own canonical bytes, events by `(tick, seq)`. Built as a JSON tree and
//! written by the RFC 8785 writer of `jcs`, so its bytes are canonical by construction.

use serde_json::Value;

use crate::jcs::{self, Json};
use crate::model::{EpochNumbering, Event, EventKind, Segment, StaleRule, Trace, Worker};

/// RFC 8785 bytes of a `serde_json::Value`, through the canonicalizer crate: only for
/// the small `kvroute-simulate/1` document (§11.1).
pub fn jcs(value: &Value) -> Result<Vec<u8>, String> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| format!("canonicalization failed: {e}"))
}

pub use crate::jcs::digest;

fn segments(items: &[Segment]) -> Json<'_> {
    Json::Array(
        items
            .iter()
            .map(|s| {
                Json::Object(vec![
                    ("key", Json::Str(&s.key)),
                    ("tokens", Json::Int(s.tokens)),
                ])
            })
            .collect(),
    )
}

fn policy(trace: &Trace) -> Json<'static> {
    let p = &trace.policy;
    let mut members = vec![
        ("decode_weight_milli", Json::Int(p.decode_weight_milli)),
        (
            "imbalance_penalty_milli",
            Json::Int(p.imbalance_penalty_milli),
        ),
        ("freshness_ticks", Json::opt_int(p.freshness_ticks)),
        ("max_queued_work", Json::opt_int(p.max_queued_work)),
    ];
    if p.stale_rule != StaleRule::WorkerEpoch {
        members.push(("stale_rule", Json::Str(p.stale_rule.name())));
    }
    if p.epochs != EpochNumbering::Any {
        members.push(("epochs", Json::Str(p.epochs.name())));
    }
    if let Some(reserve) = p.cold_reserve_milli {
        members.push(("cold_reserve_milli", Json::Int(reserve)));
    }
    if let Some(b) = p.dynamo_block_tokens {
        members.push(("dynamo_block_tokens", Json::Int(b)));
    }
    Json::Object(members)
}

fn worker(w: &Worker) -> Json<'_> {
    let cache = w
        .cache
        .iter()
        .map(|e| {
            Json::Object(vec![
                ("tenant", Json::Str(&e.tenant)),
                ("model", Json::Str(&e.model)),
                ("adapter", Json::Str(&e.adapter)),
                ("key", Json::Str(&e.key)),
                ("tokens", Json::Int(e.tokens)),
            ])
        })
        .collect();
    Json::Object(vec![
        ("id", Json::Str(&w.id)),
        ("model", Json::Str(&w.model)),
        ("adapters", Json::sorted_strs(&w.adapters)),
        ("prefill_rate", Json::Int(w.prefill_rate)),
        ("decode_rate", Json::Int(w.decode_rate)),
        ("queued_prefill", Json::Int(w.queued_prefill)),
        ("active_decode", Json::Int(w.active_decode)),
        ("observed_tick", Json::Int(w.observed_tick)),
        ("epoch", Json::Int(w.epoch)),
        ("cache", Json::sorted_by_bytes(cache)),
    ])
}

/// The members of an event of each kind (§1), `seq` and `tick` included.
fn event(e: &Event) -> Json<'_> {
    let mut members = vec![("seq", Json::Int(e.seq)), ("tick", Json::Int(e.tick))];
    let cache = |worker, epoch: &u64, op| {
        vec![
            ("type", Json::Str("cache")),
            ("op", Json::Str(op)),
            ("worker", Json::Str(worker)),
            ("epoch", Json::Int(*epoch)),
        ]
    };
    let namespace = |tenant, model, adapter| {
        vec![
            ("tenant", Json::Str(tenant)),
            ("model", Json::Str(model)),
            ("adapter", Json::Str(adapter)),
        ]
    };
    match &e.kind {
        EventKind::Store {
            worker,
            epoch,
            tenant,
            model,
            adapter,
            segments: items,
        } => {
            members.extend(cache(worker, epoch, "store"));
            members.extend(namespace(tenant, model, adapter));
            members.push(("segments", segments(items)));
        }
        EventKind::Evict {
            worker,
            epoch,
            tenant,
            model,
            adapter,
            keys,
        } => {
            members.extend(cache(worker, epoch, "evict"));
            members.extend(namespace(tenant, model, adapter));
            members.push(("keys", Json::sorted_strs(keys)));
        }
        EventKind::Clear { worker, epoch } => members.extend(cache(worker, epoch, "clear")),
        EventKind::Load {
            worker,
            observed_tick,
            queued_prefill,
            active_decode,
        } => members.extend([
            ("type", Json::Str("load")),
            ("worker", Json::Str(worker)),
            ("observed_tick", Json::Int(*observed_tick)),
            ("queued_prefill", Json::Int(*queued_prefill)),
            ("active_decode", Json::Int(*active_decode)),
        ]),
        EventKind::Request {
            id,
            tenant,
            model,
            adapter,
            prefix,
            prompt_tokens,
            decode_tokens,
        } => {
            members.push(("type", Json::Str("request")));
            members.push(("id", Json::Str(id)));
            members.extend(namespace(tenant, model, adapter));
            members.push(("prefix", segments(prefix)));
            members.push(("prompt_tokens", Json::Int(*prompt_tokens)));
            members.push(("decode_tokens", Json::Int(*decode_tokens)));
        }
    }
    Json::Object(members)
}

/// The canonical trace bytes (what `trace_digest` hashes).
pub fn canonical_trace_bytes(trace: &Trace) -> Result<Vec<u8>, String> {
    let mut workers: Vec<&Worker> = trace.workers.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    let mut events: Vec<&Event> = trace.events.iter().collect();
    events.sort_by_key(|e| (e.tick, e.seq));
    let grants = trace
        .sharing
        .iter()
        .map(|g| {
            Json::Object(vec![
                ("model", Json::Str(&g.model)),
                ("adapter", Json::Str(&g.adapter)),
                ("tenants", Json::sorted_strs(&g.tenants)),
            ])
        })
        .collect();
    let rest = Json::Object(vec![
        ("format", Json::Str("kvroute-trace/1")),
        ("limits", Json::Str(trace.limits.name())),
        ("policy", policy(trace)),
        ("sharing", Json::sorted_by_bytes(grants)),
        (
            "workers",
            Json::Array(workers.into_iter().map(worker).collect()),
        ),
    ]);
    // `events` sorts before every other member name ("e" < "f", "l", "p", "s", "w"),
    // so the canonical object is `{"events":[...],` and then the other members as the
    // writer writes them; the events are written one at a time rather than as one tree
    // of the whole array (which would be several times the trace's size).
    let mut out = b"{\"events\":[".to_vec();
    for (i, e) in events.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        jcs::write(&event(e), &mut out);
    }
    out.extend_from_slice(b"],");
    let rest = jcs::to_bytes(&rest);
    out.extend_from_slice(rest.get(1..).unwrap_or_default());
    Ok(out)
}
