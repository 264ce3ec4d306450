//! Residency: every worker's resident cache entries in one index, keyed by prefix key.
//!
//! A request's reuse walk visits only the workers that hold each of its segments
//! instead of every entry of every cache, so a decision costs O(segments + holders +
//! workers). The index holds what the router believes; only the epoch rule in
//! [`crate::route::state`] changes it after the initial caches.

use crate::route::compiled::{KeyId, NsId};

/// One resident entry: which worker holds the key, under which namespace, how many
/// tokens (always more than 0: an entry with 0 tokens means "not resident").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub worker: u32,
    pub ns: NsId,
    pub tokens: u64,
    /// Where this entry's record sits in its worker's [`WorkerRecords`].
    slot: u32,
}

/// One worker's records of its resident `(key, ns)` entries, so `clear` touches only
/// that worker's entries. Each resident entry has exactly one live record, at its
/// holder's `slot`. An eviction frees the entry's record where it stands and the next
/// store on this worker reuses the freed slot (the most recently freed first), so a
/// record never moves: moving the last record into the gap cost every eviction a
/// second holder lookup, to renumber the moved record's holder, and compacting the
/// list cost one lookup per live record. The list is as long as the most entries the
/// worker has held at once since its last clear: memory follows the state at its
/// largest, as the holder lists (which keep their capacity) already do.
#[derive(Debug, Clone)]
struct WorkerRecords {
    /// A free record is `(FREE_KEY, next free slot)`, chaining the free slots.
    records: Vec<(KeyId, NsId)>,
    /// The most recently freed slot, or [`NO_SLOT`] when every record is live.
    /// (There is no count of live records: only a clear needs it, and it counts them
    /// as it goes, where a count kept up to date cost every store and eviction.)
    free_head: u32,
}

impl Default for WorkerRecords {
    fn default() -> Self {
        WorkerRecords {
            records: Vec::new(),
            free_head: NO_SLOT,
        }
    }
}

impl WorkerRecords {
    /// Every record not free, with its slot: one per resident entry.
    fn current(&self) -> impl Iterator<Item = (usize, (KeyId, NsId))> + '_ {
        let records = self.records.iter().copied().enumerate();
        records.filter(|&(_, (key, _))| key != FREE_KEY)
    }

    /// Records `(key, ns)` in a free slot if there is one, else at the end; returns its
    /// slot.
    #[inline(always)]
    fn take(&mut self, key: KeyId, ns: NsId) -> u32 {
        let slot = self.free_head;
        if slot == NO_SLOT {
            self.records.push((key, ns));
            return (self.records.len() - 1) as u32;
        }
        let record = &mut self.records[slot as usize];
        debug_assert_eq!(
            record.0, FREE_KEY,
            "slot {slot} heads the free chain but is live"
        );
        self.free_head = record.1;
        *record = (key, ns);
        slot
    }

    /// The holder of a new entry of this worker's, its record taken.
    #[inline(always)]
    fn new_holder(&mut self, worker: u32, ns: NsId, key: KeyId, tokens: u64) -> Holder {
        debug_assert!(tokens > 0, "a resident entry holds tokens");
        debug_assert_ne!(key, FREE_KEY, "a key id is below the free record's");
        let slot = self.take(key, ns);
        Holder {
            worker,
            ns,
            tokens,
            slot,
        }
    }

    /// Frees the record at `slot` for the next store.
    #[inline(always)]
    fn free(&mut self, slot: u32) {
        debug_assert!(
            (slot as usize) < self.records.len(),
            "slot {slot} is a record"
        );
        debug_assert_ne!(
            self.records[slot as usize].0, FREE_KEY,
            "slot {slot} freed twice"
        );
        self.records[slot as usize] = (FREE_KEY, self.free_head);
        self.free_head = slot;
    }
}

/// The key of a free record. Key ids index the trace's table of keys, which the input
/// limits keep far below 2^32 entries.
const FREE_KEY: KeyId = KeyId::MAX;

