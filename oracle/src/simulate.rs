//! The naive reference for SPEC.md §11 and §11.1 (`kvroute simulate`, the closed-loop
//! engine model) and §14.4 (the completion records of `--completions-out`, AIPerf's
//! layout here and Dynamo's of §14.4.1 in [`dynamo_layout`]),
//! written from SPEC.md alone, without looking at kvroute-core. Per
//! policy, a fresh router run ([`Router`], the same code as the open-loop replay) is
//! fed one event at a time, interleaved with a plain model of each worker's engine: an
//! LRU cache kept as a `Vec` of stamped entries and scanned linearly, a FIFO prefill
//! clock, and the cache events each prefill completion publishes. Nothing is indexed or
//! cached; every lookup is a scan.
//!
//! The loop, at every step, takes the earliest pending prefill completion if its tick is
//! not after the next router event's tick (completions first, §11 "Order"); otherwise
//! the next router event, in `(tick, seq)` order among the remaining requests and the
//! generated events not yet delivered. It ends when nothing is pending. Completions at
//! the same tick go in admission order (so a prefill of 0 ticks completes before the
//! next router event at its own tick).
//!
//! Readings where SPEC is silent, chosen here:
//! - initial cache entries are stamped in namespace-key order (tenant, model, adapter,
//!   key), the first the least recently used; entries of 0 tokens are no entries (§3);
//! - prefix segments of 0 tokens are not stored and take no room, not even a block;
//! - a key repeated within one prefix is stored in segment order, the last one winning,
//!   as the published store is applied (§1.2); each segment that was new or changed
//!   size when stored is published;
//! - `--workers` copies keep the first worker's model, adapters, rates, `epoch` and
//!   `observed_tick`; generated seqs start at the largest request seq plus one;
//! - a lost event (`--loss`) takes its seq as well as its epoch (generated events "lost
//!   ones included" get seqs in generation order), so the generated trace has a hole in
//!   its seqs where it was;
//! - `--loss` is checked before the trace is read, as a usage error;
//! - §14.4: `t` is the request's own tick (it is placed when it arrives), `done` the
//!   tick its prefill completes at as admitted above, the decode rate the chosen
//!   worker's (a `--workers` copy's is the first worker's); the nanosecond figures are
//!   written exactly even past 2^64 (SPEC bounds neither); a `--ticks-per-ms` outside
//!   1 to 1,000,000 is refused with a message of the oracle's own wording;
//! - `--worker-names dynamo` without `--workers` is refused before the trace is read,
//!   with a message of the oracle's own wording (SPEC calls it bad usage only).

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::canonical::{canonical_trace_bytes, digest, jcs};
use crate::model::{EpochNumbering, Event, EventKind, Profile, Segment, StaleRule, Trace, Worker};
use crate::policy_kind::PolicyKind;
use crate::run::{in_order, Outcome, Router};
use crate::validate;

mod dynamo_layout;

pub use dynamo_layout::{dynamo_line, dynamo_worker_numbers, DYNAMO_MS_MAX};

/// The engine cache's capacity: resident tokens (`--cache-tokens`) or entries
/// (`--cache-blocks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimCache {
    Tokens(u64),
    Blocks(u64),
}

/// How `--workers N` names its copies (`--worker-names`, SPEC §14.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimWorkerNames {
    /// §10.1's `w0` … `w<N-1>`, zero-padded to the digits of N − 1.
    #[default]
    W,
    /// `dynamo|0|dp0` … `dynamo|<N-1>|dp0`, as §13.7 names Dynamo's workers.
    Dynamo,
}

/// The layout of the completion records (`--completions-format`, SPEC §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SimLayout {
    /// AIPerf's profile export records (§14.4).
    #[default]
    Aiperf,
    /// Dynamo's `request_end` records in the file sink's wrapper (§14.4.1).
    Dynamo,
}

/// The options of `kvroute simulate` (SPEC §7, §11).
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// `--workers N`: replace the workers by N copies of the first one (1 to 4,096).
    pub workers: Option<u32>,
    pub cache: SimCache,
    pub lag_ticks: u64,
    pub jitter_ticks: u64,
    pub seed: u64,
    /// `--loss P`: per mille of published events lost on the bus (0 to 1,000).
    pub loss_per_mille: u64,
    /// `--stale-rule R`: replaces the trace's `policy.stale_rule` when given.
    pub stale_rule: Option<StaleRule>,
    /// `--epochs E`: replaces the trace's `policy.epochs` when given.
    pub epochs: Option<EpochNumbering>,
    /// `--worker-names`: how `--workers` names its copies; `Dynamo` needs `workers`.
    pub worker_names: SimWorkerNames,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            workers: None,
            cache: SimCache::Tokens(262_144),
            lag_ticks: 10,
            jitter_ticks: 0,
            seed: 0,
            loss_per_mille: 0,
            stale_rule: None,
            epochs: None,
            worker_names: SimWorkerNames::W,
        }
    }
}

