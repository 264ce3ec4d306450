//! The events of a trace held compactly, so memory follows the state: what `kvroute validate` and
//! `kvroute replay` keep of a streamed trace instead of one typed [`Event`] per event.
//!
//! A typed event of a request-heavy trace costs about 320 bytes (its eight 24-byte
//! segments alone are 192), and routing once copied every event again into its compiled
//! form. Here an event is one 64-byte record (`seq`, `tick` and its numbers), its
//! strings are `u32` ids into one table of names and one of prefix keys, its segments
//! are a range of one shared array of `(key id, tokens)` (eight bytes a segment while
//! the tokens fit in 32 bits; a larger count is kept aside, by segment), a run of
//! segments identical to one stored before is not stored again but pointed at, and
//! request ids, unique by rule, are one byte arena. Routing reads the records in place
//! ([`crate::route::compiled::Compiled::from_compact`]), never copying them all.
//!
//! [`EventStore::event`] decodes one event back into its typed form, which validation's
//! later stages and the canonical digest read one at a time; decoding gives back the
//! same values (the same strings, the same numbers, the same order of segments).

use crate::input::trace::{CacheOp, Event, EventKind, Namespace, Request, Segment};
use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A string table: the same string always gets the same id, ids count up from 0 in
/// first-seen order. Only asked for ids and strings, never iterated as a map.
#[derive(Debug, Default)]
pub struct StringTable {
    ids: FxHashMap<Arc<str>, u32>,
    strings: Vec<Arc<str>>,
}

impl StringTable {
    fn intern(&mut self, s: &Arc<str>) -> u32 {
        if let Some(&id) = self.ids.get(&**s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.ids.insert(s.clone(), id);
        self.strings.push(s.clone());
        id
    }

    /// The id of `s`, if the table has it.
    pub fn id(&self, s: &str) -> Option<u32> {
        self.ids.get(s).copied()
    }

    /// The string of `id`.
    pub fn get(&self, id: u32) -> &Arc<str> {
        &self.strings[id as usize]
    }

    /// Every string, by id.
    pub fn strings(&self) -> &[Arc<str>] {
        &self.strings
    }

    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// A range of [`EventStore`]'s segment array, which may outgrow `u32` indexes (20
/// million events of a few hundred segments each is a valid `scale` trace). The start
/// is two `u32` halves so that the range packs in 12 bytes and an event's record in 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegRange {
    start_halves: [u32; 2],
    pub len: u32,
}

impl SegRange {
    fn new(start: u64, len: u32) -> Self {
        SegRange {
            start_halves: [start as u32, (start >> 32) as u32],
            len,
        }
    }

    /// The index of the range's first segment.
    pub fn start(self) -> u64 {
        u64::from(self.start_halves[0]) | u64::from(self.start_halves[1]) << 32
    }

    /// One past the index of the range's last segment.
    pub fn end(self) -> u64 {
        self.start() + u64::from(self.len)
    }
}

/// One event's payload, its strings as ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactKind {
    /// `ns` is an index of [`EventStore::namespaces`]; `segments` are `(key, tokens)`.
    Store {
        worker: u32,
        epoch: u64,
        ns: u32,
        segments: SegRange,
    },
    /// `keys` are the segment array's keys; their tokens are unused.
    Evict {
        worker: u32,
        epoch: u64,
        ns: u32,
        keys: SegRange,
    },
    Clear {
        worker: u32,
        epoch: u64,
    },
    Load {
        worker: u32,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    },
    /// `id_start..id_start + id_len` of the id arena.
    Request {
        id_start: u64,
        id_len: u32,
        ns: u32,
        prefix: SegRange,
        prompt_tokens: u64,
        decode_tokens: u64,
    },
}

/// One event: `seq`, `tick` and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactEvent {
    pub seq: u64,
    pub tick: u64,
    pub kind: CompactKind,
}

/// Tokens of this value and above are kept in [`EventStore`]'s side table.
const TOKENS_ASIDE: u32 = u32::MAX;

/// The events of one trace, in input order, held compactly.
#[derive(Debug, Default)]
pub struct EventStore {
    events: Vec<CompactEvent>,
    /// Worker ids, tenants, models and adapters.
    pub names: StringTable,
    /// Prefix keys.
    pub keys: StringTable,
    /// Namespace index → the namespace (its parts shared with `names`).
    pub namespaces: Vec<Namespace>,
    namespace_ids: FxHashMap<[u32; 3], u32>,
    seg_keys: Vec<u32>,
    seg_tokens: Vec<u32>,
    /// Segment index → its tokens, for the segments whose tokens do not fit below
    /// [`TOKENS_ASIDE`].
    tokens_aside: FxHashMap<u64, u64>,
    /// Every distinct run of segments stored, by its content: an event whose segments
    /// (or keys) are a run already stored points at it instead of storing it again.
    runs: HashTable<SegRange>,
    ids: String,
}

