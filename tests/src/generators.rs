//! Generators: turn unstructured bytes (from a fuzzer, proptest or a seed) into traces.
//!
//! A [`TraceRecipe`] is `Arbitrary`, and [`TraceRecipe::build`] always yields a **valid**
//! `kvroute-trace/1` document: ids are unique by construction, references point at real
//! workers, prefixes fit their prompts and the lab limits hold. Values are drawn from
//! tiny domains so that the interesting collisions happen often: three tenants that
//! share keys, two models, three adapters, six keys, epochs drawn around the current one
//! (so stale cache events are common), equal loads and reuse (so ties are common),
//! freshness windows and overload caps that bite, sharing grants, and requests that no
//! worker can serve. Each of the three stale rules, sequential epochs (with late and
//! skipped epochs, so gaps open, close by reordering and wait for a clear) and cold
//! reserves from none to the whole cap are drawn too, and Dynamo block sizes (the
//! `dynamo_default` run) that reuse and decode fill whole or partly, each sometimes
//! absent and sometimes spelled out at its default. One trace in four has hard names
//! (control characters, U+2028/U+2029, quotes, backslashes, characters outside the
//! Basic Multilingual Plane, long runs: [`HARD_PIECES`]). [`near_valid`] plants exactly
//! one defect in such a trace.

use crate::reorder::seeded_rng;
use arbitrary::{Arbitrary, Unstructured};
use proptest::prelude::{Rng, Strategy};
use serde_json::{json, Value};

/// The version of what a seed builds. Bump it whenever a change here (or in the
/// recipes' byte layout) changes the trace any seed produces: sweep reports carry it, and
/// `kvroute swarm merge` refuses to join shards built by different generators. The
/// sweep test `the_generator_version_is_bumped_with_its_output` pins the output it names.
pub const GENERATOR_VERSION: u32 = 4;

/// Weighted towards `acme`, so cached prefixes often belong to the requester.
const TENANTS: [&str; 4] = ["acme", "acme", "beta", "gamma"];
/// Weighted towards `m1`, so most workers can serve most requests.
const MODELS: [&str; 4] = ["m1", "m1", "m1", "m2"];
/// Requests sometimes ask for a model no worker serves.
const REQUEST_MODELS: [&str; 8] = ["m1", "m1", "m1", "m1", "m1", "m1", "m2", "m3"];
/// Weighted towards `"base"`; the loras exist so adapter rules are exercised.
const ADAPTERS: [&str; 5] = ["base", "base", "base", "lora-a", "lora-b"];
const WORKER_ADAPTERS: [&str; 2] = ["lora-a", "lora-b"];
/// Where a chain of prefix keys starts: mostly at `k0`, so prompts share prefixes.
const CHAIN_STARTS: [usize; 5] = [0, 0, 0, 1, 3];
const KEYS: [&str; 6] = ["k0", "k1", "k2", "k3", "k4", "k5"];
/// Whole blocks mostly, then partial and empty ones.
const SEGMENT_TOKENS: [u64; 8] = [512, 512, 512, 512, 512, 256, 1, 0];
/// Array order differs from byte order on purpose (`"W3" < "w0" < "w1" < "w10" < "w2"`).
const WORKER_IDS: [&str; 5] = ["w1", "w10", "w2", "W3", "w0"];
const WORKERS_MAX: usize = 5;
const EVENTS_MAX: usize = 60;
const PREFIX_SEGMENTS_MAX: usize = 4;

fn pick<T: Copy>(options: &[T], choice: u8) -> T {
    options[choice as usize % options.len()]
}

/// A namespace drawn from the tiny domains: half the time the "house" namespace
/// `(acme, m1, base)`, so that requests and cached blocks meet often; otherwise any.
#[derive(Arbitrary, Debug, Clone, Default)]
pub struct NamespaceRecipe {
    house: bool,
    tenant: u8,
    model: u8,
    adapter: u8,
}

impl NamespaceRecipe {
    fn fields(&self) -> (&'static str, &'static str, &'static str) {
        if self.house {
            return ("acme", "m1", "base");
        }
        (
            pick(&TENANTS, self.tenant),
            pick(&MODELS, self.model),
            pick(&ADAPTERS, self.adapter),
        )
    }
}

#[derive(Arbitrary, Debug, Clone, Default)]
pub struct EntryRecipe {
    namespace: NamespaceRecipe,
    key: u8,
    tokens: u8,
}

#[derive(Arbitrary, Debug, Clone, Default)]
pub struct WorkerRecipe {
    model: u8,
    adapter_count: u8,
    adapters: [u8; 2],
    prefill_rate: u8,
    decode_rate: u8,
    queued_prefill: u8,
    active_decode: u8,
    observed_tick: u8,
    epoch: u8,
    /// A chain of prefix blocks resident under one namespace, as a warm worker has.
    warm_namespace: NamespaceRecipe,
    warm_chain: ChainRecipe,
    cache_count: u8,
    cache: [EntryRecipe; 3],
}

