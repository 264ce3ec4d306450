//! Decoded engine messages and logged requests as trace events (SPEC.md §13.4).
//!
//! Each publisher keeps what the router would: the epoch it has reached, its last
//! sequence number and a table from engine hash to the key kvroute gave that block.
//! The table is what lets a removal, which names hashes only, name keys; it holds a
//! publisher's resident blocks and no more, since removals and clears empty it.
//! Events are staged with their batch's time in milliseconds; ticks are only known
//! once the earliest time of both inputs is.

use super::lines::{LoggedRequest, Message};
use super::report::{ImportReport, SequenceNote};
use super::wire::{Batch, BlockHash, EngineEvent, ExtraKey, Removed, Stored};
use crate::import::shared::{chained_key, DEFAULT_DECODE_RATE, DEFAULT_PREFILL_RATE};
use crate::input::trace::{
    CacheOp, EpochsMode, Event, EventKind, Grant, Namespace, PolicyParams, Request, Segment, Trace,
    WorkerSpec,
};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How the engines' evidence and the requests are named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsOptions {
    /// The engines' block size in tokens: a store of another size is left out, and
    /// requests are cut into blocks of this size.
    pub block_tokens: u64,
    /// The tenant of every store, and of requests whose line names none.
    pub tenant: String,
    /// The workers' model; `None` takes the one model the request log names.
    pub model: Option<String>,
    /// What a block's key is made from: its tokens, or Dynamo's hash of them.
    pub keying: Keying,
}

/// What a block's key chains on (SPEC.md §13.4, §13.7).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Keying {
    /// The block's token ids: vLLM and SGLang publish them.
    #[default]
    Tokens,
    /// Dynamo's hash of the block's tokens, which is all its events carry: requests'
    /// blocks are hashed the same way, so both sides key alike.
    DynamoTokensHash,
}

/// Dynamo's seed for hashing a block's tokens without an adapter or a cache
/// namespace (`dynamo-tokens` 1.6.1 `CHAIN_XXH3_SEED`).
const DYNAMO_XXH3_SEED: u64 = 1337;

/// Dynamo's hash of one block of tokens (`compute_block_hash_for_seq` of
/// `dynamo-kv-router` 1.6.1 for the base model): XXH3-64 of the token ids as 32-bit
/// little-endian integers. The caller has checked that every id fits 32 bits.
pub fn dynamo_tokens_hash(tokens: &[u64]) -> u64 {
    let bytes: Vec<u8> = tokens
        .iter()
        .flat_map(|&t| (t as u32).to_le_bytes())
        .collect();
    xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, DYNAMO_XXH3_SEED)
}

impl Default for EventsOptions {
    fn default() -> Self {
        EventsOptions {
            block_tokens: 16,
            tenant: "default".to_owned(),
            model: None,
            keying: Keying::Tokens,
        }
    }
}

/// The adapter of requests and stores that name none.
const BASE_ADAPTER: &str = "base";
/// The only medium imported: the engines' GPU cache (vLLM `MEDIUM_GPU`, SGLang L1).
const MEDIUM_GPU: &str = "GPU";
/// The cache-group kind whose blocks are keyed by their tokens alone.
const FULL_ATTENTION: &str = "full_attention";
/// How Dynamo's vLLM worker tags a request's salt before handing it to the engine;
/// the tenant is what follows.
pub const DYNAMO_SALT_TAG: &str = "dynamo-cache-salt:";

/// The tenant a store's salt names (SPEC.md §13.4, *Extra keys*): `Ok(None)` for blocks
/// of tokens alone (and an adapter's name), `Err(())` for keys that tokens and one salt
/// on the root block do not explain, or a salt that names no tenant.
fn salt_tenant(stored: &Stored) -> Result<Option<&str>, ()> {
    let mut salt = None;
    for (i, entry) in stored.extra_keys.iter().enumerate() {
        let Some(mut keys) = entry.as_deref() else {
            continue;
        };
        if let (Some(name), [ExtraKey::Text(first), rest @ ..]) = (&stored.lora_name, keys) {
            if first == name {
                keys = rest;
            }
        }
        match keys {
            [] => {}
            [ExtraKey::Text(text)] if i == 0 && stored.parent_block_hash.is_none() => {
                salt = Some(text.as_str());
            }
            _ => return Err(()),
        }
    }
    let Some(salt) = salt else {
        return Ok(None);
    };
    match salt.strip_prefix(DYNAMO_SALT_TAG).unwrap_or(salt) {
        "" => Err(()),
        tenant => Ok(Some(tenant)),
    }
}