/// What one simulation produces.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// The §11.1 `kvroute-simulate/1` document: canonical JSON bytes, WITHOUT the
    /// trailing newline.
    pub result: Vec<u8>,
    /// Per policy in receipt order: (policy name, canonical bytes of the generated
    /// trace — simulated trace plus generated events, as `--events-out` writes it).
    pub generated_traces: Vec<(String, Vec<u8>)>,
}

/// The most workers `--workers` accepts: the `scale` limit (§1.3).
const WORKERS_MAX: u32 = 4_096;

/// The largest `--loss`: every published event lost.
const LOSS_PER_MILLE_MAX: u64 = 1_000;

/// Validates the trace, builds the simulated trace and runs the closed loop once per
/// policy. Err: the validation error lines joined by `\n`, or a bad option.
pub fn simulate(trace_json: &[u8], options: &SimOptions) -> Result<SimOutcome, String> {
    simulate_with_completions(trace_json, options).map(|(outcome, _)| outcome)
}

/// [`simulate`], and the completion records of every policy's closed loop (SPEC §14.4),
/// kept in ticks so that [`SimCompletions::jsonl`] can write them at any
/// `--ticks-per-ms`.
pub fn simulate_with_completions(
    trace_json: &[u8],
    options: &SimOptions,
) -> Result<(SimOutcome, SimCompletions), String> {
    if options.loss_per_mille > LOSS_PER_MILLE_MAX {
        return Err(format!(
            "kvroute simulate: --loss {}: expected a per-mille integer from 0 to 1000",
            options.loss_per_mille
        ));
    }
    if options.worker_names == SimWorkerNames::Dynamo && options.workers.is_none() {
        return Err(
            "kvroute simulate: --worker-names dynamo: names the copies of --workers N, so it needs --workers"
                .to_owned(),
        );
    }
    let input = validate::check(trace_json).map_err(|lines| lines.join("\n"))?;
    let sim = simulated_trace(&input, options)?;
    let trace_digest = digest(&canonical_bytes(&sim)?);

    let mut runs = Vec::new();
    let mut generated_traces = Vec::new();
    let mut workers: Vec<String> = sim.workers.iter().map(|w| w.id.clone()).collect();
    workers.sort();
    let mut completions = SimCompletions {
        workers,
        runs: Vec::new(),
    };
    for policy in PolicyKind::FOUR {
        let mut outcome = closed_loop(&sim, policy, options);
        completions.runs.push((
            policy.name().to_owned(),
            std::mem::take(&mut outcome.completions),
        ));
        let mut generated = sim.clone();
        generated
            .events
            .extend(std::mem::take(&mut outcome.generated));
        let bytes = canonical_bytes(&generated)?;
        runs.push(run_entry(policy, &outcome, &bytes));
        generated_traces.push((policy.name().to_owned(), bytes));
    }

    let result = json!({
        "format": "kvroute-simulate/1",
        "options": options_entry(options),
        "trace_digest": trace_digest,
        "runs": runs,
    });
    Ok((
        SimOutcome {
            result: jcs(&result)?,
            generated_traces,
        },
        completions,
    ))
}

/// One policy's entry of §11.1's `runs`: its router metrics, the engine model's counts
/// and the digest of its generated trace's canonical `bytes`.
fn run_entry(policy: PolicyKind, outcome: &LoopOutcome, bytes: &[u8]) -> Value {
    let m = &outcome.metrics;
    let hit_pm = if m.routed == 0 {
        0
    } else {
        // Floor; 128-bit so that no count can overflow the product.
        (1000 * u128::from(m.cache_hits) / u128::from(m.routed)) as u64
    };
    json!({
        "policy": policy.name(),
        "routed": m.routed,
        "hit_pm": hit_pm,
        "reused": m.reused_tokens,
        "recomputed": m.recomputed_tokens,
        "skew_m": m.load_skew_milli,
        "lat_mean_m": m.latency_proxy_mean_milli,
        "lat_p95_m": m.latency_proxy_p95_milli,
        "stale": m.stale_event_rejections,
        "stores": outcome.stores,
        "evicts": outcome.evicts,
        "lost": outcome.lost,
        "resyncs": outcome.resyncs,
        "phantom": outcome.phantom,
        "missed": outcome.missed,
        "events_digest": digest(bytes),
    })
}

/// §11.1's `options`: the engine and bus options as given, `null` where not given.
fn options_entry(options: &SimOptions) -> Value {
    let (cache_tokens, cache_blocks) = match options.cache {
        SimCache::Tokens(t) => (json!(t), Value::Null),
        SimCache::Blocks(b) => (Value::Null, json!(b)),
    };
    json!({
        "cache_blocks": cache_blocks,
        "cache_tokens": cache_tokens,
        "jitter_ticks": options.jitter_ticks,
        "lag_ticks": options.lag_ticks,
        "loss_per_mille": options.loss_per_mille,
        "seed": options.seed,
        "workers": match options.workers { Some(n) => json!(n), None => Value::Null },
    })
}

