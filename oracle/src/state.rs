//! SPEC §3, state and time: the router-side view of one worker (§3, §3.1 drain), the
//! stale rules a cache event passes through (§3.2), load observations (§3.3) and the
//! evidence gaps of sequential epochs (§3.6, with SPEC's letters `H` and `R`).
//!
//! The cache is a map per worker from a key to the namespaces holding it, so that a
//! request's walk (§4.3) looks a segment's key up and visits only what is resident
//! under it; the view also keeps the number of its resident entries (§1.3), which the
//! residency limit asks after every store. Entries of 0 tokens are no entries (§3) and
//! are never kept.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{EventKind, StaleRule, Worker};

/// `(tenant, model, adapter)`: the namespace of a cache entry.
pub type Namespace = (String, String, String);

/// A worker's cache: key → the namespaces holding it, each with its tokens (more
/// than 0), in the order they were first stored; a namespace appears once per key.
pub type Cache = BTreeMap<String, Vec<(Namespace, u64)>>;

/// The view of SPEC §3 of one worker, for one policy's run.
#[derive(Debug, Clone)]
pub struct WorkerView {
    pub id: String,
    pub model: String,
    pub adapters: Vec<String>,
    pub prefill_rate: u64,
    pub decode_rate: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    /// The largest epoch of an applied cache event (`worker_epoch` rule).
    pub last_epoch: u64,
    pub observed_tick: u64,
    /// The tick of the last applied cache event, absent at the start.
    pub last_cache_tick: Option<u64>,
    pub cache: Cache,
    /// The number of entries in `cache`: the worker's resident entries (§1.3).
    pub resident: usize,
    /// `key_epoch` only: the floor.
    pub floor: u64,
    /// `key_epoch` only: the key epoch per `(tenant, model, adapter, key)`; a key epoch
    /// whose key is not resident is a tombstone.
    pub key_epochs: BTreeMap<(Namespace, String), u64>,
    /// `sequential` only: `H`.
    pub h: u64,
    /// `sequential` only: `R`, the received epochs above `H`.
    pub r: BTreeSet<u64>,
}

impl WorkerView {
    /// The view at the start of a run, from `workers[]`.
    pub fn initial(worker: &Worker) -> WorkerView {
        let mut cache = Cache::new();
        for entry in &worker.cache {
            if entry.tokens > 0 {
                let namespace = (
                    entry.tenant.clone(),
                    entry.model.clone(),
                    entry.adapter.clone(),
                );
                // Stage 3 rejects a cache listing a namespaced key twice.
                cache
                    .entry(entry.key.clone())
                    .or_insert_with(|| Vec::with_capacity(1))
                    .push((namespace, entry.tokens));
            }
        }
        WorkerView {
            id: worker.id.clone(),
            model: worker.model.clone(),
            adapters: worker.adapters.clone(),
            prefill_rate: worker.prefill_rate,
            decode_rate: worker.decode_rate,
            queued_prefill: worker.queued_prefill,
            active_decode: worker.active_decode,
            last_epoch: worker.epoch,
            observed_tick: worker.observed_tick,
            last_cache_tick: None,
            resident: cache.values().map(Vec::len).sum(),
            cache,
            floor: worker.epoch,
            key_epochs: BTreeMap::new(),
            h: worker.epoch,
            r: BTreeSet::new(),
        }
    }

    /// `last_heard = max(observed_tick, last_cache_tick)` (§3).
    pub fn last_heard(&self) -> u64 {
        match self.last_cache_tick {
            Some(tick) => self.observed_tick.max(tick),
            None => self.observed_tick,
        }
    }

    /// The worker has a gap while `R` is not empty (§3.6).
    pub fn has_gap(&self) -> bool {
        !self.r.is_empty()
    }

    /// §3.1: what the worker drains in `dt` ticks (the products saturate).
    pub fn drain(&mut self, dt: u64) {
        let prefill = self.prefill_rate.saturating_mul(dt);
        self.queued_prefill -= self.queued_prefill.min(prefill);
        let decode = self.decode_rate.saturating_mul(dt);
        self.active_decode -= self.active_decode.min(decode);
    }