/// Why a logged request cannot be keyed as Dynamo keys blocks (SPEC.md §13.7):
/// Dynamo hashes token ids as 32-bit integers, and its events do not name adapters.
pub fn dynamo_request_problem(request: &LoggedRequest) -> Option<String> {
    if let Some(i) = request
        .token_ids
        .iter()
        .position(|&t| t > u64::from(u32::MAX))
    {
        return Some(format!(
            "token_ids[{i}]: expected a token id from 0 to {} (Dynamo hashes 32-bit ids), found {}",
            u32::MAX,
            request.token_ids[i]
        ));
    }
    request.adapter.as_ref().map(|_| {
        "adapter: Dynamo's events do not name adapters, so dynamo-events imports base-model requests only"
            .to_owned()
    })
}

/// The workers' model: `--model`, else the one model of the request log.
pub fn fleet_model(
    options: &EventsOptions,
    logged: &[(usize, LoggedRequest)],
) -> Result<String, String> {
    if let Some(model) = &options.model {
        return Ok(model.clone());
    }
    let models: BTreeSet<&str> = logged.iter().map(|(_, r)| r.model.as_str()).collect();
    match models.len() {
        1 => Ok(models.into_iter().next().unwrap_or_default().to_owned()),
        0 => Err("no requests name a model; give --model".to_owned()),
        n => Err(format!("requests name {n} models; give --model")),
    }
}

/// One publisher's view: the worker it is, where its numbering is, what it holds.
struct Publisher {
    worker: Arc<str>,
    last_seq: Option<u64>,
    /// The time given to the publisher's last message with a time: a later message is
    /// never placed before it (SPEC.md §13.4, *Order*).
    last_time_ms: Option<u64>,
    /// The last epoch given (or skipped).
    epoch: u64,
    table: FxHashMap<BlockHash, Held>,
}

/// A namespace's tenant and adapter (its model is the fleet's).
type TenantAdapter = (Arc<str>, Arc<str>);

/// What a publisher's table knows of one engine hash: the namespace's tenant and
/// adapter its store was given, and the key kvroute gave the block.
struct Held {
    tenant: Arc<str>,
    adapter: Arc<str>,
    key: Arc<str>,
}

/// A cache event waiting for its tick and seq.
struct Staged {
    /// `None`: before any time was known (a Dynamo stream without times), tick 0.
    time_ms: Option<u64>,
    worker: Arc<str>,
    epoch: u64,
    op: CacheOp,
}

/// The conversion's state across the capture.
pub struct Converter<'o> {
    options: &'o EventsOptions,
    tenant: Arc<str>,
    model: Arc<str>,
    publishers: BTreeMap<String, Publisher>,
    staged: Vec<Staged>,
    adapters: BTreeSet<Arc<str>>,
    earliest_ms: Option<u64>,
    /// The earliest time of a capture message, requests aside.
    earliest_message_ms: Option<u64>,
    latest: LatestTimes,
    report: ImportReport,
}

/// The latest message time seen so far and whose it was, and the latest of every
/// other publisher's: enough to tell whether a message is earlier than one of another
/// publisher before it, in constant space whatever the number of publishers.
#[derive(Default)]
struct LatestTimes {
    latest: Option<(Arc<str>, u64)>,
    /// The latest time of the publishers other than `latest`'s.
    runner_up_ms: Option<u64>,
}

impl LatestTimes {
    /// The latest time of a publisher other than `worker` seen so far.
    fn of_others(&self, worker: &Arc<str>) -> Option<u64> {
        match &self.latest {
            Some((w, t)) if w != worker => Some(*t),
            _ => self.runner_up_ms,
        }
    }

