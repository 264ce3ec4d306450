//! Residency: every worker's resident cache entries in one index, keyed by prefix key.
//!
//! A request's reuse walk visits only the workers that hold each of its segments
//! instead of every entry of every cache, so a decision costs O(segments + holders +
//! workers). The index holds what the router believes; only the epoch rule in
//! [`crate::route::state`] changes it after the initial caches.

use crate::route::compiled::{KeyId, NsId};
use smallvec::SmallVec;

/// One resident entry: which worker holds the key, under which namespace, how many
/// tokens (always more than 0: an entry with 0 tokens means "not resident").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub worker: u32,
    pub ns: NsId,
    pub tokens: u64,
    /// Where this entry sits in its worker's entry list (for O(1) removal).
    slot: u32,
}

/// Every worker's resident entries, indexed by key. Memory is one slot per key the
/// trace names plus one [`Holder`] and one per-worker record per live entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheIndex {
    /// Key → its holders, sorted by `(worker, ns)` so updates find an entry by binary
    /// search and the layout never depends on the order events arrived in. Most blocks
    /// live on one or two workers, so two holders are stored inline: a heap allocation
    /// per cached block was a third of replay time.
    by_key: Vec<SmallVec<[Holder; 2]>>,
    /// Worker → its live `(key, ns)` entries, so `clear` touches only that worker's.
    /// Unordered: only ever iterated to remove every entry, which gives the same index
    /// in any order.
    by_worker: Vec<Vec<(KeyId, NsId)>>,
}

impl CacheIndex {
    pub fn new(key_count: usize, worker_count: usize) -> Self {
        // Built empty rather than cloned from one empty list: cloning a `SmallVec` goes
        // through its `extend`, tens of instructions a key on a trace of many keys.
        let mut by_key = Vec::with_capacity(key_count);
        by_key.resize_with(key_count, SmallVec::new);
        CacheIndex {
            by_key,
            by_worker: vec![Vec::new(); worker_count],
        }
    }

    /// The entries resident under `key`, on any worker and in any namespace.
    pub fn holders(&self, key: KeyId) -> &[Holder] {
        &self.by_key[key as usize]
    }

    /// The tokens `worker` holds for `key` under `ns` (0 when absent). Routing reads
    /// whole holder lists; this point lookup is for tests.
    #[cfg(test)]
    pub fn resident(&self, worker: u32, ns: NsId, key: KeyId) -> u64 {
        let holders = &self.by_key[key as usize];
        find(holders, worker, ns).map_or(0, |i| holders[i].tokens)
    }

    /// How many entries are resident in all (for tests: it checks the per-worker lists
    /// stay in step with the holders).
    #[cfg(test)]
    pub fn live_entries(&self) -> usize {
        self.by_worker.iter().map(Vec::len).sum()
    }

    /// Sets the resident tokens of one entry; 0 removes it.
    pub fn set(&mut self, worker: u32, ns: NsId, key: KeyId, tokens: u64) {
        crate::route::cache::work::count(1);
        let holders = &mut self.by_key[key as usize];
        match find(holders, worker, ns) {
            Ok(i) if tokens == 0 => {
                // The last holder (nearly always the only one) pops without a shift.
                let removed = if i + 1 == holders.len() {
                    holders.pop()
                } else {
                    Some(holders.remove(i))
                };
                if let Some(removed) = removed {
                    self.forget(worker, removed.slot);
                }
            }
            Ok(i) => holders[i].tokens = tokens,
            Err(_) if tokens == 0 => {}
            Err(i) => {
                let entries = &mut self.by_worker[worker as usize];
                let slot = entries.len() as u32;
                entries.push((key, ns));
                let holder = Holder {
                    worker,
                    ns,
                    tokens,
                    slot,
                };
                // A new last holder (nearly always the first) is pushed without a shift.
                if i == holders.len() {
                    holders.push(holder);
                } else {
                    holders.insert(i, holder);
                }
            }
        }
    }

    /// Drops a worker's entry record at `slot`, moving its last record into the gap.
    fn forget(&mut self, worker: u32, slot: u32) {
        let entries = &mut self.by_worker[worker as usize];
        entries.swap_remove(slot as usize);
        if let Some(&(key, ns)) = entries.get(slot as usize) {
            let holders = &mut self.by_key[key as usize];
            if let Ok(i) = find(holders, worker, ns) {
                holders[i].slot = slot;
            }
        }
    }

    /// Removes every entry of one worker for which `keep` says no (the `key_epoch`
    /// clear, which keeps what the worker stored after it).
    pub fn retain_worker(&mut self, worker: u32, mut keep: impl FnMut(NsId, KeyId) -> bool) {
        let dropped: Vec<(KeyId, NsId)> = self.by_worker[worker as usize]
            .iter()
            .copied()
            .filter(|&(key, ns)| !keep(ns, key))
            .collect();
        for (key, ns) in dropped {
            self.set(worker, ns, key, 0);
        }
    }

    /// Removes every entry of one worker.
    pub fn clear(&mut self, worker: u32) {
        let entries = std::mem::take(&mut self.by_worker[worker as usize]);
        crate::route::cache::work::count(entries.len() as u64);
        for (key, ns) in entries {
            let holders = &mut self.by_key[key as usize];
            if let Ok(i) = find(holders, worker, ns) {
                holders.remove(i);
            }
        }
    }
}

/// The position of `(worker, ns)` among a key's sorted holders, as a binary search
/// gives it. Most keys have one or two holders, which a linear scan finds without a
/// binary search's set-up; a long list is still searched in O(log holders).
#[inline]
fn find(holders: &[Holder], worker: u32, ns: NsId) -> Result<usize, usize> {
    let wanted = (worker, ns);
    if holders.len() > 4 {
        return holders.binary_search_by_key(&wanted, |h| (h.worker, h.ns));
    }
    for (i, h) in holders.iter().enumerate() {
        let at = (h.worker, h.ns);
        if at >= wanted {
            return if at == wanted { Ok(i) } else { Err(i) };
        }
    }
    Err(holders.len())
}
