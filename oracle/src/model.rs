//! Plain typed form of a trace that passed the shape stage (SPEC.md §1). Nothing here is
//! sorted: every array is in input order, and events remember their input index so that
//! later validation stages can name paths "as given".

/// The limits profile (SPEC §1.3), with its inclusive maxima.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Lab,
    Scale,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Lab => "lab",
            Profile::Scale => "scale",
        }
    }

    pub fn requests_max(self) -> u64 {
        match self {
            Profile::Lab => 64,
            Profile::Scale => 10_000_000,
        }
    }

    pub fn workers_max(self) -> u64 {
        match self {
            Profile::Lab => 8,
            Profile::Scale => 4_096,
        }
    }

    pub fn events_max(self) -> u64 {
        match self {
            Profile::Lab => 1_024,
            Profile::Scale => 20_000_000,
        }
    }

    pub fn tokens_per_request_max(self) -> u64 {
        match self {
            Profile::Lab => 8_192,
            Profile::Scale => 2_097_152,
        }
    }

    // The work limits of SPEC §1.3: every dimension that multiplies a replay's work.

    /// Length of one event's `prefix` (request), `segments` (store) or `keys` (evict).
    pub fn keys_per_event_max(self) -> u64 {
        match self {
            Profile::Lab => 32,
            Profile::Scale => 2_097_152,
        }
    }

    /// Length of one worker's `cache` array, and its resident entries at any point.
    pub fn cache_entries_per_worker_max(self) -> u64 {
        match self {
            Profile::Lab => 256,
            Profile::Scale => 1_048_576,
        }
    }

    /// Length of `sharing`.
    pub fn sharing_grants_max(self) -> u64 {
        match self {
            Profile::Lab => 8,
            Profile::Scale => 4_096,
        }
    }

    /// Length of one grant's `tenants`.
    pub fn tenants_per_grant_max(self) -> u64 {
        match self {
            Profile::Lab => 8,
            Profile::Scale => 4_096,
        }
    }

    /// Length of one worker's `adapters`.
    pub fn adapters_per_worker_max(self) -> u64 {
        match self {
            Profile::Lab => 8,
            Profile::Scale => 4_096,
        }
    }
}

/// `policy.stale_rule` (SPEC §3.2): which mutations of an arriving cache event apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleRule {
    /// The default: per-worker epochs must strictly increase; a stale event is dropped whole.
    WorkerEpoch,
    /// Per-(worker, key) epochs with tombstones and a clear floor.
    KeyEpoch,
    /// No check at all: every event applies whole, in arrival order (the baseline).
    ArrivalOrder,
}

impl StaleRule {
    /// The JSON spelling of the rule.
    pub fn name(self) -> &'static str {
        match self {
            StaleRule::WorkerEpoch => "worker_epoch",
            StaleRule::KeyEpoch => "key_epoch",
            StaleRule::ArrivalOrder => "arrival_order",
        }
    }
}

/// `policy.epochs` (SPEC §3.6): what a worker promises about the epochs it stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochNumbering {
    /// The default: any increasing numbers; no gap is tracked.
    Any,
    /// `workers[].epoch + 1`, `+ 2`, … with none skipped: a missing one is an evidence gap.
    Sequential,
}

impl EpochNumbering {
    /// The JSON spelling of the numbering.
    pub fn name(self) -> &'static str {
        match self {
            EpochNumbering::Any => "any",
            EpochNumbering::Sequential => "sequential",
        }
    }
}

/// `policy` with defaults filled in; `None` is the JSON `null` (no window / no cap /
/// no cold reserve / no `dynamo_default` run).
#[derive(Debug, Clone)]
pub struct Policy {
    pub decode_weight_milli: u64,
    pub imbalance_penalty_milli: u64,
    pub freshness_ticks: Option<u64>,
    pub max_queued_work: Option<u64>,
    pub stale_rule: StaleRule,
    pub epochs: EpochNumbering,
    pub cold_reserve_milli: Option<u64>,
    /// `dynamo_block_tokens` (SPEC §4.8): Dynamo's block size in tokens, at least 1; when
    /// set, the receipt has the fifth run `dynamo_default`.
    pub dynamo_block_tokens: Option<u64>,
}

impl Policy {
    /// Every member at its default (SPEC §1).
    pub fn defaults() -> Self {
        Policy {
            decode_weight_milli: 1000,
            imbalance_penalty_milli: 0,
            freshness_ticks: None,
            max_queued_work: None,
            stale_rule: StaleRule::WorkerEpoch,
            epochs: EpochNumbering::Any,
            cold_reserve_milli: None,
            dynamo_block_tokens: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Grant {
    pub model: String,
    pub adapter: String,
    pub tenants: Vec<String>,
}

/// One resident cache entry: `(tenant, model, adapter, key) -> tokens`.
#[derive(Debug, Clone)]
pub struct Entry {
    pub tenant: String,
    pub model: String,
    pub adapter: String,
    pub key: String,
    pub tokens: u64,
}

#[derive(Debug, Clone)]
pub struct Worker {
    pub id: String,
    pub model: String,
    pub adapters: Vec<String>,
    pub prefill_rate: u64,
    pub decode_rate: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub observed_tick: u64,
    pub epoch: u64,
    pub cache: Vec<Entry>,
}

/// A `{key, tokens}` item of a store's `segments` or a request's `prefix`.
#[derive(Debug, Clone)]
pub struct Segment {
    pub key: String,
    pub tokens: u64,
}

#[derive(Debug, Clone)]
pub enum EventKind {
    Store {
        worker: String,
        epoch: u64,
        tenant: String,
        model: String,
        adapter: String,
        segments: Vec<Segment>,
    },
    Evict {
        worker: String,
        epoch: u64,
        tenant: String,
        model: String,
        adapter: String,
        keys: Vec<String>,
    },
    Clear {
        worker: String,
        epoch: u64,
    },
    Load {
        worker: String,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    },
    Request {
        id: String,
        tenant: String,
        model: String,
        adapter: String,
        prefix: Vec<Segment>,
        prompt_tokens: u64,
        decode_tokens: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Event {
    /// Position in the input `events` array, for error paths.
    pub index: usize,
    pub seq: u64,
    pub tick: u64,
    pub kind: EventKind,
}

impl Event {
    /// The worker a cache or load event names; requests name none.
    pub fn worker(&self) -> Option<&str> {
        match &self.kind {
            EventKind::Store { worker, .. }
            | EventKind::Evict { worker, .. }
            | EventKind::Clear { worker, .. }
            | EventKind::Load { worker, .. } => Some(worker),
            EventKind::Request { .. } => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Trace {
    pub limits: Profile,
    pub policy: Policy,
    pub sharing: Vec<Grant>,
    pub workers: Vec<Worker>,
    pub events: Vec<Event>,
}