    fn saw(&mut self, worker: &Arc<str>, time_ms: u64) {
        match &mut self.latest {
            None => self.latest = Some((worker.clone(), time_ms)),
            Some((w, t)) if w == worker => *t = (*t).max(time_ms),
            Some((_, t)) if time_ms > *t => {
                // The previous leader is now the latest of the others: it was the
                // latest of all.
                self.runner_up_ms = Some(*t);
                self.latest = Some((worker.clone(), time_ms));
            }
            Some(_) => {
                self.runner_up_ms = Some(self.runner_up_ms.map_or(time_ms, |r| r.max(time_ms)));
            }
        }
    }
}

impl<'o> Converter<'o> {
    pub fn new(options: &'o EventsOptions, model: String) -> Self {
        Converter {
            options,
            tenant: options.tenant.as_str().into(),
            model: model.into(),
            publishers: BTreeMap::new(),
            staged: Vec::new(),
            adapters: BTreeSet::new(),
            earliest_ms: None,
            earliest_message_ms: None,
            latest: LatestTimes::default(),
            report: ImportReport::default(),
        }
    }

    fn saw_time(&mut self, time_ms: Option<u64>) {
        if let Some(time_ms) = time_ms {
            self.earliest_ms = Some(self.earliest_ms.map_or(time_ms, |t| t.min(time_ms)));
        }
    }

    /// Takes one message of capture line `line`.
    pub fn message(&mut self, line: usize, message: &Message, batch: Batch) {
        self.report.messages += 1;
        self.saw_time(batch.time_ms);
        if let Some(time_ms) = batch.time_ms {
            let earliest = self.earliest_message_ms.map_or(time_ms, |t| t.min(time_ms));
            self.earliest_message_ms = Some(earliest);
        }
        for field in batch.unknown_fields {
            *self.report.unknown_fields.entry(field).or_default() += 1;
        }
        let id = format!("{}|{}|dp{}", message.endpoint, message.topic, batch.rank);
        let mut publisher = self.publishers.remove(&id).unwrap_or_else(|| Publisher {
            worker: id.as_str().into(),
            last_seq: None,
            last_time_ms: None,
            epoch: 0,
            table: FxHashMap::default(),
        });
        let time_ms = self.ordered_time(&mut publisher, batch.time_ms);
        self.sequence(&mut publisher, line, message.seq, time_ms);
        for event in batch.events {
            self.event(&mut publisher, event, time_ms);
        }
        self.publishers.insert(id, publisher);
    }

    /// The time a message's events take (SPEC.md §13.4, *Order*): its batch's, unless
    /// that is earlier than the publisher's previous message, whose time it then takes
    /// so that sequence order stays the replay's order within the publisher. Counts
    /// both kinds of earlier message.
    fn ordered_time(&mut self, publisher: &mut Publisher, time_ms: Option<u64>) -> Option<u64> {
        let mut time_ms = time_ms?;
        if let Some(previous) = publisher.last_time_ms.filter(|&p| time_ms < p) {
            self.report.earlier_than_own += 1;
            time_ms = previous;
        }
        if self
            .latest
            .of_others(&publisher.worker)
            .is_some_and(|other| time_ms < other)
        {
            self.report.earlier_than_other += 1;
        }
        self.latest.saw(&publisher.worker, time_ms);
        publisher.last_time_ms = Some(time_ms);
        Some(time_ms)
    }

    /// Applies the sequence rules of SPEC.md §13.4 before a message's events.
    fn sequence(&mut self, publisher: &mut Publisher, line: usize, seq: u64, time_ms: Option<u64>) {
        let previous = publisher.last_seq.replace(seq);
        let note = |restart| SequenceNote {
            line,
            worker: publisher.worker.to_string(),
            restart,
            seq,
            previous_seq: previous.unwrap_or_default(),
        };
        match previous {
            None if seq > 0 => self.report.joined_mid_stream += 1,
            None => {}
            Some(p) if p.checked_add(1) == Some(seq) => {}
            Some(p) if seq > p => {
                self.report.note(note(false));
                publisher.epoch += 1;
            }
            Some(_) => {
                self.report.note(note(true));
                publisher.table.clear();
                self.stage(publisher, time_ms, CacheOp::Clear);
                if seq > 0 {
                    publisher.epoch += 1;
                }
            }
        }
    }

