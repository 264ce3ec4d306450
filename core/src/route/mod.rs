//! Routing: the rules that decide (SPEC.md §3–§5).
//!
//! A validated trace is compiled ([`compiled`]), then replayed once per policy by the
//! [`engine`]. What belongs here: the router's state and the epoch rule ([`state`]),
//! residency ([`cache_index`]), the tenant rule ([`tenant`]), the reuse walk
//! ([`reuse`]), candidate rows and dominance ([`candidate`]), row reasons ([`reason`]),
//! the policy rule ([`policy`]), metrics ([`metrics`]), the records a run produces
//! ([`record`]) and the count of its entry operations ([`work`], SPEC.md §1.5). What
//! must not: bytes. Routing reads `input`'s types and never writes JSON or CSV;
//! [`crate::output`] does.

pub mod cache_index;
pub mod candidate;
pub mod compiled;
pub mod engine;
pub mod metrics;
pub mod policy;
pub mod reason;
pub mod record;
pub mod reuse;
pub mod state;
pub mod tenant;
pub mod work;
