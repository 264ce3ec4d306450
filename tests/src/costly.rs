//! Costly traces: documents built to make a replay do as much work as the limits allow
//! (or, before SPEC.md §1.3's work limits, far more), for measuring a replay's cost and
//! for the work-bound property test.
//!
//! The work of a request is its segments times the entries resident under their keys
//! (SPEC.md §1.5), so a costly trace puts many entries under one key on every worker,
//! under many namespaces, and sends requests whose prefixes repeat that key as
//! zero-token segments (a zero-token segment never stops the walk). A sharing grant with
//! many tenants makes every tenant-rule decision scan a long list.

use serde_json::{json, Value};

/// The dimensions of a costly trace. Every figure is a count of JSON items.
#[derive(Debug, Clone, Copy)]
pub struct CostlyShape {
    /// Workers, all serving model `m` (the profile's worker limit is the useful maximum).
    pub workers: usize,
    /// Initial cache entries per worker, all under key `k`, each under its own tenant.
    pub entries_per_worker: usize,
    /// Requests, each from its own tenant (so no tenant-rule verdict is reused).
    pub requests: usize,
    /// Zero-token segments of key `k` in every request's prefix.
    pub segments_per_request: usize,
    /// Sharing grants for `(m, base)`.
    pub grants: usize,
    /// Tenants listed in each grant (none of them the requests' or entries' tenants, so
    /// every lookup scans the whole list).
    pub tenants_per_grant: usize,
    /// Adapters each worker loads.
    pub adapters_per_worker: usize,
    /// Stores per worker after the requests' ticks, each of `segments_per_store` distinct
    /// keys, each after a `clear` so residency never builds up.
    pub stores_per_worker: usize,
    pub segments_per_store: usize,
}

impl CostlyShape {
    /// The costliest lab shape found before the work limits: about 1.35 MB of JSON inside
    /// the `lab` profile's original limits (64 requests, 8 workers, 1,024 events), costing
    /// seconds of CPU.
    pub const ISSUE_12_LAB: CostlyShape = CostlyShape {
        workers: 8,
        entries_per_worker: 1_000,
        requests: 64,
        segments_per_request: 400,
        grants: 1,
        tenants_per_grant: 20_000,
        adapters_per_worker: 0,
        stores_per_worker: 0,
        segments_per_store: 0,
    };

    /// The `lab` profile's work limits, each at its maximum (SPEC.md §1.3).
    pub const LAB_LIMITS: CostlyShape = CostlyShape {
        workers: 8,
        entries_per_worker: 256,
        requests: 64,
        segments_per_request: 32,
        grants: 8,
        tenants_per_grant: 8,
        adapters_per_worker: 8,
        // 8 workers × 2 stores × 2 events (store + clear) + 64 requests stays within
        // the 1,024 events.
        stores_per_worker: 2,
        segments_per_store: 32,
    };
}

/// A valid-JSON trace of `shape` under `"limits": "lab"`.
pub fn costly_trace(shape: &CostlyShape) -> Value {
    let workers: Vec<Value> = (0..shape.workers)
        .map(|w| {
            let cache: Vec<Value> = (0..shape.entries_per_worker)
                .map(|e| {
                    json!({ "tenant": format!("e{e}"), "model": "m", "adapter": "base",
                            "key": "k", "tokens": 1 })
                })
                .collect();
            let adapters: Vec<String> = (0..shape.adapters_per_worker)
                .map(|a| format!("a{a}"))
                .collect();
            json!({ "id": format!("w{w}"), "model": "m", "adapters": adapters,
                    "prefill_rate": 1000, "decode_rate": 100, "queued_prefill": 0,
                    "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": cache })
        })
        .collect();
    let sharing: Vec<Value> = (0..shape.grants)
        .map(|g| {
            let tenants: Vec<String> = (0..shape.tenants_per_grant)
                .map(|t| format!("g{g}t{t}"))
                .collect();
            json!({ "model": "m", "adapter": "base", "tenants": tenants })
        })
        .collect();
    let mut events = Vec::new();
    let mut seq = 0u64;
    for r in 0..shape.requests {
        seq += 1;
        let prefix: Vec<Value> = (0..shape.segments_per_request)
            .map(|_| json!({ "key": "k", "tokens": 0 }))
            .collect();
        events.push(
            json!({ "seq": seq, "tick": 1, "type": "request", "id": format!("r{r}"),
                            "tenant": format!("q{r}"), "model": "m", "adapter": "base",
                            "prefix": prefix, "prompt_tokens": 1, "decode_tokens": 1 }),
        );
    }
    for w in 0..shape.workers {
        for s in 0..shape.stores_per_worker {
            let segments: Vec<Value> = (0..shape.segments_per_store)
                .map(|k| json!({ "key": format!("s{s}k{k}"), "tokens": 1 }))
                .collect();
            // A clear first, so the store never adds to the initial entries.
            let epoch = 2 * s as u64 + 1;
            seq += 1;
            events.push(
                json!({ "seq": seq, "tick": 2, "type": "cache", "op": "clear",
                                "worker": format!("w{w}"), "epoch": epoch }),
            );
            seq += 1;
            events.push(
                json!({ "seq": seq, "tick": 2, "type": "cache", "op": "store",
                                "worker": format!("w{w}"), "epoch": epoch + 1, "tenant": "e0",
                                "model": "m", "adapter": "base", "segments": segments }),
            );
        }
    }
    json!({ "format": "kvroute-trace/1", "limits": "lab", "sharing": sharing,
            "workers": workers, "events": events })
}