/// [`simulate`]'s closed loops written as SPEC §14.4's completion files at
/// `ticks_per_ms` ticks per millisecond: per policy in receipt order, (policy name,
/// bytes of `<policy>.completions.jsonl`).
pub fn simulate_completions(
    trace_json: &[u8],
    options: &SimOptions,
    ticks_per_ms: u64,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    let (_, completions) = simulate_with_completions(trace_json, options)?;
    completions.jsonl(ticks_per_ms)
}

/// The largest `--ticks-per-ms` (SPEC §14.4).
pub const TICKS_PER_MS_MAX: u64 = 1_000_000;

/// The largest nanosecond figure a completion record carries, 10^19 − 1 (the largest
/// §14.1 reads): a figure whose exact value would pass it is written as it (SPEC §14.4).
pub const NS_MAX: u128 = 9_999_999_999_999_999_999;

/// One routed request of a closed loop, as the engine model saw it (SPEC §14.4): the
/// figures its completion record is computed from, in ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionRecord {
    /// The request's id (`x_request_id`).
    pub request: String,
    /// The worker it was placed on.
    pub worker: String,
    /// `t`: the tick it arrived (and was placed) at.
    pub arrival_tick: u64,
    /// `done`: the tick its prefill completed at in the engine model (§11 *Prefill*).
    pub prefill_done_tick: u64,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
    /// The chosen worker's `decode_rate` (at least 1).
    pub decode_rate: u64,
    /// What the chosen worker's engine really reused for the request: the *Prefill*
    /// walk of §11 on its cache at placement, before admission, capped at
    /// `prompt_tokens` (§11.1's `held`; Dynamo's `cached_tokens`, §14.4.1).
    pub held: u64,
}

/// The completion records of every policy's closed loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimCompletions {
    /// Every worker id of the simulated trace, served or not, in id byte order: the
    /// Dynamo layout refuses the whole run when one of them cannot be named (§14.4.1).
    pub workers: Vec<String>,
    /// Per policy in receipt order: (policy name, its routed requests in routing order).
    pub runs: Vec<(String, Vec<CompletionRecord>)>,
}

impl SimCompletions {
    /// [`SimCompletions::jsonl_in`] in AIPerf's layout.
    pub fn jsonl(&self, ticks_per_ms: u64) -> Result<Vec<(String, Vec<u8>)>, String> {
        self.jsonl_in(ticks_per_ms, SimLayout::Aiperf)
    }

    /// Per policy in receipt order: (policy name, the bytes of
    /// `<policy>.completions.jsonl` in `layout`). Err when `ticks_per_ms` is outside 1
    /// to 1,000,000, or, in Dynamo's layout, with §14.4.1's message when a worker of
    /// the simulated trace is not named `dynamo|<I>|dp<R>` (the first in id byte order).
    pub fn jsonl_in(
        &self,
        ticks_per_ms: u64,
        layout: SimLayout,
    ) -> Result<Vec<(String, Vec<u8>)>, String> {
        check_ticks_per_ms(ticks_per_ms)?;
        if layout == SimLayout::Dynamo {
            let mut ids: Vec<&String> = self.workers.iter().collect();
            ids.sort();
            if let Some(id) = ids
                .into_iter()
                .find(|id| dynamo_worker_numbers(id).is_none())
            {
                return Err(dynamo_layout::unnamed_worker(id));
            }
        }
        let mut files = Vec::new();
        for (policy, records) in &self.runs {
            let mut bytes = Vec::new();
            for record in records {
                let line = match layout {
                    SimLayout::Aiperf => completion_line(record, ticks_per_ms),
                    SimLayout::Dynamo => {
                        let Some((worker_id, dp_rank)) = dynamo_worker_numbers(&record.worker)
                        else {
                            return Err(dynamo_layout::unnamed_worker(&record.worker));
                        };
                        dynamo_line(record, ticks_per_ms, worker_id, dp_rank)
                    }
                };
                bytes.extend_from_slice(&line);
            }
            files.push((policy.clone(), bytes));
        }
        Ok(files)
    }
}

fn check_ticks_per_ms(ticks_per_ms: u64) -> Result<(), String> {
    if (1..=TICKS_PER_MS_MAX).contains(&ticks_per_ms) {
        Ok(())
    } else {
        Err(format!(
            "kvroute simulate: --ticks-per-ms {ticks_per_ms}: expected an integer from 1 to {TICKS_PER_MS_MAX}"
        ))
    }
}

/// Whole microseconds as exact decimal milliseconds without trailing zeros (SPEC §14.4):
/// 12,345 µs is `12.345`, 12,300 `12.3`, 12,000 `12`, 1 `0.001`, 0 `0`.
pub fn ms_decimal(us: u128) -> String {
    let whole = us / 1000;
    let frac = us % 1000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:03}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// One AIPerf record line of SPEC §14.4, `\n` included, for `ticks_per_ms = N` ticks per
