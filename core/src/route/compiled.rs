//! The compiled trace: a validated [`Trace`] with every string interned to a small
//! integer, workers in id order and events in `(tick, seq)` order.
//!
//! Routing compares keys and namespaces millions of times on a production-sized trace;
//! comparing `u32`s instead of strings, and indexing arrays instead of maps, is what lets
//! a decision cost O(prefix segments + workers). Ids are assigned in first-seen order of
//! the sorted trace, but nothing ever depends on an id's value: ids are only compared
//! for equality and used as array indexes, and results are aggregated order-free, so
//! a decision is the same whichever id a string received.
//!
//! The types mirror [`crate::input::trace`]'s one for one on purpose: the trace is what
//! the user wrote (strings, input order), this is what routing reads (ids, replay
//! order), and converting once is what keeps strings off the hot path. Names that
//! both must print, such as a cache operation's, live only in the trace's types.

use crate::input::trace::{
    CacheOp, Event, EventKind, Grant, Namespace, OpKind, Request, Segment, Trace, WorkerSpec,
};
use rustc_hash::FxHashMap as HashMap;

/// An interned prefix key.
pub type KeyId = u32;
/// An interned `(tenant, model, adapter)` namespace.
pub type NsId = u32;
/// An interned model or adapter name.
pub type NameId = u32;

/// A string table: the same string always gets the same id. Lookups only; the map is
/// never iterated, so its order cannot leak into a result.
#[derive(Debug, Default, Clone)]
pub struct Interner<'t> {
    ids: HashMap<&'t str, u32>,
    names: Vec<&'t str>,
}

impl<'t> Interner<'t> {
    pub fn intern(&mut self, name: &'t str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name, id);
        self.names.push(name);
        id
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, id: u32) -> &'t str {
        self.names[id as usize]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A prefix segment with its key interned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub key: KeyId,
    pub tokens: u64,
}

/// A cache operation with its keys and namespace interned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Store { ns: NsId, segments: Vec<Seg> },
    Evict { ns: NsId, keys: Vec<KeyId> },
    Clear,
}

impl Op {
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Store { .. } => OpKind::Store,
            Op::Evict { .. } => OpKind::Evict,
            Op::Clear => OpKind::Clear,
        }
    }
}

/// A request with its namespace parts and prefix keys interned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req<'t> {
    pub id: &'t str,
    pub ns: NsId,
    pub model: NameId,
    pub adapter: NameId,
    pub prefix: Vec<Seg>,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
}

/// What one compiled event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'t> {
    Cache {
        worker: u32,
        epoch: u64,
        op: Op,
    },
    Load {
        worker: u32,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    },
    Request(Req<'t>),
}

/// One compiled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CEvent<'t> {
    pub seq: u64,
    pub tick: u64,
    pub step: Step<'t>,
}

/// A worker with its model and adapters interned. `adapters` is sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CWorker {
    pub model: NameId,
    pub adapters: Vec<NameId>,
    pub prefill_rate: u64,
    pub decode_rate: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub observed_tick: u64,
    pub epoch: u64,
    /// The initial cache, `(namespace, key, tokens)`.
    pub cache: Vec<(NsId, KeyId, u64)>,
}

/// The string tables of a compiled trace.
#[derive(Debug, Default, Clone)]
pub struct Tables<'t> {
    /// Tenants, models and adapters share one table: only equality matters.
    pub names: Interner<'t>,
    pub keys: Interner<'t>,
    /// Namespace id → the namespace it stands for.
    pub namespaces: Vec<Namespace>,
    /// Namespace id → its parts as name ids, which the tenant rule compares.
    pub namespace_parts: Vec<NamespaceParts>,
    namespace_ids: HashMap<(NameId, NameId, NameId), NsId>,
}

/// A namespace as interned names: equal ids are equal names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceParts {
    pub tenant: NameId,
    pub model: NameId,
    pub adapter: NameId,
}

