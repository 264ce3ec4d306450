//! What a run produces: its decisions with their candidate rows, its cache and
//! observation logs, and its metrics (SPEC.md §6, as data rather than bytes).
//!
//! Rows and logs refer to workers by index into the id-sorted worker list; ids are put
//! back only when [`crate::output`] writes them.

use crate::input::trace::OpKind;
use crate::route::candidate::CandidateRow;
use crate::route::metrics::Metrics;
use crate::route::policy::{Policy, RouteKind};
use crate::route::state::Outcome;

/// One routing decision and every candidate row behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub seq: u64,
    pub tick: u64,
    pub request: String,
    pub chosen: Option<usize>,
    pub route_kind: RouteKind,
    pub tie_count: u64,
    pub margin_milli: u64,
    pub candidates: Vec<CandidateRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub epoch: u64,
    pub op: OpKind,
    pub outcome: Outcome,
    /// Rejected mutations, under the `key_epoch` rule only (SPEC.md §3.2).
    pub stale_mutations: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationLogEntry {
    pub seq: u64,
    pub tick: u64,
    pub worker: usize,
    pub observed_tick: u64,
    pub outcome: Outcome,
}

/// One policy's replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub policy: Policy,
    pub decisions: Vec<Decision>,
    pub cache_log: Vec<CacheLogEntry>,
    pub observation_log: Vec<ObservationLogEntry>,
    pub metrics: Metrics,
}
