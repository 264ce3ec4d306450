//! Writing output: canonical bytes and digests, the receipt, JSON Lines, CSV and the
//! summary table (SPEC.md §6).
//!
//! What belongs here: how routing's records become bytes, and every digest. What must
//! not: a routing decision. Writers receive records from [`crate::route`] (in memory,
//! or through a [`crate::route::engine::RunSink`] while the runs replay) and never
//! change them.

pub mod canonical;
pub mod csv;
pub mod ids;
pub mod json_text;
pub mod jsonl;
pub mod receipt;
pub mod table;
pub mod typed;
