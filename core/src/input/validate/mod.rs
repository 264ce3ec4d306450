//! Trace validation: bytes in, a [`Trace`] or every error with its JSON path out.
//!
//! Validation is all-or-nothing and runs in the four stages of SPEC.md §2.3: JSON
//! syntax, shape (types, required, unknown and repeated members), cross-references and
//! limits, then the overflow bound. Paths index the input arrays as given. Nothing in
//! here panics on any input: every value is checked before it is used.
//!
//! One file a stage: [`errors`] (what is reported and how paths are cut), [`shape`]
//! (stage 2) and [`typed`] (stage 2's common case, a regular element read with no tree
//! of it), [`references`] (stage 3), [`residency`] (stage 4), [`overflow`] (stage 5);
//! this file holds the entry points and runs the stages in order.

mod errors;
mod overflow;
mod references;
mod residency;
mod shape;
mod typed;

use crate::input::compact::{EventStore, EventsView};
use crate::input::document::{self, Items, Path};
use crate::input::json::{self, NodeSeed, BYTE_ORDER_MARK_MESSAGE};
use crate::input::limits::VALUE_BYTES_MAX;
use crate::input::trace::*;
pub use errors::ValidationErrors;
use overflow::overflow_error;
use references::cross_reference_and_limits;
use residency::ResidencyErrors;
use shape::Walk;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;

/// Parses and validates trace bytes.
pub fn parse_trace(bytes: &[u8]) -> Result<Trace, ValidationErrors> {
    if bytes.starts_with(BYTE_ORDER_MARK) {
        return Err(invalid_json(BYTE_ORDER_MARK_MESSAGE));
    }
    if let Some(checked) = parse_unmasked(bytes) {
        return checked;
    }
    let (masked, literals, cut) = json::mask_trace_numbers(bytes);
    let nodes = NodeSeed::masked(&literals);
    // Text that is UTF-8 as a whole (nearly every trace) is read as a `str`, so that
    // serde_json does not check each string again; it reads the same values and fails
    // at the same places either way.
    let read = match std::str::from_utf8(&masked) {
        Ok(text) => read_document(&mut serde_json::Deserializer::from_str(text), nodes),
        Err(_) => read_document(&mut serde_json::Deserializer::from_slice(&masked), nodes),
    };
    if let Some(cut) = cut.filter(|cut| cut.explains(read.as_ref().err())) {
        return Err(invalid_json(&cut.message()));
    }
    match read {
        Ok(read) => validated(read).map(with_events),
        Err(e) => Err(invalid_json(&e.to_string())),
    }
}

/// The trace with its events put back in.
fn with_events((mut trace, events): (Trace, Vec<Event>)) -> Trace {
    trace.events = events;
    trace
}

/// Why [`read_trace`] failed: the source could not be read, or what it held is not a
/// valid trace.
#[derive(Debug)]
pub enum ReadTraceError {
    Io(io::Error),
    Invalid(ValidationErrors),
}

impl fmt::Display for ReadTraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadTraceError::Io(e) => e.fmt(f),
            ReadTraceError::Invalid(errors) => errors.fmt(f),
        }
    }
}

impl std::error::Error for ReadTraceError {}

/// Reads and validates a trace from a stream (a file, stdin) in one pass, holding
/// neither its text nor a tree of it: the same trace, or the same errors, as
/// [`parse_trace`] of the same bytes.
pub fn read_trace<R: Read>(source: R) -> Result<Trace, ReadTraceError> {
    read_trace_into(source).map(with_events)
}

/// [`read_trace`] holding the events compactly ([`EventStore`]): the trace's other
/// members as a [`Trace`] whose `events` are empty, and its events. The same errors.
pub fn read_trace_compact<R: Read>(source: R) -> Result<(Trace, EventStore), ReadTraceError> {
    read_trace_into(source)
}