/// millisecond (the caller keeps N from 1 to 1,000,000; 0 is taken as 1). Members in the
/// order SPEC lists them, no whitespace, the id written as §6.1 writes strings; every
/// figure computed exactly in 128 bits, floors as written:
/// `request_start_ns = floor(t·10^6/N)`, `request_end_ns = floor((done + d)·10^6/N)` with
/// `d = ceil(decode_tokens / decode_rate)`, TTFT `floor((done − t)·1000/N)` µs and ITL
/// `floor(1000/(N·decode_rate))` µs. The two nanosecond figures are written as at most
/// [`NS_MAX`] (10^19 − 1). No decode tokens: d = 0, the same ITL formula.
pub fn completion_line(record: &CompletionRecord, ticks_per_ms: u64) -> Vec<u8> {
    let n = u128::from(ticks_per_ms.max(1));
    let rate = u128::from(record.decode_rate.max(1));
    let t = u128::from(record.arrival_tick);
    let done = u128::from(record.prefill_done_tick);
    let d = u128::from(record.decode_tokens).div_ceil(rate);
    let start_ns = (t * 1_000_000 / n).min(NS_MAX);
    let end_ns = ((done + d) * 1_000_000 / n).min(NS_MAX);
    let ttft_us = done.saturating_sub(t) * 1000 / n;
    let itl_us = 1000 / (n * rate);

    let mut out = Vec::new();
    out.extend_from_slice(b"{\"metadata\":{\"x_request_id\":");
    crate::jcs::write_string(&record.request, &mut out);
    out.extend_from_slice(
        format!(
            ",\"request_start_ns\":{start_ns},\"request_end_ns\":{end_ns},\"was_cancelled\":false}},"
        )
        .as_bytes(),
    );
    out.extend_from_slice(
        format!(
            "\"metrics\":{{\"input_sequence_length\":{{\"value\":{},\"unit\":\"tokens\"}},\
             \"time_to_first_token\":{{\"value\":{},\"unit\":\"ms\"}},\
             \"inter_token_latency\":{{\"value\":{},\"unit\":\"ms\"}},\
             \"output_sequence_length\":{{\"value\":{},\"unit\":\"tokens\"}}}},",
            record.prompt_tokens,
            ms_decimal(ttft_us),
            ms_decimal(itl_us),
            record.decode_tokens,
        )
        .as_bytes(),
    );
    out.extend_from_slice(b"\"error\":null}\n");
    out
}

fn canonical_bytes(trace: &Trace) -> Result<Vec<u8>, String> {
    canonical_trace_bytes(trace)
}

/// §11 "The simulated trace": the input's workers (or `--workers` copies of the first
/// worker in id order), policy (with `--stale-rule` / `--epochs` in place of its own when
/// given), sharing and request events, under the `scale` limits.
fn simulated_trace(input: &Trace, options: &SimOptions) -> Result<Trace, String> {
    let workers = match options.workers {
        None => input.workers.clone(),
        Some(n) => {
            if n == 0 || n > WORKERS_MAX {
                return Err(format!(
                    "workers: expected 1 to {WORKERS_MAX} (the scale limit), found {n}"
                ));
            }
            let Some(first) = input.workers.iter().min_by(|a, b| a.id.cmp(&b.id)) else {
                return Err("workers: the trace has no worker to copy".to_owned());
            };
            // Ids as in §10.1: "w" + index zero-padded to the digits of N - 1; or
            // Dynamo's names (§14.4.1), never padded.
            let width = (n - 1).to_string().len();
            (0..n)
                .map(|i| Worker {
                    id: match options.worker_names {
                        SimWorkerNames::W => format!("w{i:0width$}"),
                        SimWorkerNames::Dynamo => format!("dynamo|{i}|dp0"),
                    },
                    queued_prefill: 0,
                    active_decode: 0,
                    cache: Vec::new(),
                    ..first.clone()
                })
                .collect()
        }
    };
    let events: Vec<Event> = input
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Request { .. }))
        .cloned()
        .collect();
    let mut policy = input.policy.clone();
    if let Some(rule) = options.stale_rule {
        policy.stale_rule = rule;
    }
    if let Some(numbering) = options.epochs {
        policy.epochs = numbering;
    }
    Ok(Trace {
        limits: Profile::Scale,
        policy,
        sharing: input.sharing.clone(),
        workers,
        events,
    })
}

/// One engine cache entry: a namespace-key, its resident tokens, and its LRU stamp
/// (larger = more recently used).
#[derive(Debug, Clone)]
struct EngineEntry {
    tenant: String,
    model: String,
    adapter: String,
    key: String,
    tokens: u64,
    stamp: u64,
}