/// The end of a worker's chain of free slots. A worker's list holds fewer than 2^32
/// records, one per entry resident at once, for the same reason.
const NO_SLOT: u32 = u32::MAX;

/// Every worker's resident entries, indexed by key. Memory is one 24-byte slot per key
/// the trace names, one [`Holder`] per live entry (in place for a key held once, in a
/// list for a key held several times), and one per-worker record per entry the worker
/// held at its fullest since its last clear. Which records a worker holds depends on
/// its history, not only on its residency, so the index has no equality; its residency
/// is what [`CacheIndex::holders`] reads.
#[derive(Debug, Clone)]
pub struct CacheIndex {
    /// Key → its holders, sorted by `(worker, ns)` so updates find an entry by binary
    /// search and the layout never depends on the order events arrived in.
    by_key: KeyTable,
    /// Worker → its records. Unordered: only ever iterated to remove every entry, which
    /// gives the same index in any order.
    by_worker: Vec<WorkerRecords>,
}

/// Key → its holders. A heap allocation per cached block was a third of replay time,
/// and most blocks live on one worker at a time, so a key held once keeps its holder in
/// its own slot and only a key held several times has a list. The slot is a bare
/// [`Holder`], 24 bytes: a `SmallVec<[Holder; 1]>` took 40, and on the Mooncake replay
/// (183k keys) the 7.3 MB table it made cost cache misses, and its length and spill
/// tests instructions, on every store and eviction.
#[derive(Debug, Clone)]
struct KeyTable {
    /// A resident holder has tokens above 0, so a slot of 0 tokens is not one: it is
    /// [`KeyTable::NOT_HELD`] (its `slot` is [`NO_LIST`]), or the index of the key's
    /// list in `lists` (in its `slot`).
    slots: Vec<Holder>,
    /// The holders of each key held two or more times, sorted. A list that falls to one
    /// holder gives it back to its key's slot and is kept, empty, for the next key that
    /// needs one, so there are never more lists than keys held several times at once.
    lists: Vec<Vec<Holder>>,
    /// The indexes of the empty lists.
    free_lists: Vec<u32>,
}

/// A key slot's `slot` when the key has no list.
const NO_LIST: u32 = u32::MAX;

impl KeyTable {
    /// The slot of a key no entry holds.
    const NOT_HELD: Holder = Holder {
        worker: 0,
        ns: 0,
        tokens: 0,
        slot: NO_LIST,
    };

