//! Routing: the rules that decide (SPEC.md §3–§5).
//!
//! A validated trace is compiled ([`compiled`]; one whose events are held compactly,
//! [`compact`]), then each policy's run is replayed by
//! the [`engine`] (which runs, and into which output, is [`crate::replay`]'s business). What belongs here: the router's state and the epoch rule ([`state`]),
//! residency, the reuse walk and the count of entry operations ([`cache`]), the tenant
//! rule ([`tenant`]), candidate rows and their dominance ([`candidate`]), row reasons
//! ([`reason`]), the policy rule ([`policy`]), metrics ([`metrics`]), and the records
//! a run produces with the sinks they go to ([`record`]). What
//! must not: bytes. Routing reads `input`'s types and never writes JSON or CSV;
//! [`crate::output`] does.

pub mod cache;
pub mod candidate;
pub mod compact;
pub mod compiled;
pub mod engine;
pub mod metrics;
pub mod policy;
pub mod reason;
pub mod record;
pub mod state;
pub mod tenant;