    /// The entries resident under `key`: each namespace holding it, with its tokens.
    pub fn holders(&self, key: &str) -> &[(Namespace, u64)] {
        self.cache.get(key).map_or(&[], Vec::as_slice)
    }

    /// Sets `cache[(namespace, key)] = tokens`; 0 tokens is no entry.
    fn set(&mut self, namespace: &Namespace, key: &str, tokens: u64) {
        if tokens == 0 {
            self.remove(namespace, key);
            return;
        }
        let holders = match self.cache.get_mut(key) {
            Some(holders) => holders,
            // Most keys are held by one namespace: room for one, grown when needed.
            None => self
                .cache
                .entry(key.to_owned())
                .or_insert_with(|| Vec::with_capacity(1)),
        };
        match holders.iter_mut().find(|(n, _)| n == namespace) {
            Some((_, held)) => *held = tokens,
            None => {
                holders.push((namespace.clone(), tokens));
                self.resident += 1;
            }
        }
    }

    /// Removes `(namespace, key)`; an absent entry is ignored.
    fn remove(&mut self, namespace: &Namespace, key: &str) {
        let Some(holders) = self.cache.get_mut(key) else {
            return;
        };
        let before = holders.len();
        holders.retain(|(n, _)| n != namespace);
        self.resident -= before - holders.len();
        if holders.is_empty() {
            self.cache.remove(key);
        }
    }

    /// Removes every entry (a `clear` applied whole).
    fn clear(&mut self) {
        self.cache.clear();
        self.resident = 0;
    }
}

/// What the stale rule did with a cache event (§3.2, §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOutcome {
    /// `applied`, `stale_epoch`, `stale_key_epoch` or `partly_stale_key_epoch`.
    pub outcome: &'static str,
    /// The rejected mutations (`key_epoch` only; 0 otherwise).
    pub stale_mutations: u64,
}

impl CacheOutcome {
    const APPLIED: CacheOutcome = CacheOutcome {
        outcome: "applied",
        stale_mutations: 0,
    };

    /// Dropped whole: counted by `stale_event_rejections` (§6.2).
    pub fn dropped_whole(self) -> bool {
        matches!(self.outcome, "stale_epoch" | "stale_key_epoch")
    }
}

/// The namespace of a store or evict.
fn namespace_of(tenant: &str, model: &str, adapter: &str) -> Namespace {
    (tenant.to_owned(), model.to_owned(), adapter.to_owned())
}

/// §3.2: applies a cache event at `tick` with epoch `epoch` to its worker under `rule`.
pub fn apply_cache_event(
    view: &mut WorkerView,
    rule: StaleRule,
    kind: &EventKind,
    epoch: u64,
    tick: u64,
) -> CacheOutcome {
    match rule {
        StaleRule::WorkerEpoch => {
            if epoch <= view.last_epoch {
                return CacheOutcome {
                    outcome: "stale_epoch",
                    stale_mutations: 0,
                };
            }
            view.last_epoch = epoch;
            view.last_cache_tick = Some(tick);
            apply_whole(view, kind);
            CacheOutcome::APPLIED
        }
        StaleRule::ArrivalOrder => {
            view.last_cache_tick = Some(tick);
            apply_whole(view, kind);
            CacheOutcome::APPLIED
        }
        StaleRule::KeyEpoch => {
            let outcome = apply_key_epoch(view, kind, epoch);
            if outcome.outcome != "stale_key_epoch" {
                view.last_cache_tick = Some(tick);
            }
            outcome
        }
    }
}

/// A cache event applied whole (`worker_epoch`, `arrival_order`).
fn apply_whole(view: &mut WorkerView, kind: &EventKind) {
    match kind {
        EventKind::Store {
            tenant,
            model,
            adapter,
            segments,
            ..
        } => {
            let namespace = namespace_of(tenant, model, adapter);
            for segment in segments {
                view.set(&namespace, &segment.key, segment.tokens);
            }
        }
        EventKind::Evict {
            tenant,
            model,
            adapter,
            keys,
            ..
        } => {
            let namespace = namespace_of(tenant, model, adapter);
            for key in keys {
                view.remove(&namespace, key);
            }
        }
        EventKind::Clear { .. } => view.clear(),
        EventKind::Load { .. } | EventKind::Request { .. } => {}
    }
}

