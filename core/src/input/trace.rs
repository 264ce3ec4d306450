//! The trace contract as Rust types (`kvroute-trace/1`, SPEC.md §1).
//!
//! A [`Trace`] only exists once validation has accepted the input, so every value here
//! already satisfies the value, cross-reference, limit and overflow rules. Arrays keep
//! the order they had in the input; the engine and the canonical form sort what they need.

use std::sync::Arc;

/// The limits profile a trace declares (SPEC.md §1.3); its figures are in
/// [`crate::input::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsProfile {
    Lab,
    Scale,
}

/// Routing parameters (the `policy` member).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyParams {
    pub decode_weight_milli: u64,
    pub imbalance_penalty_milli: u64,
    pub freshness_ticks: Option<u64>,
    pub max_queued_work: Option<u64>,
    /// Which mutations of an arriving cache event are applied (SPEC.md §3.2).
    pub stale_rule: StaleRule,
    /// Whether epochs must step by one, so that a skipped one is a detected gap (§3.6).
    pub epochs: EpochsMode,
    /// The last milli-units of the overload cap kept for rows without reuse (§4.5).
    pub cold_reserve_milli: Option<u64>,
    /// Dynamo's KV block size in tokens, at least 1: when set, the receipt has a fifth
    /// run, `dynamo_default`, priced by Dynamo's default selector (§4.8).
    pub dynamo_block_tokens: Option<u64>,
}

impl Default for PolicyParams {
    fn default() -> Self {
        PolicyParams {
            decode_weight_milli: 1000,
            imbalance_penalty_milli: 0,
            freshness_ticks: None,
            max_queued_work: None,
            stale_rule: StaleRule::WorkerEpoch,
            epochs: EpochsMode::Any,
            cold_reserve_milli: None,
            dynamo_block_tokens: None,
        }
    }
}

/// `policy.stale_rule` (SPEC.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum StaleRule {
    /// An event not newer than the worker's last applied one is dropped whole.
    #[default]
    WorkerEpoch,
    /// A mutation is applied only when newer than the last one of its key (tombstones
    /// remember evictions) and than the worker's last applied clear.
    KeyEpoch,
    /// Everything is applied in arrival order: the baseline the others are measured by.
    ArrivalOrder,
}

impl StaleRule {
    pub const ALL: [StaleRule; 3] = [
        StaleRule::WorkerEpoch,
        StaleRule::KeyEpoch,
        StaleRule::ArrivalOrder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StaleRule::WorkerEpoch => "worker_epoch",
            StaleRule::KeyEpoch => "key_epoch",
            StaleRule::ArrivalOrder => "arrival_order",
        }
    }

    pub fn from_name(name: &str) -> Option<StaleRule> {
        StaleRule::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// `policy.epochs` (SPEC.md §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum EpochsMode {
    /// Epochs need only increase; nothing is inferred from a skipped number.
    #[default]
    Any,
    /// Each worker's epochs step by exactly 1: a skipped epoch is an evidence gap.
    Sequential,
}

impl EpochsMode {
    pub fn name(self) -> &'static str {
        match self {
            EpochsMode::Any => "any",
            EpochsMode::Sequential => "sequential",
        }
    }

    pub const ALL: [EpochsMode; 2] = [EpochsMode::Any, EpochsMode::Sequential];

    pub fn from_name(name: &str) -> Option<EpochsMode> {
        EpochsMode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The namespace a cache entry lives in: whose prefix, under which token meaning.
///
/// The strings of a trace are `Arc<str>`, not `String`: a trace names the same few
/// tenants, models, adapters, workers and prefix keys over and over, and the reader
/// hands out one shared copy of each (SPEC.md is unaffected: only equality and bytes
/// are ever read), so a repeated name costs a pointer, not an allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Namespace {
    pub tenant: Arc<str>,
    pub model: Arc<str>,
    pub adapter: Arc<str>,
}

/// A sharing grant: these tenants count as one for this model and adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub model: Arc<str>,
    pub adapter: Arc<str>,
    pub tenants: Vec<Arc<str>>,
}

/// One resident prefix block in a worker's initial cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    pub namespace: Namespace,
    pub key: Arc<str>,
    pub tokens: u64,
}

/// A worker and the router's initial view of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSpec {
    pub id: Arc<str>,
    pub model: Arc<str>,
    pub adapters: Vec<Arc<str>>,
    pub prefill_rate: u64,
    pub decode_rate: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub observed_tick: u64,
    pub epoch: u64,
    pub cache: Vec<CacheEntry>,
}

impl WorkerSpec {
    /// A worker as an import creates it: these rates, idle (no load, epoch 0) and with
    /// an empty cache.
    pub fn idle(
        id: Arc<str>,
        model: Arc<str>,
        adapters: Vec<Arc<str>>,
        prefill_rate: u64,
        decode_rate: u64,
    ) -> WorkerSpec {
        WorkerSpec {
            id,
            model,
            adapters,
            prefill_rate,
            decode_rate,
            queued_prefill: 0,
            active_decode: 0,
            observed_tick: 0,
            epoch: 0,
            cache: Vec::new(),
        }
    }
}

/// A prefix block reference: an opaque key and its token count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub key: Arc<str>,
    pub tokens: u64,
}