impl EventStore {
    /// How many events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Every event's record, in input order.
    pub fn events(&self) -> &[CompactEvent] {
        &self.events
    }

    /// Adds an event at the end.
    pub fn push(&mut self, event: Event) {
        let kind = match event.kind {
            EventKind::Cache { worker, epoch, op } => {
                let worker = self.names.intern(&worker);
                match op {
                    CacheOp::Store {
                        namespace,
                        segments,
                    } => CompactKind::Store {
                        worker,
                        epoch,
                        ns: self.namespace(&namespace),
                        segments: self.segments(segments.iter().map(|s| (&s.key, s.tokens))),
                    },
                    CacheOp::Evict { namespace, keys } => CompactKind::Evict {
                        worker,
                        epoch,
                        ns: self.namespace(&namespace),
                        keys: self.segments(keys.iter().map(|k| (k, 0))),
                    },
                    CacheOp::Clear => CompactKind::Clear { worker, epoch },
                }
            }
            EventKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => CompactKind::Load {
                worker: self.names.intern(&worker),
                observed_tick,
                queued_prefill,
                active_decode,
            },
            EventKind::Request(request) => {
                let id_start = self.ids.len() as u64;
                self.ids.push_str(&request.id);
                CompactKind::Request {
                    id_start,
                    id_len: request.id.len() as u32,
                    ns: self.namespace(&request.namespace),
                    prefix: self.segments(request.prefix.iter().map(|s| (&s.key, s.tokens))),
                    prompt_tokens: request.prompt_tokens,
                    decode_tokens: request.decode_tokens,
                }
            }
        };
        self.events.push(CompactEvent {
            seq: event.seq,
            tick: event.tick,
            kind,
        });
    }

    /// The index of `ns` in [`EventStore::namespaces`], if an event has it.
    pub fn namespace_id(&self, ns: &Namespace) -> Option<u32> {
        let parts = [
            self.names.id(&ns.tenant)?,
            self.names.id(&ns.model)?,
            self.names.id(&ns.adapter)?,
        ];
        self.namespace_ids.get(&parts).copied()
    }

    fn namespace(&mut self, ns: &Namespace) -> u32 {
        let parts = [
            self.names.intern(&ns.tenant),
            self.names.intern(&ns.model),
            self.names.intern(&ns.adapter),
        ];
        if let Some(&id) = self.namespace_ids.get(&parts) {
            return id;
        }
        let id = self.namespaces.len() as u32;
        self.namespace_ids.insert(parts, id);
        // The parts as the table holds them, so that every copy shares one string.
        self.namespaces.push(Namespace {
            tenant: self.names.get(parts[0]).clone(),
            model: self.names.get(parts[1]).clone(),
            adapter: self.names.get(parts[2]).clone(),
        });
        id
    }