    fn stage(&mut self, publisher: &mut Publisher, time_ms: Option<u64>, op: CacheOp) {
        publisher.epoch += 1;
        self.staged.push(Staged {
            time_ms,
            worker: publisher.worker.clone(),
            epoch: publisher.epoch,
            op,
        });
    }

    fn event(&mut self, publisher: &mut Publisher, event: EngineEvent, time_ms: Option<u64>) {
        match event {
            EngineEvent::Stored(stored) => {
                self.report.stored += 1;
                if let Some(op) = self.store(publisher, *stored) {
                    self.stage(publisher, time_ms, op);
                }
            }
            EngineEvent::Removed(removed) => {
                self.report.removed += 1;
                for op in self.removal(publisher, removed) {
                    self.stage(publisher, time_ms, op);
                }
            }
            EngineEvent::Cleared => {
                self.report.cleared += 1;
                publisher.table.clear();
                self.stage(publisher, time_ms, CacheOp::Clear);
            }
            EngineEvent::Unknown(tag) => {
                self.report.unknown_type += 1;
                *self.report.unknown_types.entry(tag).or_default() += 1;
            }
        }
    }

    /// Whether a medium and a cache group are the GPU's full-attention cache, counting
    /// the event as left out when not.
    fn in_gpu_full_attention(
        &mut self,
        medium: &Option<String>,
        group_idx: Option<i128>,
        other_group: bool,
    ) -> bool {
        if medium.as_deref().is_some_and(|m| m != MEDIUM_GPU) {
            self.report.left_out.not_on_gpu += 1;
            return false;
        }
        if group_idx.is_some_and(|g| g != 0) || other_group {
            self.report.left_out.other_cache_group += 1;
            return false;
        }
        true
    }

    /// The store a `BlockStored` becomes, or `None` when it is left out.
    fn store(&mut self, publisher: &mut Publisher, stored: Stored) -> Option<CacheOp> {
        let other_group = stored
            .kv_cache_spec_kind
            .as_deref()
            .is_some_and(|k| k != FULL_ATTENTION)
            || stored.kv_cache_spec_sliding_window.is_some();
        if !self.in_gpu_full_attention(&stored.medium, stored.group_idx, other_group) {
            return None;
        }
        let blocks = stored.block_hashes.len() as u64;
        let salt = salt_tenant(&stored).map(|t| t.map(Arc::<str>::from));
        let left_out = &mut self.report.left_out;
        let counter = if salt.is_err() {
            Some(&mut left_out.extra_keys)
        } else if stored.block_size != self.options.block_tokens {
            Some(&mut left_out.other_block_size)
        } else if stored.tokens_hashes.is_some() {
            None
        } else if stored.token_ids.is_empty() && blocks > 0 {
            Some(&mut left_out.no_token_ids)
        } else if Some(stored.token_ids.len() as u64) != blocks.checked_mul(stored.block_size) {
            Some(&mut left_out.token_count)
        } else {
            None
        };
        if let Some(counter) = counter {
            *counter += 1;
            return None;
        }
        let (mut parent, parent_tenant): (Arc<str>, _) = match &stored.parent_block_hash {
            None => ("".into(), None),
            Some(hash) => match publisher.table.get(hash) {
                Some(held) => (held.key.clone(), Some(held.tenant.clone())),
                None => {
                    self.report.left_out.unknown_parent += 1;
                    return None;
                }
            },
        };
        if blocks == 0 {
            return None;
        }
        let tenant = match salt.ok().flatten() {
            Some(tenant) => self.salted(tenant),
            None => parent_tenant.unwrap_or_else(|| self.tenant.clone()),
        };
        let adapter = self.adapter_of(&stored);
        let size = usize::try_from(stored.block_size).unwrap_or(usize::MAX);
        // Each block's key material: its tokens, or Dynamo's hash of them.
        let material: Vec<Vec<u64>> = match &stored.tokens_hashes {
            Some(hashes) => hashes.iter().map(|&h| vec![h]).collect(),
            None => stored.token_ids.chunks(size).map(<[u64]>::to_vec).collect(),
        };
        let mut segments = Vec::with_capacity(stored.block_hashes.len());
        for (hash, block) in stored.block_hashes.into_iter().zip(&material) {
            let key = chained_key(&parent, block);
            let held = Held {
                tenant: tenant.clone(),
                adapter: adapter.clone(),
                key: key.clone(),
            };
            publisher.table.insert(hash, held);
            segments.push(Segment {
                key: key.clone(),
                tokens: stored.block_size,
            });
            parent = key;
        }
        Some(CacheOp::Store {
            namespace: self.namespace(tenant, adapter),
            segments,
        })
    }