/// What a cache event does to its worker's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOp {
    Store {
        namespace: Namespace,
        segments: Vec<Segment>,
    },
    Evict {
        namespace: Namespace,
        keys: Vec<Arc<str>>,
    },
    Clear,
}

/// Which of the three cache operations an event performs; its name is the trace's and
/// the cache log's `op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Store,
    Evict,
    Clear,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Store => "store",
            OpKind::Evict => "evict",
            OpKind::Clear => "clear",
        }
    }
}

impl CacheOp {
    pub fn kind(&self) -> OpKind {
        match self {
            CacheOp::Store { .. } => OpKind::Store,
            CacheOp::Evict { .. } => OpKind::Evict,
            CacheOp::Clear => OpKind::Clear,
        }
    }
}

/// A request to be routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Unique within a trace, so never shared; `Arc<str>` like the others all the same,
    /// so that every string of the trace is built and compared the same way.
    pub id: Arc<str>,
    pub namespace: Namespace,
    pub prefix: Vec<Segment>,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
}

/// The payload of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    Cache {
        worker: Arc<str>,
        epoch: u64,
        op: CacheOp,
    },
    Load {
        worker: Arc<str>,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    },
    Request(Request),
}

/// One event of the trace, processed in `(tick, seq)` order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: u64,
    pub tick: u64,
    pub kind: EventKind,
}

/// A validated trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub limits: LimitsProfile,
    pub policy: PolicyParams,
    pub sharing: Vec<Grant>,
    pub workers: Vec<WorkerSpec>,
    pub events: Vec<Event>,
}

impl Trace {
    /// Number of request events.
    pub fn request_count(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Request(_)))
            .count()
    }
}

/// The id of worker `index` of a generated fleet of `workers` (SPEC.md §10.1, and
/// `simulate --workers`): `w` and the index zero-padded to the width of `workers - 1`,
/// so that byte order (the order candidates are listed and ties broken in) is numeric
/// order: `w0`..`w7` for 8 workers, `w000`..`w511` for 512.
pub fn fleet_worker_id(index: u32, workers: u32) -> String {
    let width = workers.saturating_sub(1).to_string().len();
    format!("w{index:0width$}")
}

/// The member names of each object of a `kvroute-trace/1` document (SPEC.md §1), and
/// of a Mooncake line (§10), one table per object. The shape check accepts exactly a
/// table's names, the field reads name only listed ones, and the reader keeps every
/// listed name borrowed ([`members::known_member_name`]), so a name is written once.
pub mod members {
    /// Defines each table and [`known_member_name`] from the same literals: a
    /// `match`, which the compiler turns into a switch on the length and fixed-size
    /// compares, where a search of the tables would call `memcmp` for every name of
    /// the same length, and names are compared for every member of every event.
    macro_rules! member_tables {
        ($($(#[$doc:meta])* $table:ident = [$($name:literal),* $(,)?];)*) => {
            $($(#[$doc])* pub const $table: &[&str] = &[$($name),*];)*

            /// `name` as the `'static` copy of itself when a table lists it.
            // A name several objects share matches at its first table.
            #[allow(unreachable_patterns)]
            pub fn known_member_name(name: &str) -> Option<&'static str> {
                match name {
                    $($($name => Some($name),)*)*
                    _ => None,
                }
            }
        };
    }

    member_tables! {
        /// The document.
        TRACE = ["format", "limits", "policy", "sharing", "workers", "events"];
        /// `policy`.
        POLICY = [
            "decode_weight_milli",
            "imbalance_penalty_milli",
            "freshness_ticks",
            "max_queued_work",
            "stale_rule",
            "epochs",
            "cold_reserve_milli",
            "dynamo_block_tokens",
        ];
        /// A sharing grant.
        GRANT = ["model", "adapter", "tenants"];
        /// A worker.
        WORKER = [
            "id",
            "model",
            "adapters",
            "prefill_rate",
            "decode_rate",
            "queued_prefill",
            "active_decode",
            "observed_tick",
            "epoch",
            "cache",
        ];
        /// A worker's initial cache entry.
        CACHE_ENTRY = ["tenant", "model", "adapter", "key", "tokens"];
        /// A prefix segment.
        SEGMENT = ["key", "tokens"];
        /// A cache event storing segments.
        CACHE_STORE = [
            "seq", "tick", "type", "op", "worker", "epoch", "tenant", "model", "adapter",
            "segments",
        ];
        /// A cache event evicting keys.
        CACHE_EVICT = [
            "seq", "tick", "type", "op", "worker", "epoch", "tenant", "model", "adapter",
            "keys",
        ];
        /// A cache event clearing the worker.
        CACHE_CLEAR = ["seq", "tick", "type", "op", "worker", "epoch"];
        /// A load observation.
        LOAD = [
            "seq",
            "tick",
            "type",
            "worker",
            "observed_tick",
            "queued_prefill",
            "active_decode",
        ];
        /// A request.
        REQUEST = [
            "seq",
            "tick",
            "type",
            "id",
            "tenant",
            "model",
            "adapter",
            "prefix",
            "prompt_tokens",
            "decode_tokens",
        ];
        /// A line of a Mooncake trace (SPEC.md §10).
        MOONCAKE_LINE = ["timestamp", "input_length", "output_length", "hash_ids"];
    }
}
