//! One worker's true KV cache in the engine model (SPEC.md §11, *Cache*): an LRU over
//! `(namespace, key)` entries, counted in tokens or in blocks.

use crate::mutant::{active, Mutant};
use crate::route::compiled::{KeyId, NsId};
use crate::simulate::options::Capacity;
use std::collections::{BTreeMap, HashMap};

/// One worker's true cache: an LRU over `(namespace, key)` entries.
#[derive(Debug, Default)]
pub struct Lru {
    /// Entry → (tokens, stamp of its last use). Lookups only.
    entries: HashMap<(NsId, KeyId), (u64, u64)>,
    /// Stamp → entry, oldest first: the eviction order.
    by_age: BTreeMap<u64, (NsId, KeyId)>,
    used: u64,
}

impl Lru {
    pub fn weight(capacity: Capacity, tokens: u64) -> u64 {
        match capacity {
            Capacity::Tokens(_) => tokens,
            Capacity::Blocks(_) => 1,
        }
    }

    pub fn limit(capacity: Capacity) -> u64 {
        match capacity {
            Capacity::Tokens(n) | Capacity::Blocks(n) => n,
        }
    }

    /// Every resident entry with its tokens, in no particular order (callers sort).
    pub fn resident_entries(&self) -> Vec<((NsId, KeyId), u64)> {
        self.entries
            .iter()
            .map(|(&entry, &(tokens, _))| (entry, tokens))
            .collect()
    }

    pub fn tokens(&self, entry: (NsId, KeyId)) -> u64 {
        self.entries.get(&entry).map_or(0, |e| e.0)
    }

    /// Inserts or refreshes an entry; true when its residency changed (new or resized).
    pub fn put(
        &mut self,
        capacity: Capacity,
        entry: (NsId, KeyId),
        tokens: u64,
        stamp: u64,
    ) -> bool {
        let weight = Self::weight(capacity, tokens);
        match self.entries.insert(entry, (tokens, stamp)) {
            // The mutant keeps a refreshed entry's old age: first in, first out.
            Some((old_tokens, old_stamp)) if active(Mutant::LruRefreshIgnored) => {
                self.entries.insert(entry, (tokens, old_stamp));
                self.used = self.used - Self::weight(capacity, old_tokens) + weight;
                old_tokens != tokens
            }
            Some((old_tokens, old_stamp)) => {
                self.by_age.remove(&old_stamp);
                self.by_age.insert(stamp, entry);
                self.used = self.used - Self::weight(capacity, old_tokens) + weight;
                old_tokens != tokens
            }
            None => {
                self.by_age.insert(stamp, entry);
                self.used += weight;
                true
            }
        }
    }

    /// Evicts the oldest entries not used at `stamp_floor` or later until within capacity.
    pub fn evict_to_fit(&mut self, capacity: Capacity, stamp_floor: u64) -> Vec<(NsId, KeyId)> {
        let mut evicted = Vec::new();
        while self.used > Self::limit(capacity) {
            let Some((&stamp, &entry)) = self.by_age.first_key_value() else {
                break;
            };
            if stamp >= stamp_floor {
                break;
            }
            self.by_age.remove(&stamp);
            if let Some((tokens, _)) = self.entries.remove(&entry) {
                self.used -= Self::weight(capacity, tokens);
            }
            evicted.push(entry);
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_counts_tokens_refreshes_and_evicts_the_oldest_unprotected_entry() {
        let capacity = Capacity::Tokens(1000);
        let mut lru = Lru::default();
        assert!(lru.put(capacity, (0, 0), 600, 1));
        assert!(lru.put(capacity, (0, 1), 300, 2));
        // A refresh of the same size is not a change, but makes the entry the newest.
        assert!(!lru.put(capacity, (0, 0), 600, 3));
        assert!(lru.put(capacity, (0, 2), 200, 4));
        assert_eq!(lru.used, 1100);
        // Entries stamped at or after the floor are protected.
        assert!(lru.evict_to_fit(capacity, 2).is_empty());
        assert_eq!(lru.evict_to_fit(capacity, 4), [(0, 1)]);
        assert_eq!(
            (lru.used, lru.tokens((0, 1)), lru.tokens((0, 0))),
            (800, 0, 600)
        );
        // A resize is a change, and the used total follows it.
        assert!(lru.put(capacity, (0, 2), 250, 5));
        assert_eq!(lru.used, 850);

        let blocks = Capacity::Blocks(2);
        let mut lru = Lru::default();
        for (key, stamp) in [(7, 1), (8, 2), (9, 3)] {
            lru.put(blocks, (0, key), 512, stamp);
        }
        assert_eq!(lru.used, 3);
        assert_eq!(lru.evict_to_fit(blocks, 3), [(0, 7)]);
        assert_eq!(lru.used, 2);
    }
}