    /// Stores a run of segments, or finds the same run stored before.
    fn segments<'s>(&mut self, segments: impl Iterator<Item = (&'s Arc<str>, u64)>) -> SegRange {
        let start = self.seg_keys.len() as u64;
        let mut hasher = FxHasher::default();
        for (key, tokens) in segments {
            let key = self.keys.intern(key);
            (key, tokens).hash(&mut hasher);
            let index = self.seg_keys.len() as u64;
            self.seg_keys.push(key);
            match u32::try_from(tokens) {
                Ok(small) if small < TOKENS_ASIDE => self.seg_tokens.push(small),
                _ => {
                    self.seg_tokens.push(TOKENS_ASIDE);
                    self.tokens_aside.insert(index, tokens);
                }
            }
        }
        let run = SegRange::new(start, (self.seg_keys.len() as u64 - start) as u32);
        if run.len == 0 {
            return run;
        }
        let hash = hasher.finish();
        let same = |stored: &SegRange| {
            stored.len == run.len
                && self.seg_keys(*stored) == self.seg_keys(run)
                && (0..u64::from(run.len))
                    .all(|i| self.seg_tokens(stored.start() + i) == self.seg_tokens(start + i))
        };
        if let Some(&stored) = self.runs.find(hash, same) {
            for index in start..run.end() {
                self.tokens_aside.remove(&index);
            }
            self.seg_keys.truncate(start as usize);
            self.seg_tokens.truncate(start as usize);
            return stored;
        }
        let (seg_keys, seg_tokens, tokens_aside) =
            (&self.seg_keys, &self.seg_tokens, &self.tokens_aside);
        let rehash = |stored: &SegRange| run_hash(seg_keys, seg_tokens, tokens_aside, *stored);
        self.runs.insert_unique(hash, run, rehash);
        run
    }

    /// The key ids of a range.
    pub fn seg_keys(&self, range: SegRange) -> &[u32] {
        &self.seg_keys[range.start() as usize..range.end() as usize]
    }

    /// The tokens of segment `index` of the segment array.
    pub fn seg_tokens(&self, index: u64) -> u64 {
        match self.seg_tokens[index as usize] {
            TOKENS_ASIDE => self.tokens_aside[&index],
            small => u64::from(small),
        }
    }

    /// `(key id, tokens)` of each segment of a range.
    pub fn segments_of(&self, range: SegRange) -> impl Iterator<Item = (u32, u64)> + '_ {
        (range.start()..range.end()).map(|i| (self.seg_keys[i as usize], self.seg_tokens(i)))
    }

    /// A request's id.
    pub fn request_id(&self, id_start: u64, id_len: u32) -> &str {
        let start = id_start as usize;
        &self.ids[start..start + id_len as usize]
    }

    /// The id of event `i` when it is a request.
    pub fn request_id_of(&self, i: usize) -> Option<&str> {
        match self.events[i].kind {
            CompactKind::Request {
                id_start, id_len, ..
            } => Some(self.request_id(id_start, id_len)),
            _ => None,
        }
    }

    /// Replaces every request id by `rename` of it (in input order).
    pub fn rename_request_ids(&mut self, mut rename: impl FnMut(&str) -> String) {
        let mut ids = String::with_capacity(self.ids.len());
        for event in &mut self.events {
            if let CompactKind::Request {
                id_start, id_len, ..
            } = &mut event.kind
            {
                let start = *id_start as usize;
                let new = rename(&self.ids[start..start + *id_len as usize]);
                *id_start = ids.len() as u64;
                *id_len = new.len() as u32;
                ids.push_str(&new);
            }
        }
        self.ids = ids;
    }

    /// Event `i` in its typed form.
    pub fn event(&self, i: usize) -> Event {
        let event = &self.events[i];
        Event {
            seq: event.seq,
            tick: event.tick,
            kind: self.kind_of(event.kind),
        }
    }

    /// A record's payload in its typed form: the same strings, numbers and segments.
    fn kind_of(&self, kind: CompactKind) -> EventKind {
        let name = |id: u32| self.names.get(id).clone();
        match kind {
            CompactKind::Store {
                worker,
                epoch,
                ns,
                segments: range,
            } => EventKind::Cache {
                worker: name(worker),
                epoch,
                op: CacheOp::Store {
                    namespace: self.namespaces[ns as usize].clone(),
                    segments: self.typed_segments(range),
                },
            },
            CompactKind::Evict {
                worker,
                epoch,
                ns,
                keys: range,
            } => EventKind::Cache {
                worker: name(worker),
                epoch,
                op: CacheOp::Evict {
                    namespace: self.namespaces[ns as usize].clone(),
                    keys: self.typed_keys(range),
                },
            },
            CompactKind::Clear { worker, epoch } => EventKind::Cache {
                worker: name(worker),
                epoch,
                op: CacheOp::Clear,
            },
            CompactKind::Load {
                worker,
                observed_tick,
                queued_prefill,
                active_decode,
            } => EventKind::Load {
                worker: name(worker),
                observed_tick,
                queued_prefill,
                active_decode,
            },
            CompactKind::Request {
                id_start,
                id_len,
                ns,
                prefix,
                prompt_tokens,
                decode_tokens,
            } => EventKind::Request(Request {
                id: self.request_id(id_start, id_len).into(),
                namespace: self.namespaces[ns as usize].clone(),
                prefix: self.typed_segments(prefix),
                prompt_tokens,
                decode_tokens,
            }),
        }
    }

    /// The segments of `range` with their key strings.
    fn typed_segments(&self, range: SegRange) -> Vec<Segment> {
        self.segments_of(range)
            .map(|(key, tokens)| Segment {
                key: self.keys.get(key).clone(),
                tokens,
            })
            .collect()
    }

    /// The key strings of `range`.
    fn typed_keys(&self, range: SegRange) -> Vec<Arc<str>> {
        self.seg_keys(range)
            .iter()
            .map(|&k| self.keys.get(k).clone())
            .collect()
    }
}

/// The hash [`EventStore::segments`] gives a run: of each `(key id, tokens)` in order.
fn run_hash(
    seg_keys: &[u32],
    seg_tokens: &[u32],
    tokens_aside: &FxHashMap<u64, u64>,
    run: SegRange,
) -> u64 {
    let mut hasher = FxHasher::default();
    for index in run.start()..run.end() {
        let tokens = match seg_tokens[index as usize] {
            TOKENS_ASIDE => tokens_aside[&index],
            small => u64::from(small),
        };
        (seg_keys[index as usize], tokens).hash(&mut hasher);
    }
    hasher.finish()
}