fn read_trace_into<R: Read, E: Items<Event> + EventsView + ResidencyErrors>(
    mut source: R,
) -> Result<(Trace, E), ReadTraceError> {
    // The byte order mark is refused before parsing (SPEC.md §2.2), so look at the
    // first three bytes, then hand them on ahead of the rest.
    let mut head = Vec::with_capacity(BYTE_ORDER_MARK.len());
    (&mut source)
        .take(BYTE_ORDER_MARK.len() as u64)
        .read_to_end(&mut head)
        .map_err(ReadTraceError::Io)?;
    if head == BYTE_ORDER_MARK {
        return Err(ReadTraceError::Invalid(invalid_json(
            BYTE_ORDER_MARK_MESSAGE,
        )));
    }
    let literals = Rc::new(RefCell::new(VecDeque::new()));
    let masked = json::MaskingReader::new(io::Cursor::new(head).chain(source), literals.clone());
    let cut = masked.value_cut();
    let mut de = serde_json::Deserializer::from_reader(io::BufReader::new(masked));
    let read = read_document(&mut de, NodeSeed::masked(&literals));
    if let Some(cut) = cut.get().filter(|cut| cut.explains(read.as_ref().err())) {
        return Err(ReadTraceError::Invalid(invalid_json(&cut.message())));
    }
    match read {
        Ok(read) => validated(read).map_err(ReadTraceError::Invalid),
        Err(e) if e.is_io() => Err(ReadTraceError::Io(e.into())),
        Err(e) => Err(ReadTraceError::Invalid(invalid_json(&e.to_string()))),
    }
}

const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

/// [`parse_trace`] of a document whose numbers are all plain integers, as nearly every
/// trace's are, and that is UTF-8: read as written, without the masking's scan and
/// copy, and validated. `None` for any other document, and for any that is not JSON:
/// that is read again masked, which reads the same values where this read gets that
/// far and reports serde_json's first syntax error or a value over the cap exactly.
/// No value of a document shorter than the cap can pass it.
fn parse_unmasked(bytes: &[u8]) -> Option<Result<Trace, ValidationErrors>> {
    if bytes.len() > VALUE_BYTES_MAX {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let no_literals = json::Literals::default();
    let nodes = NodeSeed::unmasked(&no_literals);
    let read = read_document(&mut serde_json::Deserializer::from_str(text), nodes).ok()?;
    Some(validated(read).map(with_events))
}

/// Reads the whole document (stages 1 and 2), up to the end of its input.
fn read_document<'de, R: serde_json::de::Read<'de>, E: Items<Event>>(
    de: &mut serde_json::Deserializer<R>,
    nodes: NodeSeed<'_>,
) -> serde_json::Result<document::Read<'de, Walk, E>> {
    let read = document::read(&mut *de, nodes)?;
    de.end()?;
    Ok(read)
}

/// The one error of a document that is not JSON (stage 1).
fn invalid_json(reason: &str) -> ValidationErrors {
    ValidationErrors::one(format!("$: invalid JSON: {reason}"))
}

/// Stages 2 to 5 on a document that was JSON.
fn validated<E: EventsView + ResidencyErrors>(
    read: document::Read<'_, Walk, E>,
) -> Result<(Trace, E), ValidationErrors> {
    let mut walk = Walk::default();
    let read = match read {
        document::Read::Object(doc) => walk.trace(doc),
        document::Read::Other(node) => {
            walk.object(&Path::Root, &node);
            None
        }
    };
    let (trace, events) = match read {
        Some(read) if walk.errors.is_empty() => read,
        _ => return Err(walk.errors),
    };
    let errors = cross_reference_and_limits(&trace, &events);
    if !errors.is_empty() {
        return Err(errors);
    }
    let errors = events.residency_errors(&trace);
    if !errors.is_empty() {
        return Err(errors);
    }
    if let Some(error) = overflow_error(&trace, &events) {
        return Err(ValidationErrors::one(error));
    }
    Ok((trace, events))
}