    fn new(key_count: usize) -> Self {
        KeyTable {
            slots: vec![Self::NOT_HELD; key_count],
            lists: Vec::new(),
            free_lists: Vec::new(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }

    /// What `key`'s slot holds: the one place that reads the slot's encoding.
    #[inline(always)]
    fn held(&self, key: KeyId) -> Held {
        let slot = self.slots[key as usize];
        if slot.tokens != 0 {
            Held::Once(slot)
        } else if slot.slot == NO_LIST {
            debug_assert_eq!((slot.worker, slot.ns), (0, 0), "key {key}'s empty slot");
            Held::Not
        } else {
            let list = slot.slot;
            debug_assert!(
                (list as usize) < self.lists.len(),
                "key {key}'s list {list}"
            );
            debug_assert!(
                self.lists[list as usize].len() >= 2,
                "key {key}'s list {list}"
            );
            Held::List(list)
        }
    }

    #[inline(always)]
    fn holders(&self, key: KeyId) -> &[Holder] {
        let holders = match self.held(key) {
            Held::Once(_) => std::slice::from_ref(&self.slots[key as usize]),
            Held::Not => &[],
            Held::List(list) => &self.lists[list as usize],
        };
        debug_assert!(sorted_and_unique(holders), "key {key}'s holders");
        debug_assert!(holders.iter().all(|h| h.tokens > 0), "key {key}'s holders");
        holders
    }

    /// The slot of a key whose holders are `list`.
    fn list_slot(list: u32) -> Holder {
        Holder {
            slot: list,
            ..Self::NOT_HELD
        }
    }

    /// Sets the tokens (above 0) `worker` holds for `key` under `ns`; a new entry takes
    /// one of `records`, the worker's.
    #[inline(always)]
    fn store(
        &mut self,
        records: &mut WorkerRecords,
        worker: u32,
        ns: NsId,
        key: KeyId,
        tokens: u64,
    ) {
        debug_assert!(tokens > 0, "a store of 0 tokens is a removal");
        // Nearly every store is of a key no worker holds: answered by the slot alone.
        match self.held(key) {
            Held::Not => self.slots[key as usize] = records.new_holder(worker, ns, key, tokens),
            Held::Once(held) if held.worker == worker && held.ns == ns => {
                self.slots[key as usize].tokens = tokens
            }
            Held::Once(held) => {
                let added = records.new_holder(worker, ns, key, tokens);
                self.make_list(key, held, added);
            }
            Held::List(list) => self.store_in_list(records, list, worker, ns, key, tokens),
        }
    }

    /// Removes `(worker, ns)`'s entry of `key`, if there is one; returns the slot of its
    /// record, for the caller to free.
    #[inline(always)]
    fn remove(&mut self, key: KeyId, worker: u32, ns: NsId) -> Option<u32> {
        // Nearly every eviction removes a key's only holder: answered by the slot alone.
        match self.held(key) {
            Held::Not => None,
            Held::Once(held) if held.worker == worker && held.ns == ns => {
                self.slots[key as usize] = Self::NOT_HELD;
                debug_assert_ne!(held.slot, NO_SLOT, "key {key}'s holder has a record");
                Some(held.slot)
            }
            Held::Once(_) => None,
            Held::List(list) => self.remove_from_list(key, list, worker, ns),
        }
    }

    /// Gives `key`, held once by `held`, a list of `held` and `added`, in order.
    #[cold]
    #[inline(never)]
    fn make_list(&mut self, key: KeyId, held: Holder, added: Holder) {
        debug_assert_ne!(
            (added.worker, added.ns),
            (held.worker, held.ns),
            "key {key}"
        );
        let pair = if (added.worker, added.ns) < (held.worker, held.ns) {
            [added, held]
        } else {
            [held, added]
        };
        let list = match self.free_lists.pop() {
            Some(list) => list,
            None => {
                self.lists.push(Vec::new());
                (self.lists.len() - 1) as u32
            }
        };
        debug_assert!(self.lists[list as usize].is_empty(), "list {list} is free");
        self.lists[list as usize].extend(pair);
        self.slots[key as usize] = Self::list_slot(list);
    }

    /// [`KeyTable::store`] for a key whose holders are list `list`.
    #[cold]
    #[inline(never)]
    fn store_in_list(
        &mut self,
        records: &mut WorkerRecords,
        list: u32,
        worker: u32,
        ns: NsId,
        key: KeyId,
        tokens: u64,
    ) {
        let holders = &mut self.lists[list as usize];
        match find(holders, worker, ns) {
            Ok(i) => holders[i].tokens = tokens,
            Err(i) => holders.insert(i, records.new_holder(worker, ns, key, tokens)),
        }
        debug_assert!(sorted_and_unique(holders), "key {key}'s list {list}");
    }

    /// [`KeyTable::remove`] for a key whose holders are list `list`. A list left with
    /// one holder gives it back to the key's slot and is kept for the next key that
    /// needs one.
    #[cold]
    #[inline(never)]
    fn remove_from_list(&mut self, key: KeyId, list: u32, worker: u32, ns: NsId) -> Option<u32> {
        let holders = &mut self.lists[list as usize];
        let removed = holders.remove(find(holders, worker, ns).ok()?);
        if let [only] = holders[..] {
            self.slots[key as usize] = only;
            holders.clear();
            self.free_lists.push(list);
        }
        debug_assert!(
            holders.is_empty() || holders.len() >= 2,
            "key {key}'s list {list}"
        );
        debug_assert_eq!(
            (removed.worker, removed.ns),
            (worker, ns),
            "key {key}'s list"
        );
        Some(removed.slot)
    }
}

/// Whether `holders` is sorted by `(worker, ns)` with no pair twice: the order every
/// key's holders keep, which the binary searches and the reuse walk's runs rely on.
fn sorted_and_unique(holders: &[Holder]) -> bool {
    let pairs = holders.windows(2);
    pairs
        .into_iter()
        .all(|p| (p[0].worker, p[0].ns) < (p[1].worker, p[1].ns))
}

/// What a key's slot holds ([`KeyTable::held`]).
enum Held {
    /// No entry holds the key.
    Not,
    /// One entry does: this holder, which is the slot itself.
    Once(Holder),
    /// Two or more do: the index of their list.
    List(u32),
}

impl CacheIndex {
    pub fn new(key_count: usize, worker_count: usize) -> Self {
        CacheIndex {
            by_key: KeyTable::new(key_count),
            by_worker: vec![WorkerRecords::default(); worker_count],
        }
    }

    /// The entries resident under `key`, on any worker and in any namespace.
    #[inline(always)]
    pub fn holders(&self, key: KeyId) -> &[Holder] {
        self.by_key.holders(key)
    }

    /// The tokens `worker` holds for `key` under `ns` (0 when absent). Routing reads
    /// whole holder lists; this point lookup is for tests.
    #[cfg(test)]
    pub fn resident(&self, worker: u32, ns: NsId, key: KeyId) -> u64 {
        let holders = self.holders(key);
        find(holders, worker, ns).map_or(0, |i| holders[i].tokens)
    }

    /// Every resident entry as `(key, worker, ns, tokens)`, in key order: the index's
    /// residency without its records (for tests that compare two states).
    #[cfg(test)]
    pub fn residency(&self) -> Vec<(KeyId, u32, NsId, u64)> {
        let keys = 0..self.by_key.len() as KeyId;
        keys.flat_map(|key| {
            self.holders(key)
                .iter()
                .map(move |h| (key, h.worker, h.ns, h.tokens))
        })
        .collect()
    }

    /// How many entries are resident in all. For tests: it checks that every live
    /// record names a resident entry whose holder points back at it, that the chain of
    /// free slots holds every other record once,
    /// and that the key lists are exactly those of the keys held several times, each
    /// sorted, plus the empty ones, which are each free once.
    #[cfg(test)]
    pub fn live_entries(&self) -> usize {
        let mut resident = 0;
        for (worker, records) in self.by_worker.iter().enumerate() {
            let mut live = 0;
            for (slot, (key, ns)) in records.current() {
                live += 1;
                let holders = self.holders(key);
                let i = find(holders, worker as u32, ns).expect("a live record is resident");
                assert_eq!(holders[i].slot as usize, slot, "worker {worker}'s record");
            }
            let mut free = 0;
            let mut slot = records.free_head;
            while slot != NO_SLOT {
                let (key, next) = records.records[slot as usize];
                assert_eq!(
                    key, FREE_KEY,
                    "worker {worker}'s slot {slot} is chained but live"
                );
                free += 1;
                assert!(
                    free <= records.records.len(),
                    "worker {worker}'s free chain loops"
                );
                slot = next;
            }
            assert_eq!(
                live + free,
                records.records.len(),
                "worker {worker}'s records"
            );
            resident += live;
        }
        let table = &self.by_key;
        let mut listed = vec![0; table.lists.len()];
        for key in 0..table.len() as KeyId {
            if let Held::List(list) = table.held(key) {
                let holders = &table.lists[list as usize];
                assert!(
                    holders.len() >= 2,
                    "key {key}'s list holds {}",
                    holders.len()
                );
                let order = holders.windows(2);
                assert!(order
                    .into_iter()
                    .all(|p| (p[0].worker, p[0].ns) < (p[1].worker, p[1].ns)));
                listed[list as usize] += 1;
            }
        }
        for &list in &table.free_lists {
            assert!(
                table.lists[list as usize].is_empty(),
                "free list {list} holds entries"
            );
            listed[list as usize] += 1;
        }
        assert!(
            listed.iter().all(|&n| n == 1),
            "a list is not one key's or free once"
        );
        let held: usize = (0..table.len() as KeyId)
            .map(|key| self.holders(key).len())
            .sum();
        assert_eq!(held, resident, "holders without a live record");
        resident
    }

    /// How many key lists the index keeps: at most the keys held several times at once.
    #[cfg(test)]
    fn lists_kept(&self) -> usize {
        self.by_key.lists.len()
    }

    /// Sets the resident tokens of one entry; 0 removes it. Inlined into the callers'
    /// loops over an event's keys: a call's set-up was a fifth of its work.
    #[inline(always)]
    pub fn set(&mut self, worker: u32, ns: NsId, key: KeyId, tokens: u64) {
        crate::route::cache::work::count(1);
        self.set_counted_by_caller(worker, ns, key, tokens);
    }

    /// [`CacheIndex::set`] for a caller that has already counted the operation, as the
    /// loop over a cache event's keys does once for them all.
    #[inline(always)]
    pub fn set_counted_by_caller(&mut self, worker: u32, ns: NsId, key: KeyId, tokens: u64) {
        self.set_each_counted_by_caller(worker, ns, [(key, tokens)]);
    }

    /// [`CacheIndex::set_counted_by_caller`] of every `(key, tokens)` of `entries` in
    /// turn, for one worker and namespace: one store's segments or one eviction's keys.
    /// The worker's records are looked up once for them all, not once a key.
    #[inline(always)]
    pub fn set_each_counted_by_caller(
        &mut self,
        worker: u32,
        ns: NsId,
        entries: impl IntoIterator<Item = (KeyId, u64)>,
    ) {
        let records = &mut self.by_worker[worker as usize];
        for (key, tokens) in entries {
            debug_assert!(
                (key as usize) < self.by_key.slots.len(),
                "key {key} is in the table"
            );
            if tokens > 0 {
                self.by_key.store(records, worker, ns, key, tokens);
            } else if let Some(slot) = self.by_key.remove(key, worker, ns) {
                records.free(slot);
            }
        }
    }

    /// Removes every entry of one worker for which `keep` says no (the `key_epoch`
    /// clear, which keeps what the worker stored after it).
    pub fn retain_worker(&mut self, worker: u32, mut keep: impl FnMut(NsId, KeyId) -> bool) {
        let dropped: Vec<(KeyId, NsId)> = self.by_worker[worker as usize]
            .current()
            .map(|(_, entry)| entry)
            .filter(|&(key, ns)| !keep(ns, key))
            .collect();
        for (key, ns) in dropped {
            self.set(worker, ns, key, 0);
        }
    }

    /// Removes every entry of one worker.
    pub fn clear(&mut self, worker: u32) {
        let mut records = std::mem::take(&mut self.by_worker[worker as usize]);
        // The records are reset whole below, so a removed entry's is not freed.
        let mut removed = 0;
        for (slot, (key, ns)) in records.current() {
            let held_at = self.by_key.remove(key, worker, ns);
            debug_assert_eq!(
                held_at,
                Some(slot as u32),
                "worker {worker}'s record of key {key}"
            );
            removed += 1;
        }
        // One operation per entry removed: a free record passed over was paid for by
        // the store that pushed it.
        crate::route::cache::work::count(removed);
        // The list keeps its allocation for the worker's next entries.
        records.records.clear();
        records.free_head = NO_SLOT;
        self.by_worker[worker as usize] = records;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A long churn of stores, evictions, clears and key-epoch clears on a few workers,
    /// keys and namespaces, against a plain map of what is resident. After every step
    /// the index holds exactly the map's entries, every live record points at its
    /// holder and back, and a worker's list is exactly as long as the most entries it
    /// has held at once since its last clear, however many evictions (and so freed and
    /// reused slots) there have been; and the index keeps exactly as many key lists as
    /// the most keys held several times at once.
    #[test]
    fn churn_keeps_the_index_equal_to_a_plain_map_and_its_records_bounded() {
        const WORKERS: u32 = 3;
        const KEYS: u32 = 40;
        let mut index = CacheIndex::new(KEYS as usize, WORKERS as usize);
        let mut model: BTreeMap<(KeyId, u32, NsId), u64> = BTreeMap::new();
        // A fixed linear congruential sequence: the same steps on every run.
        let mut sequence = crate::fixed_sequence::FixedSequence::new(0x2545_f491_4f6c_dd1d);
        let mut next = |bound: u64| sequence.below(bound);
        // Each worker's most entries resident at once since its last clear.
        let mut peak = [0usize; WORKERS as usize];
        // The most keys held several times at once: the lists the index may keep.
        let mut shared_keys_peak = 0;
        let mut reused = false;
        for step in 0..20_000 {
            let worker = next(u64::from(WORKERS)) as u32;
            let (key, ns) = (next(u64::from(KEYS)) as KeyId, next(2) as NsId);
            // Clears are rare, so freed slots pile up and are reused between them.
            match next(1000) {
                0 => {
                    index.clear(worker);
                    model.retain(|&(_, w, _), _| w != worker);
                    peak[worker as usize] = 0;
                }
                1 => {
                    // Keeps the even keys.
                    index.retain_worker(worker, |_, key| key % 2 == 0);
                    model.retain(|&(key, w, _), _| w != worker || key % 2 == 0);
                }
                2..=499 => {
                    let tokens = 1 + next(9);
                    let records = &index.by_worker[worker as usize];
                    let (before, had_free) = (records.records.len(), records.free_head != NO_SLOT);
                    index.set(worker, ns, key, tokens);
                    let new = model.insert((key, worker, ns), tokens).is_none();
                    // A new entry on a worker with a free slot takes it.
                    reused |= new && had_free;
                    let after = index.by_worker[worker as usize].records.len();
                    assert_eq!(after, before + usize::from(new && !had_free), "step {step}");
                }
                _ => {
                    index.set(worker, ns, key, 0);
                    model.remove(&(key, worker, ns));
                }
            }
            shared_keys_peak =
                check_against_model(&index, &model, &mut peak, shared_keys_peak, step, KEYS);
        }
        assert!(reused, "the churn never reused a freed slot");
    }

    /// After a churn step: the index holds exactly `model`'s entries, keeps a key list
    /// per key held several times at the peak, and each worker's records are its peak.
    /// Returns the new peak of shared keys.
    fn check_against_model(
        index: &CacheIndex,
        model: &BTreeMap<(KeyId, u32, NsId), u64>,
        peak: &mut [usize],
        mut shared_keys_peak: usize,
        step: usize,
        keys: u32,
    ) -> usize {
        assert_eq!(index.live_entries(), model.len(), "step {step}");
        let mut holders_of_key = BTreeMap::new();
        for &(key, _, _) in model.keys() {
            *holders_of_key.entry(key).or_insert(0) += 1;
        }
        let shared_keys = holders_of_key.values().filter(|&&n| n >= 2).count();
        shared_keys_peak = shared_keys_peak.max(shared_keys);
        assert_eq!(
            index.lists_kept(),
            shared_keys_peak,
            "step {step}: key lists"
        );
        for (w, peak) in peak.iter_mut().enumerate() {
            let live = model
                .keys()
                .filter(|&&(_, held_by, _)| held_by as usize == w);
            *peak = (*peak).max(live.count());
            let records = index.by_worker[w].records.len();
            assert_eq!(records, *peak, "step {step}, worker {w}'s records");
        }
        for key in 0..keys {
            let held: Vec<_> = index
                .holders(key)
                .iter()
                .map(|h| (h.worker, h.ns, h.tokens))
                .collect();
            let expected: Vec<_> = model
                .range((key, 0, 0)..=(key, u32::MAX, NsId::MAX))
                .map(|(&(_, w, ns), &tokens)| (w, ns, tokens))
                .collect();
            assert_eq!(held, expected, "step {step}, key {key}");
        }
        shared_keys_peak
    }
}