#[derive(Arbitrary, Debug, Clone, Default)]
pub struct GrantRecipe {
    model: u8,
    adapter: u8,
    tenant_count: u8,
    tenants: [u8; 3],
}

/// One event; `ticks_after` is how far it lies after the previous one.
#[derive(Debug, Clone)]
pub enum EventRecipe {
    Store {
        ticks_after: u8,
        worker: u8,
        epoch_step: u8,
        namespace: NamespaceRecipe,
        chain: ChainRecipe,
    },
    Evict {
        ticks_after: u8,
        worker: u8,
        epoch_step: u8,
        namespace: NamespaceRecipe,
        key_count: u8,
        keys: [u8; 4],
    },
    Clear {
        ticks_after: u8,
        worker: u8,
        epoch_step: u8,
    },
    Load {
        ticks_after: u8,
        worker: u8,
        age: u8,
        queued_prefill: u8,
        active_decode: u8,
    },
    Request {
        ticks_after: u8,
        namespace: NamespaceRecipe,
        prefix: ChainRecipe,
        extra_tokens: u8,
        decode_tokens: u8,
    },
}

impl<'a> Arbitrary<'a> for EventRecipe {
    /// Kinds are weighted like a serving trace: requests 45%, stores 25%, loads 15%,
    /// evicts 10%, clears 5% (a derived enum would make clears as common as requests
    /// and wipe every cache).
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let kind = u.arbitrary::<u8>()? % 20;
        Ok(match kind {
            0..=8 => EventRecipe::Request {
                ticks_after: u.arbitrary()?,
                namespace: u.arbitrary()?,
                prefix: u.arbitrary()?,
                extra_tokens: u.arbitrary()?,
                decode_tokens: u.arbitrary()?,
            },
            9..=13 => EventRecipe::Store {
                ticks_after: u.arbitrary()?,
                worker: u.arbitrary()?,
                epoch_step: u.arbitrary()?,
                namespace: u.arbitrary()?,
                chain: u.arbitrary()?,
            },
            14..=16 => EventRecipe::Load {
                ticks_after: u.arbitrary()?,
                worker: u.arbitrary()?,
                age: u.arbitrary()?,
                queued_prefill: u.arbitrary()?,
                active_decode: u.arbitrary()?,
            },
            17..=18 => EventRecipe::Evict {
                ticks_after: u.arbitrary()?,
                worker: u.arbitrary()?,
                epoch_step: u.arbitrary()?,
                namespace: u.arbitrary()?,
                key_count: u.arbitrary()?,
                keys: u.arbitrary()?,
            },
            _ => EventRecipe::Clear {
                ticks_after: u.arbitrary()?,
                worker: u.arbitrary()?,
                epoch_step: u.arbitrary()?,
            },
        })
    }
}

/// A run of prefix keys in chain order (`k0, k1, ...` from a start), as real prompts
/// share leading blocks, with each segment's tokens drawn separately.
#[derive(Arbitrary, Debug, Clone, Default)]
pub struct ChainRecipe {
    start: u8,
    length: u8,
    tokens: [u8; 4],
}

impl ChainRecipe {
    fn segments(&self) -> Vec<(&'static str, u64)> {
        let start = pick(&CHAIN_STARTS, self.start);
        let length = self.length as usize % (PREFIX_SEGMENTS_MAX + 1);
        (0..length)
            .map(|i| {
                (
                    KEYS[(start + i) % KEYS.len()],
                    pick(&SEGMENT_TOKENS, self.tokens[i]),
                )
            })
            .collect()
    }
}

/// Everything needed to build one valid trace.
#[derive(Debug, Clone, Default)]
pub struct TraceRecipe {
    decode_weight: u8,
    imbalance_penalty: u8,
    freshness: u8,
    cap: u8,
    descending_seqs: bool,
    grants: Vec<GrantRecipe>,
    workers: Vec<WorkerRecipe>,
    events: Vec<EventRecipe>,
    /// The stale rule, epochs and cold reserve policy members (SPEC.md §3.2, §3.6, §4.5),
    /// drawn after everything else so that the earlier draws, and so every version-1 field,
    /// are unchanged.
    stale_rule: u8,
    epochs: u8,
    cold_reserve: u8,
    /// `policy.dynamo_block_tokens` (SPEC.md §4.8), drawn after the above for the same
    /// reason.
    dynamo_block_tokens: u8,
    /// Whether, and how, the trace's names are made hard ([`harden_strings`]); drawn
    /// last, so that every earlier draw is unchanged.
    hard_strings: u8,
}

