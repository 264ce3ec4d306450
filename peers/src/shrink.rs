//! Cutting a trace down to the few events that still show a difference, with the
//! in-process Dynamo comparison deciding whether a candidate still shows it (the
//! cutting and shrinking themselves are `kvroute_peer_core::shrink`'s).

use crate::compare::{compare, Cause, Difference, Options};
use kvroute_core::input::Trace;
pub use kvroute_peer_core::shrink::{cut_for, shrink};

/// [`cut_for`] the row's own worker when that still shows the difference, else for all
/// workers; `None` when neither does (the difference needs more than the cut keeps).
pub fn cut_reproducing(trace: &Trace, difference: &Difference, options: Options) -> Option<Trace> {
    kvroute_peer_core::shrink::cut_reproducing(trace, difference, |cut| {
        shows(cut, options, &difference.comparison, difference.cause)
    })
}

/// Whether `trace` still shows a difference of `comparison` with `cause`.
pub fn shows(trace: &Trace, options: Options, comparison: &str, cause: Cause) -> bool {
    compare(trace, options)
        .tallies
        .iter()
        .any(|t| t.comparison == comparison && t.count(cause) > 0)
}
