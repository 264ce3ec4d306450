//! Stage 4: the residency limit (SPEC.md §1.3), found by replaying the cache events
//! under the epoch rule ([`crate::input::epoch`]).

use super::errors::ValidationErrors;
use crate::input::compact::{CompactKind, EventStore, EventsView};
use crate::input::epoch::worker_epoch_is_news;
use crate::input::json::quote_str;
use crate::input::trace::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::hash::Hash;

/// Stage 4: the residency limit (SPEC.md §1.3). Routing never changes a cache and the
/// epoch rule reads only epochs, so replaying the cache events alone, in `(tick, seq)`
/// order, gives every worker's resident entries at every point of every policy's run.
/// Runs only after stage 3 found nothing: seqs are unique, so the order is total, and
/// every event names a worker. Each way of holding events names an entry its own way
/// (typed events by borrowed strings, an [`EventStore`] by its ids); the replay is one.
pub(crate) trait ResidencyErrors {
    fn residency_errors(&self, trace: &Trace) -> ValidationErrors;
}

/// The cache events' replay, an entry named by `K`.
struct Residency<'t, K> {
    trace: &'t Trace,
    max: usize,
    resident: Vec<FxHashSet<K>>,
    last_epoch: Vec<u64>,
    reported: Vec<bool>,
    errors: ValidationErrors,
}

impl<'t, K: Hash + Eq> Residency<'t, K> {
    fn new(trace: &'t Trace, mut entry: impl FnMut(&'t CacheEntry) -> K) -> Self {
        let resident = trace
            .workers
            .iter()
            .map(|worker| {
                worker
                    .cache
                    .iter()
                    .filter(|e| e.tokens > 0)
                    .map(&mut entry)
                    .collect()
            })
            .collect();
        Residency {
            trace,
            max: trace.limits.cache_entries_per_worker_max() as usize,
            resident,
            last_epoch: trace.workers.iter().map(|w| w.epoch).collect(),
            reported: vec![false; trace.workers.len()],
            errors: ValidationErrors::default(),
        }
    }

    /// Worker `w`'s entries when an event of `epoch` is news to it (and now its last).
    fn news(&mut self, w: usize, epoch: u64) -> Option<&mut FxHashSet<K>> {
        if !worker_epoch_is_news(self.last_epoch[w], epoch) {
            return None;
        }
        self.last_epoch[w] = epoch;
        Some(&mut self.resident[w])
    }

    /// Event `i` stored `entries` (`true`: resident, `false`: zero tokens, removed).
    fn store(&mut self, i: usize, w: usize, epoch: u64, entries: impl Iterator<Item = (K, bool)>) {
        let Some(resident) = self.news(w, epoch) else {
            return;
        };
        for (entry, held) in entries {
            if held {
                resident.insert(entry);
            } else {
                resident.remove(&entry);
            }
        }
        let held = resident.len();
        if held > self.max && !self.reported[w] {
            self.reported[w] = true;
            let (max, profile, worker) = (self.max, self.trace.limits, &self.trace.workers[w].id);
            self.errors.push_with(|| {
                (
                    format!("events[{i}]"),
                    format!(
                        "worker {} would hold {held} cache entries, over the {} limit of {max}",
                        quote_str(worker),
                        profile.name()
                    ),
                )
            });
        }
    }

    fn evict(&mut self, w: usize, epoch: u64, entries: impl Iterator<Item = K>) {
        if let Some(resident) = self.news(w, epoch) {
            for entry in entries {
                resident.remove(&entry);
            }
        }
    }

    fn clear(&mut self, w: usize, epoch: u64) {
        if let Some(resident) = self.news(w, epoch) {
            resident.clear();
        }
    }
}

/// Each worker id's index.
fn worker_indexes(trace: &Trace) -> FxHashMap<&str, usize> {
    trace
        .workers
        .iter()
        .enumerate()
        .map(|(w, worker)| (&*worker.id, w))
        .collect()
}

impl ResidencyErrors for Vec<Event> {
    fn residency_errors(&self, trace: &Trace) -> ValidationErrors {
        let index_of = worker_indexes(trace);
        let mut replay = Residency::new(trace, |e| (&e.namespace, &*e.key));
        for i in self.sorted_order() {
            let i = i as usize;
            let EventKind::Cache { worker, epoch, op } = &self[i].kind else {
                continue;
            };
            let Some(&w) = index_of.get(&**worker) else {
                continue;
            };
            match op {
                CacheOp::Store {
                    namespace,
                    segments,
                } => {
                    let entries = segments
                        .iter()
                        .map(|s| ((namespace, &*s.key), s.tokens > 0));
                    replay.store(i, w, *epoch, entries);
                }
                CacheOp::Evict { namespace, keys } => {
                    replay.evict(w, *epoch, keys.iter().map(|k| (namespace, &**k)));
                }
                CacheOp::Clear => replay.clear(w, *epoch),
            }
        }
        replay.errors
    }
}

impl ResidencyErrors for EventStore {
    /// Entries are `(namespace index, key id)` of the store; a worker's initial entry
    /// whose namespace or key no event names gets an id past the store's, one per
    /// distinct string, so that it counts and no event can touch it.
    fn residency_errors(&self, trace: &Trace) -> ValidationErrors {
        let index_of = worker_indexes(trace);
        let worker_of: Vec<Option<usize>> = self
            .names
            .strings()
            .iter()
            .map(|name| index_of.get(&**name).copied())
            .collect();
        let mut other_namespaces: FxHashMap<&Namespace, u32> = FxHashMap::default();
        let mut other_keys: FxHashMap<&str, u32> = FxHashMap::default();
        let (namespace_count, key_count) = (self.namespaces.len() as u32, self.keys.len() as u32);
        let mut replay = Residency::new(trace, |e| {
            let ns = self.namespace_id(&e.namespace).unwrap_or_else(|| {
                let next = namespace_count + other_namespaces.len() as u32;
                *other_namespaces.entry(&e.namespace).or_insert(next)
            });
            let key = self.keys.id(&e.key).unwrap_or_else(|| {
                let next = key_count + other_keys.len() as u32;
                *other_keys.entry(&e.key).or_insert(next)
            });
            (ns, key)
        });
        for i in self.sorted_order() {
            let i = i as usize;
            let (w, epoch) = match self.events()[i].kind {
                CompactKind::Store { worker, epoch, .. }
                | CompactKind::Evict { worker, epoch, .. }
                | CompactKind::Clear { worker, epoch } => (worker, epoch),
                _ => continue,
            };
            let Some(w) = worker_of[w as usize] else {
                continue;
            };
            match self.events()[i].kind {
                CompactKind::Store { ns, segments, .. } => {
                    let entries = self
                        .segments_of(segments)
                        .map(|(key, tokens)| ((ns, key), tokens > 0));
                    replay.store(i, w, epoch, entries);
                }
                CompactKind::Evict { ns, keys, .. } => {
                    replay.evict(w, epoch, self.seg_keys(keys).iter().map(|&k| (ns, k)));
                }
                _ => replay.clear(w, epoch),
            }
        }
        replay.errors
    }
}