impl<'a> Arbitrary<'a> for TraceRecipe {
    /// Counts are drawn explicitly (derived `Vec`s would be almost always short):
    /// 1 to 5 workers, 0 to 2 grants, and 4 to 60 events.
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let decode_weight = u.arbitrary()?;
        let imbalance_penalty = u.arbitrary()?;
        let freshness = u.arbitrary()?;
        let cap = u.arbitrary()?;
        let descending_seqs = u.arbitrary()?;
        let worker_count = 1 + u.arbitrary::<u8>()? as usize % WORKERS_MAX;
        let grant_count = u.arbitrary::<u8>()? as usize % 3;
        let event_count = 4 + u.arbitrary::<u8>()? as usize % (EVENTS_MAX - 3);
        let workers = (0..worker_count)
            .map(|_| u.arbitrary())
            .collect::<arbitrary::Result<_>>()?;
        let grants = (0..grant_count)
            .map(|_| u.arbitrary())
            .collect::<arbitrary::Result<_>>()?;
        let mut events = Vec::with_capacity(event_count);
        for _ in 0..event_count {
            if u.is_empty() {
                break;
            }
            events.push(u.arbitrary()?);
        }
        // Exhausted input leaves these at the defaults rather than failing the recipe.
        let stale_rule = u.arbitrary().unwrap_or(0);
        let epochs = u.arbitrary().unwrap_or(0);
        let cold_reserve = u.arbitrary().unwrap_or(0);
        let dynamo_block_tokens = u.arbitrary().unwrap_or(0);
        let hard_strings = u.arbitrary().unwrap_or(0);
        Ok(TraceRecipe {
            hard_strings,
            stale_rule,
            epochs,
            cold_reserve,
            dynamo_block_tokens,
            decode_weight,
            imbalance_penalty,
            freshness,
            cap,
            descending_seqs,
            grants,
            workers,
            events,
        })
    }
}

impl TraceRecipe {
    /// A recipe from raw bytes; exhausted or short input still yields a recipe.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        TraceRecipe::arbitrary(&mut Unstructured::new(bytes)).unwrap_or_default()
    }

    /// The recipe for a seed: 4 KiB from a ChaCha stream seeded with it.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = seeded_rng(seed);
        let mut bytes = vec![0u8; 4096];
        rng.fill_bytes(&mut bytes);
        TraceRecipe::from_bytes(&bytes)
    }

    /// Builds the trace. Always valid under the `lab` profile.
    pub fn build(&self) -> Value {
        let worker_count = self.workers.len().clamp(1, WORKERS_MAX);
        let default_worker = WorkerRecipe::default();
        let workers: Vec<&WorkerRecipe> = (0..worker_count)
            .map(|i| self.workers.get(i).unwrap_or(&default_worker))
            .collect();
        let last_epoch: Vec<u64> = workers.iter().map(|w| (w.epoch % 4) as u64).collect();
        let workers_json: Vec<Value> = workers
            .iter()
            .enumerate()
            .map(|(i, w)| worker_json(i, w))
            .collect();

        let epochs = pick(
            &[None, None, None, Some("any"), Some("sequential")],
            self.epochs,
        );
        let mut clock = EpochClock {
            last_epoch,
            sequential: epochs == Some("sequential"),
        };
        let events_json = self.events_json(worker_count, &mut clock);
        let grants = self.grants_json();
        let policy = self.policy_json(epochs);
        let mut trace = json!({
            "format": "kvroute-trace/1",
            "limits": "lab",
            "policy": policy,
            "sharing": grants,
            "workers": workers_json,
            "events": events_json,
        });
        // One trace in four: a rule that always gives a plain trace for input that ran
        // out (0) and often a hard one for random input.
        if self.hard_strings % 4 == 1 {
            harden_strings(&mut trace, self.hard_strings / 4);
        }
        trace
    }

    /// The events, at most [`EVENTS_MAX`], each given its seq, tick and epoch.
    fn events_json(&self, worker_count: usize, clock: &mut EpochClock) -> Vec<Value> {
        let events: Vec<&EventRecipe> = self.events.iter().take(EVENTS_MAX).collect();
        let event_count = events.len() as u64;
        let mut tick: u64 = 0;
        let mut events_json = Vec::with_capacity(events.len());
        for (i, event) in events.into_iter().enumerate() {
            let i = i as u64;
            // Seqs ascend or descend with generation order, so that within one tick the
            // processing order is sometimes the reverse of the array order.
            let seq = if self.descending_seqs {
                (event_count - i) * 2 + 1
            } else {
                i * 3 + 1
            };
            events_json.push(event_json(event, i, seq, &mut tick, worker_count, clock));
        }
        events_json
    }

    /// The sharing grants, at most three.
    fn grants_json(&self) -> Vec<Value> {
        self.grants
            .iter()
            .take(3)
            .map(|g| {
                let tenants: Vec<&str> = g
                    .tenants
                    .iter()
                    .take(g.tenant_count as usize % 4)
                    .map(|&t| pick(&TENANTS, t))
                    .collect();
                json!({ "model": pick(&MODELS, g.model), "adapter": pick(&ADAPTERS, g.adapter),
                        "tenants": tenants })
            })
            .collect()
    }

    /// The policy object; `epochs` is the epochs member, if the trace has one.
    fn policy_json(&self, epochs: Option<&str>) -> Value {
        let mut policy = json!({
            "decode_weight_milli": pick(&[0, 500, 1000, 1000, 2000], self.decode_weight),
            "imbalance_penalty_milli": pick(&[0, 0, 100, 1000], self.imbalance_penalty),
            "freshness_ticks": pick(&[None, None, None, Some(0), Some(4), Some(12)], self.freshness),
            "max_queued_work": pick(&[None, None, Some(500), Some(2000), Some(6000)], self.cap),
        });
        if let Some(rule) = pick(&STALE_RULES, self.stale_rule) {
            policy["stale_rule"] = json!(rule);
        }
        if let Some(mode) = epochs {
            policy["epochs"] = json!(mode);
        }
        if let Some(reserve) = pick(&COLD_RESERVES_MILLI, self.cold_reserve) {
            policy["cold_reserve_milli"] = json!(reserve);
        }
        if let Some(block_tokens) = pick(&DYNAMO_BLOCK_TOKENS, self.dynamo_block_tokens) {
            policy["dynamo_block_tokens"] = json!(block_tokens);
        }
        policy
    }

    /// The built trace as JSON bytes.
    pub fn build_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.build()).expect("a Value always serialises")
    }
}