/// How [`wide_trace_bytes`] spreads its workers' cached sizes and queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideShape {
    /// Worker `k` caches `k + 1` tokens of the requests' one key and starts idle, so
    /// every reuse differs and the first request's rows form one dominance chain.
    DistinctReuse,
    /// Worker `k` caches `1 + 256·(k mod 8)` tokens and starts with `64·(k/8 mod 4)`
    /// tokens queued: 32 distinct (reuse, after) points, each shared by `workers / 32`
    /// workers, so most pairs are exact ties (no dominance) or tie on one figure only.
    TiedReuse,
}

impl WideShape {
    pub const ALL: [WideShape; 2] = [WideShape::DistinctReuse, WideShape::TiedReuse];

    pub fn name(self) -> &'static str {
        match self {
            WideShape::DistinctReuse => "distinct reuse",
            WideShape::TiedReuse => "tied reuse",
        }
    }
}

/// A `scale` trace of `workers` workers with one cache entry each (all under key `k0`)
/// and `requests` one-segment requests for that key, one per tick: the case where
/// dominance, not the reuse walk, is most of a decision's work. Written as
/// text, about 230 bytes per worker (about 1 MB at 4,096 workers); never committed.
pub fn wide_trace_bytes(workers: usize, requests: usize, shape: WideShape) -> Vec<u8> {
    use std::io::Write;
    // Every prompt is longer than any cached entry, so reuse is the cached size.
    let prompt_tokens = workers.max(2048);
    let width = workers.saturating_sub(1).to_string().len();
    let mut out = Vec::with_capacity(240 * workers + 200 * requests + 100);
    out.extend_from_slice(br#"{"format":"kvroute-trace/1","limits":"scale","workers":["#);
    for k in 0..workers {
        if k > 0 {
            out.push(b',');
        }
        let (tokens, queued) = match shape {
            WideShape::DistinctReuse => (k + 1, 0),
            WideShape::TiedReuse => (1 + 256 * (k % 8), 64 * ((k / 8) % 4)),
        };
        write!(
            out,
            r#"{{"id":"w{k:0width$}","model":"m","adapters":[],"prefill_rate":16,"decode_rate":4,"queued_prefill":{queued},"active_decode":0,"observed_tick":0,"epoch":0,"cache":[{{"tenant":"t","model":"m","adapter":"base","key":"k0","tokens":{tokens}}}]}}"#
        )
        .expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(br#"],"events":["#);
    for r in 0..requests {
        if r > 0 {
            out.push(b',');
        }
        write!(
            out,
            r#"{{"seq":{},"tick":{r},"type":"request","id":"r{r}","tenant":"t","model":"m","adapter":"base","prefix":[{{"key":"k0","tokens":{prompt_tokens}}}],"prompt_tokens":{prompt_tokens},"decode_tokens":1}}"#,
            r + 1
        )
        .expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(b"]}");
    out
}
