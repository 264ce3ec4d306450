//! A trace whose events are held compactly ([`EventStore`], what `kvroute validate` and
//! `kvroute replay` read) made ready to replay: [`Compiled::from_compact`]. The workers and
//! tables are compiled as [`Compiled::new`] compiles them; the events stay in the store and
//! each is compiled as a run reaches it, so a replay never holds a compiled copy of every
//! event and memory follows the state. Its own file so that the compiled trace, which most
//! of routing imports, does not import the store.

use crate::input::compact::{CompactKind, EventStore, EventsView};
use crate::input::trace::Trace;
use crate::route::compiled::{
    compile_workers, CEvent, Compiled, DecisionsRouted, EventSource, NsId, Op, Req, Seg,
    SourceMaps, Step, Tables,
};

/// The store's events compiled one at a time as each run reads them, so that a replay
/// holds the store and never a second copy of every event. The store's key ids are the
/// compiled key ids; its name, namespace and worker ids are mapped by `maps`.
impl EventSource for EventStore {
    fn compile_event(&self, index: u32, maps: &SourceMaps) -> CEvent<'_> {
        let store = self;
        let event = store.events()[index as usize];
        let segs = |range| {
            store
                .segments_of(range)
                .map(|(key, tokens)| Seg { key, tokens })
                .collect()
        };
        let step = match event.kind {
            CompactKind::Request {
                id_start,
                id_len,
                ns,
                prefix,
                prompt_tokens,
                decode_tokens,
            } => {
                let (model, adapter) = maps.model_adapter_of[ns as usize];
                Step::Request(Req {
                    id: store.request_id(id_start, id_len),
                    ns: maps.ns_of[ns as usize],
                    model,
                    adapter,
                    prefix: segs(prefix),
                    prompt_tokens,
                    decode_tokens,
                })
            }
            cache_or_load => compile_cache_or_load(store, cache_or_load, maps),
        };
        CEvent {
            seq: event.seq,
            tick: event.tick,
            step,
        }
    }
}

/// A cache or load record as its step; a request's is [`EventSource::compile_event`]'s.
fn compile_cache_or_load<'s>(
    store: &'s EventStore,
    kind: CompactKind,
    maps: &SourceMaps,
) -> Step<'s> {
    let worker = |name: u32| maps.worker_of_name[name as usize];
    match kind {
        CompactKind::Store {
            worker: w,
            epoch,
            ns,
            segments,
        } => Step::Cache {
            worker: worker(w),
            epoch,
            op: Op::Store {
                ns: maps.ns_of[ns as usize],
                segments: store
                    .segments_of(segments)
                    .map(|(key, tokens)| Seg { key, tokens })
                    .collect(),
            },
        },
        CompactKind::Evict {
            worker: w,
            epoch,
            ns,
            keys,
        } => Step::Cache {
            worker: worker(w),
            epoch,
            op: Op::Evict {
                ns: maps.ns_of[ns as usize],
                keys: store.seg_keys(keys).to_vec(),
            },
        },
        CompactKind::Clear { worker: w, epoch } => Step::Cache {
            worker: worker(w),
            epoch,
            op: Op::Clear,
        },
        CompactKind::Load {
            worker: w,
            observed_tick,
            queued_prefill,
            active_decode,
        } => Step::Load {
            worker: worker(w),
            observed_tick,
            queued_prefill,
            active_decode,
        },
        CompactKind::Request { .. } => unreachable!("a request is compiled by compile_event"),
    }
}

impl<'t> Compiled<'t> {
    /// A trace whose events are held in `store` ([`crate::input::validate::read_trace_compact`]):
    /// `trace` has the other members (its own `events` are not read). Routing reads
    /// the store's records in place, each compiled as a run reaches it.
    pub fn from_compact(trace: &'t Trace, store: &'t EventStore) -> Self {
        let mut tables = Tables::default();
        // The store's key ids are the compiled ones: interned first, in id order.
        for key in store.keys.strings() {
            tables.keys.intern(key);
        }
        let base_adapter = tables.names.intern("base");
        let (specs, workers, worker_index) = compile_workers(trace, &mut tables);
        let ns_of: Vec<NsId> = store
            .namespaces
            .iter()
            .map(|ns| tables.namespace(ns))
            .collect();
        let model_adapter_of = store
            .namespaces
            .iter()
            .map(|ns| {
                (
                    tables.names.intern(&ns.model),
                    tables.names.intern(&ns.adapter),
                )
            })
            .collect();
        // Validation rejects events naming unknown workers: a name no worker has is
        // never an event's worker.
        let worker_of_name = store
            .names
            .strings()
            .iter()
            .map(|name| worker_index.get(&**name).copied().unwrap_or(u32::MAX))
            .collect();
        let request_count = (0..store.len())
            .filter(|&i| store.request_id_of(i).is_some())
            .count() as u64;
        Compiled {
            trace,
            worker_ids: specs.iter().map(|w| &*w.id).collect(),
            workers,
            events: Vec::new(),
            tables,
            base_adapter,
            sharing: &trace.sharing,
            decisions_routed: DecisionsRouted::default(),
            source: Some((
                store,
                SourceMaps {
                    order: store.sorted_order(),
                    worker_of_name,
                    ns_of,
                    model_adapter_of,
                    request_count,
                },
            )),
        }
    }
}
