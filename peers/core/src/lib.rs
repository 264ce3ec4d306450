//! The part of kvroute's peer comparison that needs no peer linked in (SPEC.md §12,
//! §15).
//!
//! A router's KV indexer answers one question: given the cache events workers
//! published, how much of this request's prefix does each worker hold? [`Peer`] is that
//! question as a trait, and [`kvroute::KvrouteIndex`] kvroute's own answer. [`classify`]
//! explains every row on which a peer's answer differs from kvroute's by the known
//! differences of §12; [`chains`] is the chain structure those causes reason about.
//! [`protocol`] drives a peer that is a child process over `kvroute-peer/1` and
//! [`run`] compares its answers; [`generate`], [`shrink`] and [`sweep`] find differing
//! rows on generated traces and cut them down. The `kvroute` binary (`kvroute peer run`)
//! and `kvroute-peers` (Dynamo in-process) both build on this crate, so a difference is
//! classified by one piece of code whichever way the peer is reached, and the `kvroute`
//! binary never has Dynamo in its dependency graph.

pub mod chains;
pub mod classify;
pub mod generate;
pub mod kvroute;
pub mod peer_sweep;
pub mod protocol;
pub mod run;
pub mod shrink;
pub mod sweep;

use kvroute_core::route::{Op, Req};

/// What an indexer did with one cache event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The event changed (or confirmed) the index.
    Applied,
    /// kvroute's epoch rule dropped it (SPEC.md §3.2).
    StaleEpoch,
    /// A chain store whose parent block the indexer does not hold: the whole store is
    /// dropped (Dynamo's `ParentBlockNotFound`).
    ParentNotFound,
    /// A chain removal naming a block the indexer does not hold (`BlockNotFound`).
    BlockNotFound,
}

/// A KV indexer under test: it is told every cache event in delivery order and asked,
/// for each request, how many prompt tokens each worker could reuse.
pub trait Peer {
    /// A short name for tables and reports (`kvroute`, `radix_tree`, `positional`).
    fn name(&self) -> &'static str;

    /// Applies one cache event of worker `worker` (an index in worker-id byte order).
    fn apply_cache_event(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> Applied;

    /// Replaces `answer` with the workers that can reuse some of `request`'s prompt, as
    /// `(worker, tokens)` pairs: tokens above 0, capped at the prompt length, each worker
    /// once, in ascending worker order. A worker not listed reuses 0. The answer is
    /// sparse because an indexer finds the holders of a prefix, not every worker: a
    /// dense slot per worker would make each request cost O(workers) whatever the index
    /// does (the comparison densifies where it compares every row).
    fn reuse_tokens(&mut self, request: &Req, answer: &mut Vec<(u32, u64)>);
}

/// Writes a sparse [`Peer::reuse_tokens`] answer into one slot per worker (all others 0).
pub fn densify(answer: &[(u32, u64)], reuse_tokens: &mut [u64]) {
    reuse_tokens.fill(0);
    for &(worker, tokens) in answer {
        reuse_tokens[worker as usize] = tokens;
    }
}