/// One worker's engine (§11 "The engine model").
struct Engine {
    /// Worker id and its position in id order (the jitter's "worker index").
    id: String,
    index: usize,
    prefill_rate: u64,
    /// The worker's `decode_rate`: only the completion records use it (§14.4).
    decode_rate: u64,
    cache: Vec<EngineEntry>,
    next_stamp: u64,
    /// Tick at which the worker's last admitted prefill completes (0 before any).
    prefill_end: u64,
    /// The last epoch this engine published (starts at `workers[].epoch`).
    epoch: u64,
}

/// A prefill admitted but not yet completed.
struct Pending {
    completion: u64,
    /// Admission order, to break ties between completions at the same tick.
    admitted: u64,
    worker: usize,
    tenant: String,
    model: String,
    adapter: String,
    prefix: Vec<Segment>,
}

/// What one policy's closed loop yields.
#[derive(Default)]
struct LoopOutcome {
    metrics: crate::run::Metrics,
    generated: Vec<Event>,
    stores: u64,
    evicts: u64,
    /// Published events lost on the bus.
    lost: u64,
    /// Re-queries (answers to a worker going from no gap to a gap).
    resyncs: u64,
    /// Σ max(0, reuse − held) over routed decisions, in tokens.
    phantom: u64,
    /// Σ max(0, held − reuse) over routed decisions, in tokens.
    missed: u64,
    /// Every routed request in routing order, with its prefill completion tick (§14.4).
    completions: Vec<CompletionRecord>,
}

fn fresh_engines(sim: &Trace) -> Vec<Engine> {
    let mut workers: Vec<&Worker> = sim.workers.iter().collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    workers
        .into_iter()
        .enumerate()
        .map(|(index, w)| {
            // Initial entries (0 tokens = no entry), stamped in namespace-key order
            // (tenant, model, adapter, key; byte order): the first is the least
            // recently used (§11 "The engine model").
            let mut initial: Vec<EngineEntry> = w
                .cache
                .iter()
                .filter(|e| e.tokens > 0)
                .map(|e| EngineEntry {
                    tenant: e.tenant.clone(),
                    model: e.model.clone(),
                    adapter: e.adapter.clone(),
                    key: e.key.clone(),
                    tokens: e.tokens,
                    stamp: 0,
                })
                .collect();
            initial.sort_by(|a, b| {
                (&a.tenant, &a.model, &a.adapter, &a.key)
                    .cmp(&(&b.tenant, &b.model, &b.adapter, &b.key))
            });
            let mut cache = Vec::new();
            let mut next_stamp = 1;
            for mut entry in initial {
                entry.stamp = next_stamp;
                next_stamp += 1;
                cache.push(entry);
            }
            Engine {
                id: w.id.clone(),
                index,
                prefill_rate: w.prefill_rate,
                decode_rate: w.decode_rate,
                cache,
                next_stamp,
                prefill_end: 0,
                epoch: w.epoch,
            }
        })
        .collect()
}

/// What the engine really reuses for a request: the walk of §4.3 over its own cache,
/// under the request's own namespace only (no grants), capped at `prompt_tokens`.
fn engine_held(
    engine: &Engine,
    tenant: &str,
    model: &str,
    adapter: &str,
    prefix: &[Segment],
    prompt_tokens: u64,
) -> u64 {
    let mut held: u64 = 0;
    for segment in prefix {
        let mut r: u64 = 0;
        for e in &engine.cache {
            if e.key == segment.key
                && e.tenant == tenant
                && e.model == model
                && e.adapter == adapter
            {
                r = r.max(e.tokens);
            }
        }
        held = held.saturating_add(r.min(segment.tokens));
        if r < segment.tokens {
            break;
        }
    }
    held.min(prompt_tokens)
}