    /// Counts a salted store of `tenant`, and gives the tenant's one shared name.
    fn salted(&mut self, tenant: Arc<str>) -> Arc<str> {
        if tenant == self.tenant {
            self.report.salted_default_tenant = Some(self.tenant.clone());
        }
        let salted = &mut self.report.salted;
        let name = match salted.get_key_value(&*tenant) {
            Some((name, _)) => name.clone(),
            None => tenant,
        };
        *salted.entry(name.clone()).or_default() += 1;
        name
    }

    /// `lora_name`, else `lora-id:<n>`, else the base model.
    fn adapter_of(&mut self, stored: &Stored) -> Arc<str> {
        let name = match (&stored.lora_name, stored.lora_id) {
            (Some(name), _) => name.clone(),
            (None, Some(id)) => format!("lora-id:{id}"),
            (None, None) => BASE_ADAPTER.to_owned(),
        };
        self.known_adapter(&name)
    }

    fn known_adapter(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.adapters.get(name) {
            return known.clone();
        }
        let adapter: Arc<str> = name.into();
        self.adapters.insert(adapter.clone());
        adapter
    }

    fn namespace(&self, tenant: Arc<str>, adapter: Arc<str>) -> Namespace {
        Namespace {
            tenant,
            model: self.model.clone(),
            adapter,
        }
    }

    /// The evicts a `BlockRemoved` becomes: one per tenant and adapter, in the order
    /// of its first known hash.
    fn removal(&mut self, publisher: &mut Publisher, removed: Removed) -> Vec<CacheOp> {
        if !self.in_gpu_full_attention(&removed.medium, removed.group_idx, false) {
            return Vec::new();
        }
        // Each namespace's tenant and adapter, with the keys removed from it.
        let mut by_namespace: Vec<(TenantAdapter, Vec<Arc<str>>)> = Vec::new();
        for hash in &removed.block_hashes {
            let Some(held) = publisher.table.remove(hash) else {
                self.report.left_out.unknown_removed_hashes += 1;
                continue;
            };
            let of = (held.tenant, held.adapter);
            match by_namespace.iter_mut().find(|(n, _)| *n == of) {
                Some((_, keys)) => keys.push(held.key),
                None => by_namespace.push((of, vec![held.key])),
            }
        }
        by_namespace
            .into_iter()
            .map(|((tenant, adapter), keys)| CacheOp::Evict {
                namespace: self.namespace(tenant, adapter),
                keys,
            })
            .collect()
    }

    /// The trace: workers, the staged cache events, then the requests, ticks counted
    /// from the earliest time of both inputs.
    pub fn finish(mut self, logged: Vec<(usize, LoggedRequest)>) -> (Trace, ImportReport) {
        self.report.requests = self.requests_seen(&logged);
        for (_, request) in &logged {
            self.saw_time(Some(request.arrival_ms));
            if let Some(adapter) = &request.adapter {
                self.known_adapter(adapter);
            }
        }
        let origin = self.earliest_ms.unwrap_or(0);
        let mut events: Vec<Event> = Vec::with_capacity(self.staged.len() + logged.len());
        for staged in std::mem::take(&mut self.staged) {
            events.push(Event {
                seq: events.len() as u64 + 1,
                tick: staged.time_ms.map_or(0, |t| t - origin),
                kind: EventKind::Cache {
                    worker: staged.worker,
                    epoch: staged.epoch,
                    op: staged.op,
                },
            });
        }
        let sharing = self.grants(&logged);
        for (_, request) in logged {
            let tick = request.arrival_ms - origin;
            let kind = EventKind::Request(self.request(request));
            events.push(Event {
                seq: events.len() as u64 + 1,
                tick,
                kind,
            });
        }
        let trace = Trace {
            limits: crate::input::trace::LimitsProfile::Scale,
            policy: PolicyParams {
                epochs: EpochsMode::Sequential,
                ..PolicyParams::default()
            },
            sharing,
            workers: self.workers(),
            events,
        };
        (trace, self.report)
    }