/// The stale rules a trace may name: absent, spelled-out defaults and every other
/// value, so that both the default path and each new rule are exercised.
const STALE_RULES: [Option<&str>; 6] = [
    None,
    None,
    Some("worker_epoch"),
    Some("key_epoch"),
    Some("key_epoch"),
    Some("arrival_order"),
];

/// Reserves against caps of 500,000 to 6,000,000 milli: some never bite, some reserve
/// the whole cap.
const COLD_RESERVES_MILLI: [Option<Option<u64>>; 7] = [
    None,
    None,
    Some(None),
    Some(Some(0)),
    Some(Some(100_000)),
    Some(Some(1_000_000)),
    Some(Some(9_000_000)),
];

/// Block sizes against segments of 512, 256, 1 and 0 tokens and decode figures of 0 to
/// 900: powers of two that reuse fills whole (256, 512) or only partly (64 with a
/// 1-token segment, 1024), and others that never divide it evenly (3, 100, 600, 1000),
/// so whole and partial blocks, of reuse and of decode, both occur. Blocks of 1 make the
/// overlap every reused token. Some traces spell out the default (null), most of the
/// rest leave it out.
const DYNAMO_BLOCK_TOKENS: [Option<Option<u64>>; 16] = [
    None,
    None,
    None,
    None,
    None,
    None,
    Some(None),
    Some(Some(1)),
    Some(Some(3)),
    Some(Some(64)),
    Some(Some(100)),
    Some(Some(256)),
    Some(Some(512)),
    Some(Some(600)),
    Some(Some(1000)),
    Some(Some(1024)),
];

/// Each worker's last epoch, from which its cache events' epochs are drawn.
struct EpochClock {
    last_epoch: Vec<u64>,
    /// The policy's `epochs` is `sequential`.
    sequential: bool,
}

impl EpochClock {
    /// The epoch of `worker`'s next cache event, drawn by `step`.
    fn next(&mut self, worker: usize, step: u8) -> u64 {
        let last_epoch = &mut self.last_epoch;
        if self.sequential {
            // The worker's own next epoch, except that one in five events comes
            // late (one below the last: reordering, or a repeat) and one in five
            // skips an epoch (lost, or still in flight): gaps that reordering
            // closes and gaps only a clear resyncs.
            let epoch = match step % 5 {
                0 => last_epoch[worker].saturating_sub(1),
                4 => last_epoch[worker] + 2,
                _ => last_epoch[worker] + 1,
            };
            last_epoch[worker] = last_epoch[worker].max(epoch);
            return epoch;
        }
        // Steps of -2..=+2 around the last epoch make stale events common.
        let epoch = (last_epoch[worker] + (step % 5) as u64).saturating_sub(2);
        last_epoch[worker] = last_epoch[worker].max(epoch);
        epoch
    }
}

/// The `i`th event as JSON with its `seq`, after advancing `tick` past it.
fn event_json(
    event: &EventRecipe,
    i: u64,
    seq: u64,
    tick: &mut u64,
    worker_count: usize,
    clock: &mut EpochClock,
) -> Value {
    match event {
        EventRecipe::Store {
            ticks_after,
            worker,
            epoch_step,
            namespace,
            chain,
        } => {
            *tick += tick_step(*ticks_after);
            let w = *worker as usize % worker_count;
            let (tenant, model, adapter) = namespace.fields();
            json!({
                "seq": seq, "tick": *tick, "type": "cache", "op": "store",
                "worker": WORKER_IDS[w], "epoch": clock.next(w, *epoch_step),
                "tenant": tenant, "model": model, "adapter": adapter,
                "segments": segments_json(&chain.segments()),
            })
        }
        EventRecipe::Evict {
            ticks_after,
            worker,
            epoch_step,
            namespace,
            key_count,
            keys,
        } => {
            *tick += tick_step(*ticks_after);
            let w = *worker as usize % worker_count;
            let (tenant, model, adapter) = namespace.fields();
            let keys: Vec<&str> = keys
                .iter()
                .take(*key_count as usize % 5)
                .map(|&k| pick(&KEYS, k))
                .collect();
            json!({
                "seq": seq, "tick": *tick, "type": "cache", "op": "evict",
                "worker": WORKER_IDS[w], "epoch": clock.next(w, *epoch_step),
                "tenant": tenant, "model": model, "adapter": adapter, "keys": keys,
            })
        }
        EventRecipe::Clear {
            ticks_after,
            worker,
            epoch_step,
        } => {
            *tick += tick_step(*ticks_after);
            let w = *worker as usize % worker_count;
            json!({
                "seq": seq, "tick": *tick, "type": "cache", "op": "clear",
                "worker": WORKER_IDS[w], "epoch": clock.next(w, *epoch_step),
            })
        }
        EventRecipe::Load { .. } => load_json(event, seq, tick, worker_count),
        EventRecipe::Request { .. } => request_json(event, i, seq, tick),
    }
}

