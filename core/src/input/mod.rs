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

pub mod compact;
mod document;
pub mod epoch;
pub mod json;
pub mod json_lines;
pub mod limits;
pub mod receipt;
pub mod trace;
pub mod validate;