/// The events validation's later stages and the canonical digest read: a slice of
/// typed events, or an [`EventStore`] decoding one at a time.
pub trait EventsView {
    fn count(&self) -> usize;
    /// `(tick, seq)` of event `i`, the order events are processed in.
    fn tick_seq(&self, i: usize) -> (u64, u64);
    /// Calls `f` with event `i` in its typed form.
    fn with_event<R>(&self, i: usize, f: impl FnOnce(&Event) -> R) -> R;
    /// The id of event `i` when it is a request, borrowed from the view.
    fn request_id_at(&self, i: usize) -> Option<&str>;
    /// Event indexes in `(tick, seq)` order.
    fn sorted_order(&self) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.count() as u32).collect();
        order.sort_by_key(|&i| self.tick_seq(i as usize));
        order
    }
}

impl EventsView for [Event] {
    fn count(&self) -> usize {
        self.len()
    }
    fn tick_seq(&self, i: usize) -> (u64, u64) {
        (self[i].tick, self[i].seq)
    }
    fn with_event<R>(&self, i: usize, f: impl FnOnce(&Event) -> R) -> R {
        f(&self[i])
    }
    fn request_id_at(&self, i: usize) -> Option<&str> {
        match &self[i].kind {
            EventKind::Request(request) => Some(&request.id),
            _ => None,
        }
    }
}

impl EventsView for Vec<Event> {
    fn count(&self) -> usize {
        self.len()
    }
    fn tick_seq(&self, i: usize) -> (u64, u64) {
        self.as_slice().tick_seq(i)
    }
    fn with_event<R>(&self, i: usize, f: impl FnOnce(&Event) -> R) -> R {
        f(&self[i])
    }
    fn request_id_at(&self, i: usize) -> Option<&str> {
        self.as_slice().request_id_at(i)
    }
}

impl EventsView for EventStore {
    fn count(&self) -> usize {
        self.len()
    }
    fn tick_seq(&self, i: usize) -> (u64, u64) {
        (self.events[i].tick, self.events[i].seq)
    }
    fn with_event<R>(&self, i: usize, f: impl FnOnce(&Event) -> R) -> R {
        f(&self.event(i))
    }
    fn request_id_at(&self, i: usize) -> Option<&str> {
        self.request_id_of(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README's memory figures count one record an event at this size.
    #[test]
    fn an_event_record_is_64_bytes() {
        assert_eq!(std::mem::size_of::<CompactEvent>(), 64);
    }

    fn segment(key: &str, tokens: u64) -> Segment {
        Segment {
            key: key.into(),
            tokens,
        }
    }

    fn request(seq: u64, prefix: Vec<Segment>) -> Event {
        Event {
            seq,
            tick: seq,
            kind: EventKind::Request(Request {
                id: format!("r{seq}").into(),
                namespace: Namespace {
                    tenant: "t".into(),
                    model: "m".into(),
                    adapter: "base".into(),
                },
                prefix,
                prompt_tokens: u64::MAX,
                decode_tokens: 1,
            }),
        }
    }

    #[test]
    fn a_repeated_run_of_segments_is_stored_once_and_decodes_as_given() {
        let big = u64::from(u32::MAX) + 7;
        let runs = [
            vec![segment("a", 1), segment("b", big)],
            vec![segment("a", 1), segment("b", big)],
            vec![segment("a", 1), segment("b", 2)],
            vec![segment("a", 1)],
            vec![],
            vec![segment("b", u64::from(u32::MAX)), segment("a", 1)],
        ];
        let mut store = EventStore::default();
        let events: Vec<Event> = runs
            .iter()
            .enumerate()
            .map(|(i, run)| request(i as u64 + 1, run.clone()))
            .collect();
        for event in events.clone() {
            store.push(event);
        }
        let decoded: Vec<Event> = (0..store.len()).map(|i| store.event(i)).collect();
        assert_eq!(decoded, events);
        // The repeat points at the first run; the others, differing in a token count
        // or a length, are their own: 2 + 2 + 1 + 2 segments stored.
        assert_eq!(store.seg_keys.len(), 7);
        let prefix = |i: usize| match store.events()[i].kind {
            CompactKind::Request { prefix, .. } => prefix,
            _ => unreachable!(),
        };
        assert_eq!(prefix(0), prefix(1));
        assert_ne!(prefix(0), prefix(2));
    }
}
