//! Writing output: canonical bytes and digests, the receipt, JSON Lines, CSV and the
//! summary table (SPEC.md §6).
//!
//! What belongs here: how routing's records become bytes, and every digest. What must
//! not: a routing decision, or running one. Writers receive records from
//! [`crate::route`] (in memory, or as sinks, [`crate::route::record::RunSink`], that the
//! replay driver `crate::replay` feeds while the runs replay) and never change them;
//! `core/tests/layout.rs` checks that no file here imports the engine.

pub mod canonical;
pub mod csv;
pub mod ids;
pub mod json_text;
pub mod jsonl;
pub mod receipt;
pub mod table;
pub mod typed;