/// A load event as JSON, after advancing `tick` past it.
fn load_json(event: &EventRecipe, seq: u64, tick: &mut u64, worker_count: usize) -> Value {
    let EventRecipe::Load {
        ticks_after,
        worker,
        age,
        queued_prefill,
        active_decode,
    } = event
    else {
        unreachable!("load_json is given load events only")
    };
    *tick += tick_step(*ticks_after);
    let tick = *tick;
    let w = *worker as usize % worker_count;
    json!({
        "seq": seq, "tick": tick, "type": "load", "worker": WORKER_IDS[w],
        "observed_tick": tick.saturating_sub(pick(&[0, 0, 1, 3, 10], *age)),
        "queued_prefill": pick(&[0, 100, 1000, 5000], *queued_prefill),
        "active_decode": pick(&[0, 50, 500], *active_decode),
    })
}

/// The `i`th event, a request, as JSON, after advancing `tick` past it.
fn request_json(event: &EventRecipe, i: u64, seq: u64, tick: &mut u64) -> Value {
    let EventRecipe::Request {
        ticks_after,
        namespace,
        prefix,
        extra_tokens,
        decode_tokens,
    } = event
    else {
        unreachable!("request_json is given requests only")
    };
    *tick += tick_step(*ticks_after);
    let (tenant, mut model, adapter) = namespace.fields();
    if !namespace.house {
        model = pick(&REQUEST_MODELS, namespace.model);
    }
    let prefix = prefix.segments();
    let prefix_tokens: u64 = prefix.iter().map(|&(_, t)| t).sum();
    json!({
        "seq": seq, "tick": *tick, "type": "request", "id": format!("r{i}"),
        "tenant": tenant, "model": model, "adapter": adapter,
        "prefix": segments_json(&prefix),
        "prompt_tokens": prefix_tokens + pick(&[0, 200, 400, 37], *extra_tokens),
        "decode_tokens": pick(&[0, 10, 100, 400], *decode_tokens),
    })
}

/// The pieces [`harden_strings`] puts around a name: what a JSON writer or reader gets
/// wrong. Control characters (escaped as `\u00xx` in lowercase hex, or by their short
/// escapes), U+007F (not a control character to JSON), the line and paragraph
/// separators (valid raw in JSON, not in JavaScript), a quote and a backslash,
/// characters outside the Basic Multilingual Plane (two UTF-16 code units, so their
/// order differs between UTF-8 bytes and UTF-16 units against U+E000..U+FFFF), and a
/// long run. None holds an ASCII letter, digit or `-`, which every generated name is
/// made of and starts with, so a name can be read back out of its hardened form: the
/// map is one to one and keeps the trace valid.
const HARD_PIECES: [&str; 12] = [
    "\u{0}\u{1b}",
    "\u{1f}\u{7f}",
    "\t\n\r\u{8}\u{c}",
    "\u{2028}\u{2029}",
    "\"",
    "\\",
    "\"\\\"",
    "\u{1F600}",
    "\u{10FFFF}\u{E000}",
    "\u{FFFD}\u{FF61}",
    // A long run of two-byte characters (cut at 40 in error quotes, SPEC.md §2.2).
    "éééééééééééééééééééééééééééééééééééééééééééééééé",
    "",
];

/// Rewrites every name of a built trace (worker and request ids, workers named by
/// events, tenants, models, adapters other than `"base"`, keys) as a hard piece, the
/// name, and another hard piece, the pieces chosen from the name and `variant`, so one
/// trace mixes several and the workers' byte order changes. The same name becomes the
/// same text everywhere, so references and namespaces still meet.
fn harden_strings(trace: &mut Value, variant: u8) {
    let hard = |name: &str| -> String {
        let h = name.bytes().fold(usize::from(variant), |h, b| {
            h.wrapping_mul(31).wrapping_add(b.into())
        });
        let before = HARD_PIECES[h % HARD_PIECES.len()];
        let after = HARD_PIECES[(h / HARD_PIECES.len()) % HARD_PIECES.len()];
        format!("{before}{name}{after}")
    };
    fn walk(value: &mut Value, hard: &dyn Fn(&str) -> String) {
        match value {
            Value::Array(items) => items.iter_mut().for_each(|item| walk(item, hard)),
            Value::Object(members) => {
                for (name, member) in members.iter_mut() {
                    match (name.as_str(), &mut *member) {
                        ("adapter", Value::String(s)) if s == "base" => {}
                        (
                            "id" | "worker" | "tenant" | "model" | "adapter" | "key",
                            Value::String(s),
                        ) => {
                            *s = hard(s);
                        }
                        ("adapters" | "tenants" | "keys", Value::Array(items)) => {
                            for item in items {
                                if let Value::String(s) = item {
                                    *s = hard(s);
                                }
                            }
                        }
                        ("format" | "limits" | "type" | "op" | "stale_rule" | "epochs", _) => {}
                        _ => walk(member, hard),
                    }
                }
            }
            _ => {}
        }
    }
    walk(trace, &hard);
}