/// First 8 bytes (big-endian) of SHA-256("<seed>/<worker index>/<epoch>"), modulo J + 1.
pub fn jitter(seed: u64, worker_index: usize, epoch: u64, jitter_ticks: u64) -> u64 {
    let hash = Sha256::digest(format!("{seed}/{worker_index}/{epoch}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    let value = u128::from(u64::from_be_bytes(first));
    (value % (u128::from(jitter_ticks) + 1)) as u64
}

/// Whether the bus loses the event of worker `worker_index` with epoch `epoch`: the first
/// 8 bytes (big-endian) of SHA-256("loss/<seed>/<worker index>/<epoch>"), modulo 1000,
/// below the per-mille loss. A draw independent of the jitter's.
pub fn lost(seed: u64, worker_index: usize, epoch: u64, loss_per_mille: u64) -> bool {
    let hash = Sha256::digest(format!("loss/{seed}/{worker_index}/{epoch}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(first) % 1000 < loss_per_mille
}

/// The engine's answer to a re-query (§11 "Re-query"), from its cache as it is now: a
/// `clear`, then one `store` per namespace holding resident entries, namespaces in
/// (tenant, model, adapter) order, segments in key byte order. Each takes the worker's
/// next epoch; the LRU stamps are not touched. `(epoch, kind)` as `complete` gives them.
fn requery_answer(engine: &mut Engine) -> Vec<(u64, EventKind)> {
    let mut events = Vec::new();
    engine.epoch += 1;
    events.push((
        engine.epoch,
        EventKind::Clear {
            worker: engine.id.clone(),
            epoch: engine.epoch,
        },
    ));
    let mut namespaces: Vec<(String, String, String)> = Vec::new();
    for e in &engine.cache {
        let ns = (e.tenant.clone(), e.model.clone(), e.adapter.clone());
        if e.tokens > 0 && !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }
    namespaces.sort();
    for (tenant, model, adapter) in namespaces {
        let mut segments: Vec<Segment> = engine
            .cache
            .iter()
            .filter(|e| {
                e.tokens > 0 && e.tenant == tenant && e.model == model && e.adapter == adapter
            })
            .map(|e| Segment {
                key: e.key.clone(),
                tokens: e.tokens,
            })
            .collect();
        segments.sort_by(|a, b| a.key.cmp(&b.key));
        engine.epoch += 1;
        events.push((
            engine.epoch,
            EventKind::Store {
                worker: engine.id.clone(),
                epoch: engine.epoch,
                tenant,
                model,
                adapter,
                segments,
            },
        ));
    }
    events
}

fn over_capacity(cache: &[EngineEntry], capacity: SimCache) -> bool {
    match capacity {
        SimCache::Tokens(t) => {
            let total: u128 = cache.iter().map(|e| u128::from(e.tokens)).sum();
            total > u128::from(t)
        }
        SimCache::Blocks(b) => cache.len() as u128 > u128::from(b),
    }
}

/// A prefill completes: store, stamp, evict (§11 "Store and evict"), and the events it
/// publishes, in order (§11 "Publication"), without seqs or ticks yet: each is
/// `(epoch, kind)`.
fn complete(engine: &mut Engine, pending: &Pending, capacity: SimCache) -> Vec<(u64, EventKind)> {
    let stored = fitting_segments(&pending.prefix, capacity);
    let (changed, positions) = store_segments(engine, pending, &stored);
    // Stamp last segment first: the prefix's head ends up the most recently used.
    // Exactly the entries stamped from `first_stamp` on are touched by this completion.
    let first_stamp = engine.next_stamp;
    for &i in positions.iter().rev() {
        engine.cache[i].stamp = engine.next_stamp;
        engine.next_stamp += 1;
    }
    let evicted = evict_lru(engine, first_stamp, capacity);
    publications(engine, pending, changed, &evicted)
}

/// The leading segments whose total fits an empty cache; 0-token segments hold nothing
/// and are skipped.
fn fitting_segments(prefix: &[Segment], capacity: SimCache) -> Vec<&Segment> {
    let mut stored: Vec<&Segment> = Vec::new();
    let mut total: u128 = 0;
    for segment in prefix {
        if segment.tokens == 0 {
            continue;
        }
        let (next, limit) = match capacity {
            SimCache::Tokens(t) => (total + u128::from(segment.tokens), u128::from(t)),
            SimCache::Blocks(b) => (total + 1, u128::from(b)),
        };
        if next > limit {
            break;
        }
        total = next;
        stored.push(segment);
    }
    stored
}

/// Stores in segment order; a segment is published when it was newly resident or
/// changed size at the moment it was stored. Returns the published segments and where
/// each stored segment lives in the cache (entries are only appended here, so the
/// positions stay valid).
fn store_segments(
    engine: &mut Engine,
    pending: &Pending,
    stored: &[&Segment],
) -> (Vec<Segment>, Vec<usize>) {
    let mut changed: Vec<Segment> = Vec::new();
    let mut positions: Vec<usize> = Vec::new();
    for segment in stored {
        let found = engine.cache.iter().position(|e| {
            e.key == segment.key
                && e.tenant == pending.tenant
                && e.model == pending.model
                && e.adapter == pending.adapter
        });
        match found {
            Some(i) => {
                if engine.cache[i].tokens != segment.tokens {
                    engine.cache[i].tokens = segment.tokens;
                    changed.push((*segment).clone());
                }
                positions.push(i);
            }
            None => {
                engine.cache.push(EngineEntry {
                    tenant: pending.tenant.clone(),
                    model: pending.model.clone(),
                    adapter: pending.adapter.clone(),
                    key: segment.key.clone(),
                    tokens: segment.tokens,
                    stamp: 0,
                });
                changed.push((*segment).clone());
                positions.push(engine.cache.len() - 1);
            }
        }
    }
    (changed, positions)
}

/// Evicts the least recently used entries not touched by this completion (stamped
/// before `first_stamp`) until the cache fits; returns them in eviction order.
fn evict_lru(engine: &mut Engine, first_stamp: u64, capacity: SimCache) -> Vec<EngineEntry> {
    let mut evicted: Vec<EngineEntry> = Vec::new();
    while over_capacity(&engine.cache, capacity) {
        let mut oldest: Option<usize> = None;
        for (i, e) in engine.cache.iter().enumerate() {
            if e.stamp >= first_stamp {
                continue;
            }
            match oldest {
                Some(o) if engine.cache[o].stamp <= e.stamp => {}
                _ => oldest = Some(i),
            }
        }
        match oldest {
            Some(i) => evicted.push(engine.cache.remove(i)),
            None => break, // cannot happen: the stored segments fit an empty cache
        }
    }
    evicted
}

/// The events a completion publishes, each with the worker's next epoch: the store of
/// the changed segments (if any), then one evict per namespace in (tenant, model,
/// adapter) order, keys in eviction order.
fn publications(
    engine: &mut Engine,
    pending: &Pending,
    changed: Vec<Segment>,
    evicted: &[EngineEntry],
) -> Vec<(u64, EventKind)> {
    let mut events = Vec::new();
    if !changed.is_empty() {
        engine.epoch += 1;
        events.push((
            engine.epoch,
            EventKind::Store {
                worker: engine.id.clone(),
                epoch: engine.epoch,
                tenant: pending.tenant.clone(),
                model: pending.model.clone(),
                adapter: pending.adapter.clone(),
                segments: changed,
            },
        ));
    }
    let mut namespaces: Vec<(String, String, String)> = Vec::new();
    for e in evicted {
        let ns = (e.tenant.clone(), e.model.clone(), e.adapter.clone());
        if !namespaces.contains(&ns) {
            namespaces.push(ns);
        }
    }
    namespaces.sort();
    for (tenant, model, adapter) in namespaces {
        let keys: Vec<String> = evicted
            .iter()
            .filter(|e| e.tenant == tenant && e.model == model && e.adapter == adapter)
            .map(|e| e.key.clone())
            .collect();
        engine.epoch += 1;
        events.push((
            engine.epoch,
            EventKind::Evict {
                worker: engine.id.clone(),
                epoch: engine.epoch,
                tenant,
                model,
                adapter,
                keys,
            },
        ));
    }
    events
}

/// The state of one policy's closed loop: the router's run, the engines, and the
/// events generated, in flight and pending.
struct ClosedLoop<'s> {
    sim: &'s Trace,
    options: &'s SimOptions,
    router: Router<'s>,
    engines: Vec<Engine>,
    requests: Vec<&'s Event>,
    next_request: usize,
    next_seq: u64,
    /// Every generated event in generation order (the generated trace) and the ones not
    /// yet delivered to the router.
    generated: Vec<Event>,
    in_flight: Vec<Event>,
    pending: Vec<Pending>,
    admitted: u64,
    outcome: LoopOutcome,
}

impl<'s> ClosedLoop<'s> {
    fn new(sim: &'s Trace, policy: PolicyKind, options: &'s SimOptions) -> ClosedLoop<'s> {
        ClosedLoop {
            sim,
            options,
            router: Router::new(sim, policy),
            engines: fresh_engines(sim),
            requests: in_order(sim),
            next_request: 0,
            // Generated events get seqs above every request's, in generation order.
            next_seq: sim.events.iter().map(|e| e.seq).max().unwrap_or(0) + 1,
            generated: Vec::new(),
            in_flight: Vec::new(),
            pending: Vec::new(),
            admitted: 0,
            outcome: LoopOutcome::default(),
        }
    }

    /// The next router event: the earliest `(tick, seq)` among the next request and the
    /// events in flight (`Some(i)`: `in_flight[i]`; `None`: the request).
    fn next_router_event(&self) -> Option<(u64, Option<usize>)> {
        let mut next: Option<(u64, u64, Option<usize>)> = self
            .requests
            .get(self.next_request)
            .map(|e| (e.tick, e.seq, None));
        for (i, e) in self.in_flight.iter().enumerate() {
            if next.is_none_or(|(tick, seq, _)| (e.tick, e.seq) < (tick, seq)) {
                next = Some((e.tick, e.seq, Some(i)));
            }
        }
        next.map(|(tick, _, source)| (tick, source))
    }

    /// The earliest pending completion, ties in admission order.
    fn next_completion(&self) -> Option<usize> {
        let mut next: Option<usize> = None;
        for (i, p) in self.pending.iter().enumerate() {
            let earlier = next.is_none_or(|c| {
                (p.completion, p.admitted) < (self.pending[c].completion, self.pending[c].admitted)
            });
            if earlier {
                next = Some(i);
            }
        }
        next
    }

    /// Runs the loop until nothing is pending: completions first at each tick.
    fn run(mut self) -> LoopOutcome {
        loop {
            let completion = self.next_completion();
            let router_next = self.next_router_event();
            let take_completion = match (completion, router_next) {
                (Some(c), Some((tick, _))) => self.pending[c].completion <= tick,
                (Some(_), None) => true,
                (None, _) => false,
            };
            match (take_completion, completion, router_next) {
                (true, Some(c), _) => self.complete_prefill(c),
                (false, _, Some((_, Some(i)))) => self.deliver(i),
                (false, _, Some((_, None))) => self.route_next_request(),
                _ => break,
            }
        }
        self.outcome.metrics = self.router.metrics();
        self.outcome.generated = self.generated;
        self.outcome
    }

    /// A prefill completes: its engine publishes, the bus loses or delays each event.
    fn complete_prefill(&mut self, c: usize) {
        let done = self.pending.remove(c);
        let options = self.options;
        let engine = &mut self.engines[done.worker];
        for (epoch, kind) in complete(engine, &done, options.cache) {
            match kind {
                EventKind::Store { .. } => self.outcome.stores += 1,
                _ => self.outcome.evicts += 1,
            }
            // A lost event took its epoch and its seq, and is delivered nowhere.
            if lost(options.seed, engine.index, epoch, options.loss_per_mille) {
                self.outcome.lost += 1;
                self.next_seq += 1;
                continue;
            }
            let jitter = jitter(options.seed, engine.index, epoch, options.jitter_ticks);
            let delay = options.lag_ticks.saturating_add(jitter);
            let event = Event {
                index: self.sim.events.len() + self.generated.len(),
                seq: self.next_seq,
                tick: done.completion.saturating_add(delay),
                kind,
            };
            self.next_seq += 1;
            self.generated.push(event.clone());
            self.in_flight.push(event);
        }
    }

    /// Delivers `in_flight[i]` to the router; a worker that goes from no gap to a gap
    /// under sequential epochs is re-queried (§11 "Re-query").
    fn deliver(&mut self, i: usize) {
        let event = self.in_flight.remove(i);
        // Its worker's position in id order, the router's and the engines' both.
        let w = event
            .worker()
            .and_then(|id| self.engines.iter().position(|e| e.id == id));
        let gap_before = w.is_some_and(|w| self.router.has_gap(w));
        self.router.event(&event);
        let gap_after = w.is_some_and(|w| self.router.has_gap(w));
        let sequential = self.sim.policy.epochs == EpochNumbering::Sequential;
        let Some(w) = w.filter(|_| sequential && !gap_before && gap_after) else {
            return;
        };
        // The engine answers at once over a lossless channel; delivered at t + lag.
        self.outcome.resyncs += 1;
        for (_, kind) in requery_answer(&mut self.engines[w]) {
            let answer = Event {
                index: self.sim.events.len() + self.generated.len(),
                seq: self.next_seq,
                tick: event.tick.saturating_add(self.options.lag_ticks),
                kind,
            };
            self.next_seq += 1;
            self.generated.push(answer.clone());
            self.in_flight.push(answer);
        }
    }

    /// Routes the next request; a routed one is admitted to its engine's prefill.
    fn route_next_request(&mut self) {
        let event = self.requests[self.next_request];
        self.next_request += 1;
        let Some(Outcome::Decision(decision)) = self.router.event(event) else {
            return;
        };
        let (
            Some(w),
            EventKind::Request {
                tenant,
                model,
                adapter,
                prefix,
                prompt_tokens,
                decode_tokens,
                id,
            },
        ) = (decision.chosen, &event.kind)
        else {
            return;
        };
        let reuse = decision.candidates.get(w).map_or(0, |row| row.reuse);
        let engine = &mut self.engines[w];
        let held = engine_held(engine, tenant, model, adapter, prefix, *prompt_tokens);
        self.outcome.phantom = self
            .outcome
            .phantom
            .saturating_add(reuse.saturating_sub(held));
        self.outcome.missed = self
            .outcome
            .missed
            .saturating_add(held.saturating_sub(reuse));
        let recomputed = prompt_tokens - held;
        let start = event.tick.max(engine.prefill_end);
        let completion = start.saturating_add(recomputed.div_ceil(engine.prefill_rate));
        engine.prefill_end = completion;
        self.outcome.completions.push(CompletionRecord {
            request: id.clone(),
            worker: engine.id.clone(),
            arrival_tick: event.tick,
            prefill_done_tick: completion,
            prompt_tokens: *prompt_tokens,
            decode_tokens: *decode_tokens,
            decode_rate: engine.decode_rate,
            held,
        });
        self.pending.push(Pending {
            completion,
            admitted: self.admitted,
            worker: w,
            tenant: tenant.clone(),
            model: model.clone(),
            adapter: adapter.clone(),
            prefix: prefix.clone(),
        });
        self.admitted += 1;
    }
}

/// One policy's closed loop over the simulated trace.
fn closed_loop(sim: &Trace, policy: PolicyKind, options: &SimOptions) -> LoopOutcome {
    ClosedLoop::new(sim, policy, options).run()
}
