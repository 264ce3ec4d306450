//! Writing output: canonical bytes and digests, the receipt, JSON Lines, CSV and the
//! summary table (SPEC.md §6).
//!
//! What belongs here: how routing's records become bytes, and every digest. What must
//! not: a routing decision, or running one. Writers receive records from
//! [`crate::route`] (in memory, or as sinks, [`crate::route::record::RunSink`], that the
//! replay driver `crate::replay` feeds while the runs replay) and never change them;
//! `core/tests/layout.rs` checks that no file here imports the engine.

pub(crate) mod canonical;
pub(crate) mod csv;
pub(crate) mod ids;
pub(crate) mod json_text;
pub(crate) mod jsonl;
pub(crate) mod receipt;
pub(crate) mod table;
pub(crate) mod typed;

// The public part of writing: canonical bytes and digests, receipts, CSV, request-id
// keying, the summary table and JSON string quoting (`crate::replay` writes whole runs).
pub use crate::input::json::quote_str;
pub use canonical::{
    canonical_event_bytes, canonical_fleet_members, canonical_trace_bytes, canonical_trace_value,
    jcs_bytes, sha256_tag, trace_digest, trace_digest_of, CanonicalTraceStream,
};
pub use csv::{csv_bytes, id_cell, CsvIds, CSV_COLUMNS};
pub use ids::{key_request_ids, keyed_id};
pub use jsonl::STREAM_FORMAT;
pub use receipt::{metrics_value, Receipt, RECEIPT_FORMAT};
pub use table::{columns, summary_table_of};
pub use typed::push_decision_ref;