/// Tick gaps: mostly small, sometimes long enough to drain a worker or age its view.
fn tick_step(choice: u8) -> u64 {
    pick(&[0, 0, 1, 1, 2, 3, 5, 12], choice)
}

fn segments_json(segments: &[(&str, u64)]) -> Value {
    Value::Array(
        segments
            .iter()
            .map(|&(key, tokens)| json!({ "key": key, "tokens": tokens }))
            .collect(),
    )
}

fn worker_json(index: usize, w: &WorkerRecipe) -> Value {
    let mut seen = Vec::new();
    let mut cache = Vec::new();
    let (warm_tenant, warm_model, warm_adapter) = w.warm_namespace.fields();
    let warm = w
        .warm_chain
        .segments()
        .into_iter()
        .map(|(key, tokens)| (warm_tenant, warm_model, warm_adapter, key, tokens));
    let scattered = w
        .cache
        .iter()
        .take(w.cache_count as usize % 4)
        .map(|entry| {
            let (tenant, model, adapter) = entry.namespace.fields();
            let tokens = pick(&SEGMENT_TOKENS, entry.tokens);
            (tenant, model, adapter, pick(&KEYS, entry.key), tokens)
        });
    for (tenant, model, adapter, key, tokens) in warm.chain(scattered) {
        // The same namespace-key twice is invalid (SPEC.md §1.2): keep the first.
        if seen.contains(&(tenant, model, adapter, key)) {
            continue;
        }
        seen.push((tenant, model, adapter, key));
        cache.push(
            json!({ "tenant": tenant, "model": model, "adapter": adapter, "key": key,
                           "tokens": tokens }),
        );
    }
    let adapters: Vec<&str> = w
        .adapters
        .iter()
        .take(w.adapter_count as usize % 3)
        .map(|&a| pick(&WORKER_ADAPTERS, a))
        .collect();
    json!({
        "id": WORKER_IDS[index],
        "model": pick(&MODELS, w.model),
        "adapters": adapters,
        "prefill_rate": pick(&[100, 512, 1000], w.prefill_rate),
        "decode_rate": pick(&[10, 64, 100], w.decode_rate),
        "queued_prefill": pick(&[0, 0, 500, 3000], w.queued_prefill),
        "active_decode": pick(&[0, 0, 100, 1000], w.active_decode),
        "observed_tick": pick(&[0, 0, 2], w.observed_tick),
        "epoch": (w.epoch % 4) as u64,
        "cache": cache,
    })
}

/// The largest integer a trace may carry (SPEC.md conventions: `B = 2^53 − 1`).
pub const INTEGER_MAX: u64 = (1 << 53) - 1;

/// An edge that [`TraceRecipe::build`]'s small domains never reach, for
/// [`at_boundary`] to push a built trace onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// The last request and every event after it at tick `B`: the drain over a span of
    /// about `B` ticks and the freshness age at the top of the range.
    TickAtMax,
    /// As [`Boundary::TickAtMax`], with the load events from there on observed at `B`
    /// and the first worker's initial `observed_tick` at `B` (heard "after" every
    /// request, so its age saturates at 0).
    ObservedTickAtMax,
    /// A freshness window of `B` ticks, with the last request at tick `B`.
    FreshnessAtMax,
    /// The first worker's `active_decode` at 2^32 + 7, initially and in its load
    /// events, with every other load narrow: the one load that decides whether the row
    /// builder's 32-bit path is exact.
    WideActiveDecodeOnly,
}

impl Boundary {
    pub const ALL: [Boundary; 4] = [
        Boundary::TickAtMax,
        Boundary::ObservedTickAtMax,
        Boundary::FreshnessAtMax,
        Boundary::WideActiveDecodeOnly,
    ];
}