/// The `key_epoch` rule of §3.2.
fn apply_key_epoch(view: &mut WorkerView, kind: &EventKind, e: u64) -> CacheOutcome {
    let (namespace, keys, tokens): (Namespace, Vec<&str>, Option<Vec<u64>>) = match kind {
        EventKind::Clear { .. } => return key_epoch_clear(view, e),
        EventKind::Store {
            tenant,
            model,
            adapter,
            segments,
            ..
        } => (
            namespace_of(tenant, model, adapter),
            segments.iter().map(|s| s.key.as_str()).collect(),
            Some(segments.iter().map(|s| s.tokens).collect()),
        ),
        EventKind::Evict {
            tenant,
            model,
            adapter,
            keys,
            ..
        } => (
            namespace_of(tenant, model, adapter),
            keys.iter().map(String::as_str).collect(),
            None,
        ),
        EventKind::Load { .. } | EventKind::Request { .. } => return CacheOutcome::APPLIED,
    };
    if keys.is_empty() {
        let outcome = if e > view.floor {
            "applied"
        } else {
            "stale_key_epoch"
        };
        return CacheOutcome {
            outcome,
            stale_mutations: 0,
        };
    }
    // Each distinct key is judged once, against the state before the event.
    let mut accepted: BTreeMap<&str, bool> = BTreeMap::new();
    for key in &keys {
        let ke = view
            .key_epochs
            .get(&(namespace.clone(), (*key).to_owned()))
            .copied()
            .unwrap_or(view.floor);
        accepted.entry(key).or_insert(e > view.floor && e > ke);
    }
    let mut applied = 0u64;
    let mut rejected = 0u64;
    for (i, key) in keys.iter().enumerate() {
        if !accepted.get(key).copied().unwrap_or(false) {
            rejected += 1;
            continue;
        }
        applied += 1;
        match &tokens {
            Some(tokens) => view.set(&namespace, key, tokens.get(i).copied().unwrap_or(0)),
            None => view.remove(&namespace, key),
        }
        view.key_epochs
            .insert((namespace.clone(), (*key).to_owned()), e);
    }
    let outcome = if rejected == 0 {
        "applied"
    } else if applied == 0 {
        "stale_key_epoch"
    } else {
        "partly_stale_key_epoch"
    };
    CacheOutcome {
        outcome,
        stale_mutations: rejected,
    }
}

/// A `clear` under `key_epoch`: applied iff `e > floor`; keeps only the entries and
/// tombstones whose key epoch is above `e`.
fn key_epoch_clear(view: &mut WorkerView, e: u64) -> CacheOutcome {
    if e <= view.floor {
        return CacheOutcome {
            outcome: "stale_key_epoch",
            stale_mutations: 1,
        };
    }
    let key_epochs = &view.key_epochs;
    for (key, holders) in view.cache.iter_mut() {
        holders.retain(|(namespace, _)| {
            matches!(key_epochs.get(&(namespace.clone(), key.clone())), Some(ke) if *ke > e)
        });
    }
    view.cache.retain(|_, holders| !holders.is_empty());
    view.resident = view.cache.values().map(Vec::len).sum();
    view.key_epochs.retain(|_, ke| *ke > e);
    view.floor = e;
    CacheOutcome::APPLIED
}

/// §3.6: the arrival of epoch `e` at a worker under sequential epochs; `resyncs` for a
/// `clear` the stale rule applied. Returns whether the worker went from no gap to a gap.
pub fn receive_epoch(view: &mut WorkerView, e: u64, resyncs: bool) -> bool {
    let had = view.has_gap();
    if e > view.h {
        view.r.insert(e);
    }
    if resyncs {
        view.h = view.h.max(e);
        let h = view.h;
        view.r.retain(|x| *x > h);
    }
    while let Some(next) = view.h.checked_add(1) {
        if !view.r.remove(&next) {
            break;
        }
        view.h = next;
    }
    !had && view.has_gap()
}

/// §3.3: a load observation; `true` when applied.
pub fn observe(view: &mut WorkerView, observed_tick: u64, queued: u64, active: u64) -> bool {
    if observed_tick < view.observed_tick {
        return false;
    }
    view.queued_prefill = queued;
    view.active_decode = active;
    view.observed_tick = observed_tick;
    true
}