    /// How the requests meet the workers' model and the capture's time.
    fn requests_seen(&self, logged: &[(usize, LoggedRequest)]) -> super::report::RequestsSeen {
        let mut seen = super::report::RequestsSeen {
            requests: logged.len() as u64,
            workers_model: self.model.to_string(),
            ..Default::default()
        };
        for (_, request) in logged {
            if *request.model != *self.model {
                seen.of_other_model += 1;
            }
            let before = self
                .earliest_message_ms
                .and_then(|first| first.checked_sub(request.arrival_ms))
                .filter(|&before| before > 0);
            if let Some(before) = before {
                seen.before_capture += 1;
                seen.earliest_before_ms = seen.earliest_before_ms.max(before);
            }
        }
        seen
    }

    fn request(&mut self, logged: LoggedRequest) -> Request {
        let tenant: Arc<str> = logged
            .tenant
            .as_deref()
            .unwrap_or(&self.options.tenant)
            .into();
        let adapter = self.known_adapter(logged.adapter.as_deref().unwrap_or(BASE_ADAPTER));
        let size = usize::try_from(self.options.block_tokens)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut parent: Arc<str> = "".into();
        let prefix = logged
            .token_ids
            .chunks_exact(size)
            .map(|block| {
                parent = match self.options.keying {
                    Keying::Tokens => chained_key(&parent, block),
                    Keying::DynamoTokensHash => chained_key(&parent, &[dynamo_tokens_hash(block)]),
                };
                Segment {
                    key: parent.clone(),
                    tokens: self.options.block_tokens,
                }
            })
            .collect();
        Request {
            id: logged.id.into(),
            namespace: Namespace {
                tenant,
                model: logged.model.into(),
                adapter,
            },
            prefix,
            prompt_tokens: logged.token_ids.len() as u64,
            decode_tokens: logged.output_tokens,
        }
    }

    /// One grant per `(model, adapter)` that a request of another tenant than the
    /// unsalted stores' names, listing the stores' tenant and those tenants; a tenant
    /// some salt names reuses its own salted blocks only, and is in no grant.
    fn grants(&self, logged: &[(usize, LoggedRequest)]) -> Vec<Grant> {
        let mut tenants_of: BTreeMap<(&str, &str), BTreeSet<&str>> = BTreeMap::new();
        for (_, request) in logged {
            let Some(tenant) = request
                .tenant
                .as_deref()
                .filter(|t| *t != self.options.tenant && !self.report.salted.contains_key(*t))
            else {
                continue;
            };
            let adapter = request.adapter.as_deref().unwrap_or(BASE_ADAPTER);
            tenants_of
                .entry((&request.model, adapter))
                .or_insert_with(|| BTreeSet::from([self.options.tenant.as_str()]))
                .insert(tenant);
        }
        tenants_of
            .into_iter()
            .map(|((model, adapter), tenants)| Grant {
                model: model.into(),
                adapter: adapter.into(),
                tenants: tenants.into_iter().map(Arc::from).collect(),
            })
            .collect()
    }

    fn workers(&self) -> Vec<WorkerSpec> {
        let adapters: Vec<Arc<str>> = self
            .adapters
            .iter()
            .filter(|a| &***a != BASE_ADAPTER)
            .cloned()
            .collect();
        self.publishers
            .values()
            .map(|publisher| {
                WorkerSpec::idle(
                    publisher.worker.clone(),
                    self.model.clone(),
                    adapters.clone(),
                    DEFAULT_PREFILL_RATE,
                    DEFAULT_DECODE_RATE,
                )
            })
            .collect()
    }
}
