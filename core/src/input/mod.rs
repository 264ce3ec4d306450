//! Reading input: the trace as Rust types, strict JSON, validation, the limits and what
//! every JSON Lines reader shares (SPEC.md §1, §2, §14). Other formats' importers are
//! in `import`, which builds on this folder.
//!
//! Everything here turns bytes into a [`trace::Trace`] that satisfies every rule of the
//! contract, or into errors that name a JSON path (or an input line) and a reason; the
//! one exception is [`receipt`], the streaming reader of a receipt that `join` and the
//! CLI's report read. What belongs here: shapes, value rules, cross-references, limits,
//! overflow, and the epoch rule that both validation's residency stage and routing's
//! state apply. What must not: anything else about routing; this folder imports
//! nothing from the others.

pub(crate) mod compact;
mod document;
pub(crate) mod epoch;
pub(crate) mod json;
pub(crate) mod json_lines;
pub(crate) mod limits;
pub(crate) mod receipt;
pub(crate) mod trace;
pub(crate) mod validate;

// The public part of reading: the trace as types, the limits other crates check against,
// the compact event store, and the receipt reader (`crate::parse_trace` and its
// siblings are re-exported at the crate root).
pub use compact::{EventStore, EventsView};
pub use limits::{LimitsProfile, ERROR_LINES_MAX, JSON_INTEGER_MAX, VALUE_BYTES_MAX};
pub use receipt::{
    read as read_receipt, read_layout as read_receipt_layout, Layout, Member, Place,
    ReceiptOutline, ReceiptSink, RECEIPT_FORMAT, RECEIPT_HEAD, STREAM_FORMAT, STREAM_HEAD,
};
pub use trace::{
    fleet_worker_id, CacheEntry, CacheOp, EpochsMode, Event, EventKind, Grant, Namespace, OpKind,
    PolicyParams, Request, Segment, StaleRule, Trace, WorkerSpec,
};