/// `recipe`'s trace pushed onto `boundary`. Still valid: ticks stay in array order (the
/// builder's ticks never fall, and everything from the last request on moves to `B`
/// together), a load's `observed_tick` stays at most its tick, and a wide decode load
/// keeps the overflow rule's bound (§1.4) near 2^45, far under `B`, for the weights
/// the builder draws (at most 2000 milli).
pub fn at_boundary(recipe: &TraceRecipe, boundary: Boundary) -> Value {
    let mut trace = recipe.build();
    if boundary == Boundary::WideActiveDecodeOnly {
        // Its load events too, so the load stays wide through the trace.
        let wide = json!((1u64 << 32) + 7);
        trace["workers"][0]["active_decode"] = wide.clone();
        let first_worker = trace["workers"][0]["id"].clone();
        for event in events_mut(&mut trace) {
            if event["type"] == "load" && event["worker"] == first_worker {
                event["active_decode"] = wide.clone();
            }
        }
        return trace;
    }
    let events = events_mut(&mut trace);
    let last_request = events
        .iter()
        .rposition(|e| e["type"] == "request")
        .unwrap_or(events.len().saturating_sub(1));
    for event in events.iter_mut().skip(last_request) {
        event["tick"] = json!(INTEGER_MAX);
        if boundary == Boundary::ObservedTickAtMax && event["type"] == "load" {
            event["observed_tick"] = json!(INTEGER_MAX);
        }
    }
    match boundary {
        Boundary::ObservedTickAtMax => {
            trace["workers"][0]["observed_tick"] = json!(INTEGER_MAX);
        }
        Boundary::FreshnessAtMax => trace["policy"]["freshness_ticks"] = json!(INTEGER_MAX),
        _ => {}
    }
    trace
}

/// A proptest strategy over recipes (shrinks through the underlying bytes).
pub fn trace_recipes() -> impl Strategy<Value = TraceRecipe> {
    proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1600)
        .prop_map(|bytes| TraceRecipe::from_bytes(&bytes))
}

/// A trace with exactly one planted defect, and the path its single error must name.
#[derive(Debug, Clone)]
pub struct NearValid {
    pub defect: &'static str,
    pub json_text: String,
    pub expected_path: String,
}

/// The defects [`near_valid`] can plant.
pub const DEFECTS: [&str; 16] = [
    "negative_count",
    "fractional_epoch",
    "string_tick",
    "missing_tenant",
    "empty_model",
    "unknown_member",
    "repeated_member",
    "zero_rate",
    "duplicate_worker_id",
    "duplicate_seq",
    "duplicate_request_id",
    "unknown_worker",
    "future_observation",
    "prefix_longer_than_prompt",
    "too_many_requests",
    "wrong_format",
];

fn events_mut(trace: &mut Value) -> &mut Vec<Value> {
    trace["events"]
        .as_array_mut()
        .expect("built traces have events")
}

/// Index of the first event of `kind`, appending a valid one at a fresh tick if none.
fn ensure_event(trace: &mut Value, kind: &str) -> usize {
    let events = trace["events"]
        .as_array()
        .expect("built traces have events");
    if let Some(i) = events.iter().position(|e| e["type"] == kind) {
        return i;
    }
    let seq = events
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap_or(0)
        + 1;
    let worker = trace["workers"][0]["id"].clone();
    let event = match kind {
        "request" => json!({ "seq": seq, "tick": 0, "type": "request", "id": "r-added",
            "tenant": "acme", "model": "m1", "adapter": "base",
            "prefix": [ { "key": "k0", "tokens": 512 } ], "prompt_tokens": 600, "decode_tokens": 10 }),
        "load" => json!({ "seq": seq, "tick": 0, "type": "load", "worker": worker,
            "observed_tick": 0, "queued_prefill": 0, "active_decode": 0 }),
        _ => json!({ "seq": seq, "tick": 0, "type": "cache", "op": "clear", "worker": worker,
            "epoch": 1 }),
    };
    let events = events_mut(trace);
    events.push(event);
    events.len() - 1
}

/// Plants defect number `choice` (modulo [`DEFECTS`]) into the recipe's trace.
pub fn near_valid(recipe: &TraceRecipe, choice: u8) -> NearValid {
    let mut trace = recipe.build();
    let defect = DEFECTS[choice as usize % DEFECTS.len()];
    let mut text_edit: Option<(String, String)> = None;
    let expected_path = plant_defect(&mut trace, defect, &mut text_edit);
    let mut json_text = serde_json::to_string(&trace).expect("a Value always serialises");
    if let Some((from, to)) = text_edit {
        json_text = json_text.replacen(&from, &to, 1);
    }
    NearValid {
        defect,
        json_text,
        expected_path,
    }
}

