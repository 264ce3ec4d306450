//! Reading input: the trace as Rust types, strict JSON, validation, the limits, the
//! Mooncake import and the engine KV-event import (SPEC.md §1, §2, §10, §13).
//!
//! Everything here turns bytes into a [`trace::Trace`] that satisfies every rule of the
//! contract, or into errors that name a JSON path (or an input line) and a reason. What
//! belongs here: shapes, value rules, cross-references, limits, overflow, and the epoch
//! rule that both validation's residency stage and routing's state apply. What must
//! not: anything else about routing; this folder imports nothing from the others.

mod document;
pub mod epoch;
pub mod json;
pub mod kv_events;
pub mod limits;
pub mod mooncake;
pub mod trace;
pub mod validate;