impl<'t> Tables<'t> {
    pub fn namespace(&mut self, ns: &'t Namespace) -> NsId {
        let parts = (
            self.names.intern(&ns.tenant),
            self.names.intern(&ns.model),
            self.names.intern(&ns.adapter),
        );
        if let Some(&id) = self.namespace_ids.get(&parts) {
            return id;
        }
        let id = self.namespaces.len() as NsId;
        self.namespace_ids.insert(parts, id);
        self.namespaces.push(ns.clone());
        let (tenant, model, adapter) = parts;
        self.namespace_parts.push(NamespaceParts {
            tenant,
            model,
            adapter,
        });
        id
    }

    fn segments(&mut self, segments: &'t [Segment]) -> Vec<Seg> {
        segments
            .iter()
            .map(|s| Seg {
                key: self.keys.intern(&s.key),
                tokens: s.tokens,
            })
            .collect()
    }

    /// Compiles one request (also used by the closed-loop simulator).
    pub fn request(&mut self, request: &'t Request) -> Req<'t> {
        Req {
            id: &request.id,
            ns: self.namespace(&request.namespace),
            model: self.names.intern(&request.namespace.model),
            adapter: self.names.intern(&request.namespace.adapter),
            prefix: self.segments(&request.prefix),
            prompt_tokens: request.prompt_tokens,
            decode_tokens: request.decode_tokens,
        }
    }
}

/// A trace made ready to replay.
#[derive(Debug, Clone)]
pub struct Compiled<'t> {
    pub trace: &'t Trace,
    /// Worker ids in byte order: index `i` is worker `i` everywhere.
    pub worker_ids: Vec<&'t str>,
    pub workers: Vec<CWorker>,
    /// Events in `(tick, seq)` order; empty when they come from `source` instead
    /// (`Compiled::from_compact`). Read them with [`Compiled::each_event`].
    pub events: Vec<CEvent<'t>>,
    /// Where the events come from when not from `events`.
    pub(crate) source: Option<(&'t dyn EventSource, SourceMaps)>,
    pub tables: Tables<'t>,
    /// The id of `"base"`, the adapter every eligible worker serves.
    pub base_adapter: NameId,
    pub sharing: &'t [Grant],
    /// Decisions routed from this trace so far, by every replay of it: what a long
    /// command's progress line counts, read from another thread. Never read by routing.
    pub decisions_routed: DecisionsRouted,
}

/// A count of routed decisions shared with whoever watches the replay (a clone counts
/// into the same figure). Counting is one relaxed addition a decision.
#[derive(Debug, Default, Clone)]
pub struct DecisionsRouted(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl DecisionsRouted {
    pub fn add_one(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Where a [`Compiled`]'s events come from when they are not in [`Compiled::events`]:
/// each compiled as a run reaches it ([`crate::route::compact`] compiles those of an
/// [`crate::input::compact::EventStore`]). A borrowed trait object, so that the
/// compiled trace neither imports the store nor owns anything that borrows it.
pub trait EventSource: std::fmt::Debug + Sync {
    /// Event `index` (of the source's own numbering) compiled, with `maps`.
    fn compile_event(&self, index: u32, maps: &SourceMaps) -> CEvent<'_>;
}

/// What compiling a source's events reads besides the source: the order to read them
/// in and the compiled ids of the source's own ids.
#[derive(Debug, Clone, Default)]
pub struct SourceMaps {
    /// Event indexes in `(tick, seq)` order.
    pub order: Vec<u32>,
    /// Source name id → worker index (only read for the names events give as workers).
    pub worker_of_name: Vec<u32>,
    /// Source namespace index → compiled namespace id.
    pub ns_of: Vec<NsId>,
    /// Source namespace index → compiled model and adapter name ids.
    pub model_adapter_of: Vec<(NameId, NameId)>,
    pub request_count: u64,
}

/// The workers in id order and compiled, their ids, and each id's index.
pub(crate) type CompiledWorkers<'t> = (Vec<&'t WorkerSpec>, Vec<CWorker>, HashMap<&'t str, u32>);

pub(crate) fn compile_workers<'t>(
    trace: &'t Trace,
    tables: &mut Tables<'t>,
) -> CompiledWorkers<'t> {
    let mut specs: Vec<&WorkerSpec> = trace.workers.iter().collect();
    specs.sort_by(|a, b| a.id.cmp(&b.id));
    let worker_index: HashMap<&str, u32> = specs
        .iter()
        .enumerate()
        .map(|(i, w)| (&*w.id, i as u32))
        .collect();
    let workers = specs
        .iter()
        .map(|spec| {
            let mut adapters: Vec<NameId> = spec
                .adapters
                .iter()
                .map(|a| tables.names.intern(a))
                .collect();
            adapters.sort_unstable();
            CWorker {
                model: tables.names.intern(&spec.model),
                adapters,
                prefill_rate: spec.prefill_rate,
                decode_rate: spec.decode_rate,
                queued_prefill: spec.queued_prefill,
                active_decode: spec.active_decode,
                observed_tick: spec.observed_tick,
                epoch: spec.epoch,
                cache: spec
                    .cache
                    .iter()
                    .map(|e| {
                        (
                            tables.namespace(&e.namespace),
                            tables.keys.intern(&e.key),
                            e.tokens,
                        )
                    })
                    .collect(),
            }
        })
        .collect();
    (specs, workers, worker_index)
}

impl<'t> Compiled<'t> {
    pub fn new(trace: &'t Trace) -> Self {
        let mut events: Vec<&Event> = trace.events.iter().collect();
        events.sort_by_key(|e| (e.tick, e.seq));
        let mut tables = Tables::default();
        let base_adapter = tables.names.intern("base");
        let (specs, workers, worker_index) = compile_workers(trace, &mut tables);
        // Validation rejects events naming unknown workers, so the lookups succeed.
        let events = events
            .iter()
            .map(|e| {
                let step = match &e.kind {
                    EventKind::Cache { worker, epoch, op } => Step::Cache {
                        worker: worker_index[&**worker],
                        epoch: *epoch,
                        op: match op {
                            CacheOp::Store {
                                namespace,
                                segments,
                            } => Op::Store {
                                ns: tables.namespace(namespace),
                                segments: tables.segments(segments),
                            },
                            CacheOp::Evict { namespace, keys } => Op::Evict {
                                ns: tables.namespace(namespace),
                                keys: keys.iter().map(|k| tables.keys.intern(k)).collect(),
                            },
                            CacheOp::Clear => Op::Clear,
                        },
                    },
                    EventKind::Load {
                        worker,
                        observed_tick,
                        queued_prefill,
                        active_decode,
                    } => Step::Load {
                        worker: worker_index[&**worker],
                        observed_tick: *observed_tick,
                        queued_prefill: *queued_prefill,
                        active_decode: *active_decode,
                    },
                    EventKind::Request(request) => Step::Request(tables.request(request)),
                };
                CEvent {
                    seq: e.seq,
                    tick: e.tick,
                    step,
                }
            })
            .collect();
        Compiled {
            trace,
            worker_ids: specs.iter().map(|w| &*w.id).collect(),
            workers,
            events,
            tables,
            base_adapter,
            sharing: &trace.sharing,
            decisions_routed: DecisionsRouted::default(),
            source: None,
        }
    }

    /// Calls `f` with every event in `(tick, seq)` order.
    pub fn each_event(&self, mut f: impl FnMut(&CEvent<'t>)) {
        match &self.source {
            None => self.events.iter().for_each(f),
            Some((source, maps)) => {
                for &index in &maps.order {
                    f(&source.compile_event(index, maps));
                }
            }
        }
    }

    /// How many requests the trace routes in one run.
    pub fn request_count(&self) -> u64 {
        if let Some((_, maps)) = &self.source {
            return maps.request_count;
        }
        self.events
            .iter()
            .filter(|e| matches!(e.step, Step::Request(_)))
            .count() as u64
    }

    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// How many distinct keys the trace names (the size of the cache index).
    pub fn key_count(&self) -> usize {
        self.tables.keys.len()
    }
}
