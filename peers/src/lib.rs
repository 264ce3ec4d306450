//! kvroute's reuse question put to other KV indexers (SPEC.md, "Peers: what a
//! radix-tree indexer can represent").
//!
//! The Dynamo-free parts (the [`Peer`] trait, kvroute's own answer, the classification
//! of differences, the generator, the shrinker, the protocol client) are the
//! `kvroute-peer-core` crate's; this crate adds Dynamo: the in-process comparison and
//! the `kvroute-peer-dynamo` adapter, which speaks the peer protocol (SPEC.md §15).
//!
//! A router's KV indexer answers one question: given the cache events workers
//! published, how much of this request's prefix does each worker hold? [`Peer`] is that
//! question as a trait. [`kvroute::KvrouteIndex`] answers it with core's own rules
//! (epoch rule, cache index, reuse walk) through core's public API;
//! [`dynamo::DynamoIndex`] answers it with NVIDIA Dynamo's `RadixTree` or
//! `PositionalIndexer` (`dynamo-kv-router` 1.6.1), after [`chains`] has mapped kvroute's
//! keyed events onto Dynamo's hash chains. [`compare`] replays one trace into all of
//! them and explains every row on which they differ; [`generate`], [`sweep`] and
//! [`shrink`] find such rows on generated traces and cut them down to a few events.

pub mod chains;
pub mod compare;
pub mod dynamo;
pub mod selector;
pub mod shrink;
pub mod stream;
pub mod sweep;

// The Dynamo-free parts live in `kvroute-peer-core` (so `kvroute peer run` can reach
// them without Dynamo); their old paths stay.
pub use kvroute_peer_core::{densify, generate, kvroute, Applied, Peer};