/// Plants `defect` into `trace`, or sets `text_edit` to the edit of its text that plants
/// it; the path validation must report.
fn plant_defect(
    trace: &mut Value,
    defect: &str,
    text_edit: &mut Option<(String, String)>,
) -> String {
    match defect {
        "negative_count" => set_event_member(trace, "load", "queued_prefill", json!(-1)),
        "fractional_epoch" => set_event_member(trace, "cache", "epoch", json!(1.5)),
        "string_tick" => set_event_member(trace, "request", "tick", json!("5")),
        "missing_tenant" => {
            let i = ensure_event(trace, "request");
            events_mut(trace)[i]
                .as_object_mut()
                .expect("events are objects")
                .remove("tenant");
            format!("events[{i}].tenant")
        }
        "empty_model" => {
            trace["workers"][0]["model"] = json!("");
            "workers[0].model".to_owned()
        }
        "unknown_member" => set_event_member(trace, "cache", "colour", json!("red")),
        "repeated_member" => {
            // serde_json cannot hold a repeated member, so the text is edited instead.
            let epoch = trace["workers"][0]["epoch"].clone();
            trace["workers"][0]["epoch"] = json!("__repeat__");
            *text_edit = Some((
                "\"epoch\":\"__repeat__\"".to_owned(),
                format!("\"epoch\":{epoch},\"epoch\":{epoch}"),
            ));
            "workers[0].epoch".to_owned()
        }
        "zero_rate" => {
            trace["workers"][0]["decode_rate"] = json!(0);
            "workers[0].decode_rate".to_owned()
        }
        "duplicate_worker_id" => duplicate_worker_id(trace),
        "duplicate_seq" => duplicate_seq(trace),
        "duplicate_request_id" => duplicate_request_id(trace),
        "unknown_worker" => set_event_member(trace, "load", "worker", json!("w-missing")),
        "future_observation" => {
            let i = ensure_event(trace, "load");
            let tick = trace["events"][i]["tick"].as_u64().unwrap_or(0);
            events_mut(trace)[i]["observed_tick"] = json!(tick + 1);
            format!("events[{i}].observed_tick")
        }
        "prefix_longer_than_prompt" => {
            let i = ensure_event(trace, "request");
            let event = &mut events_mut(trace)[i];
            event["prefix"] = json!([ { "key": "k0", "tokens": 300 } ]);
            event["prompt_tokens"] = json!(299);
            format!("events[{i}].prefix")
        }
        "too_many_requests" => too_many_requests(trace),
        _ => {
            trace["format"] = json!("kvroute-trace/0");
            "format".to_owned()
        }
    }
}

/// Sets `member` of an event of `kind` (added if the trace has none) to `value`; the
/// member's path.
fn set_event_member(trace: &mut Value, kind: &str, member: &str, value: Value) -> String {
    let i = ensure_event(trace, kind);
    events_mut(trace)[i][member] = value;
    format!("events[{i}].{member}")
}

/// The highest seq of the built trace's events, or 0.
fn max_seq(trace: &Value) -> u64 {
    trace["events"]
        .as_array()
        .expect("built traces have events")
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Adds a second worker with the first one's id (and no cache); the copy's id path.
fn duplicate_worker_id(trace: &mut Value) -> String {
    let workers = trace["workers"]
        .as_array_mut()
        .expect("built traces have workers");
    let mut copy = workers[0].clone();
    copy["cache"] = json!([]);
    workers.push(copy);
    format!("workers[{}].id", workers.len() - 1)
}

/// Adds a copy of a request under a new id with the same seq; the copy's seq path.
fn duplicate_seq(trace: &mut Value) -> String {
    let i = ensure_event(trace, "request");
    let seq = trace["events"][i]["seq"].clone();
    let mut copy = trace["events"][i].clone();
    copy["id"] = json!("r-copy");
    copy["seq"] = seq;
    let events = events_mut(trace);
    events.push(copy);
    format!("events[{}].seq", events.len() - 1)
}

/// Adds a copy of a request, same id, under a new seq; the copy's id path.
fn duplicate_request_id(trace: &mut Value) -> String {
    let i = ensure_event(trace, "request");
    let max_seq = max_seq(trace);
    let mut copy = trace["events"][i].clone();
    copy["seq"] = json!(max_seq + 1);
    let events = events_mut(trace);
    events.push(copy);
    format!("events[{}].id", events.len() - 1)
}

/// Adds requests until there are 65, one over the `lab` profile's limit; the path
/// `events`.
fn too_many_requests(trace: &mut Value) -> String {
    let max_seq = max_seq(trace);
    let requests = trace["events"]
        .as_array()
        .expect("built traces have events")
        .iter()
        .filter(|e| e["type"] == "request")
        .count();
    let events = events_mut(trace);
    for n in 0..(65 - requests) as u64 {
        events.push(
            json!({ "seq": max_seq + 1 + n, "tick": 0, "type": "request",
            "id": format!("extra-{n}"), "tenant": "acme", "model": "m1",
            "adapter": "base", "prefix": [], "prompt_tokens": 1, "decode_tokens": 1 }),
        );
    }
    "events".to_owned()
}

/// The path part of a `PATH: reason` line. Paths follow SPEC.md §2.1, so bracketed
/// member names (JSON strings, which may contain `": "`) are skipped over whole.
pub fn error_path(line: &str) -> &str {
    parse_error_path(line).unwrap_or(line)
}

/// The path of a `PATH: reason` line if it has a well-formed one (SPEC.md §2.1).
pub fn parse_error_path(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b':' if bytes.get(i + 1) == Some(&b' ') => return (i > 0).then(|| &line[..i]),
            b'[' if bytes.get(i + 1) == Some(&b'"') => {
                // A JSON string: find its closing quote, honouring backslash escapes.
                i += 2;
                loop {
                    match bytes.get(i)? {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                if bytes.get(i + 1) != Some(&b']') {
                    return None;
                }
                i += 2;
            }
            b' ' => return None,
            _ => i += 1,
        }
    }
    None
}
