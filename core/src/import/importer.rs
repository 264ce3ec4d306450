//! The one contract every input format meets: [`Importer`], its [`Report`] and its
//! [`ImportError`].
//!
//! An importer reads its opened inputs and hands the trace's events, in canonical
//! `(tick, seq)` order (SPEC.md §6.1), to a sink as it makes them, then returns the
//! rest of the trace (workers, policy, sharing) and what the command prints about it.
//! Opening the inputs, writing the output under SPEC.md §7's file rules and printing
//! are the caller's, so a format only says how its bytes become a trace. This file
//! names nothing of any format, so formats depend on it and never on each other.

use crate::input::trace::{Event, Trace};
use std::fmt;
use std::io::BufRead;
use std::path::Path;

/// One opened input of an import, read from where it stands.
pub type Source<'s> = Box<dyn BufRead + 's>;

/// An input format that becomes a `kvroute-trace/1` document.
pub trait Importer {
    /// The format's name, as `kvroute import NAME` spells it (`mooncake`).
    fn name(&self) -> &'static str;

    /// The files the import reads, in the order [`Importer::import`] takes them opened
    /// (`-` is stdin), as the user gave them: messages name them so.
    fn inputs(&self) -> Vec<&Path>;

    /// What an input is called in the message for one that cannot be opened:
    /// `FILE: cannot read WHAT: ERROR`; none by default (`FILE: cannot read: ERROR`).
    fn input_kind(&self) -> Option<&'static str> {
        None
    }

    /// Reads `sources` (one per [`Importer::inputs`], in that order) to their end,
    /// handing each event of the trace to `sink` in canonical order as soon as it is
    /// known, and returns the trace without its events and the report; or every
    /// problem found. Events handed on before a rejection are the caller's to discard.
    /// Memory is what the format must keep to order and check its events, not the
    /// input's length, wherever the format allows it.
    fn import(
        &self,
        sources: Vec<Source<'_>>,
        sink: &mut dyn FnMut(Event),
    ) -> Result<Imported, ImportError>;

    /// Every check of [`Importer::import`], for a caller that must not write before
    /// the inputs are known to be accepted (a FIFO output cannot be taken back): the
    /// same errors, the events discarded. A format that can check without building
    /// its events says so by overriding this.
    fn check(&self, sources: Vec<Source<'_>>) -> Result<(), ImportError> {
        self.import(sources, &mut |_| {}).map(|_| ())
    }

    /// The command its messages name: `kvroute import NAME`.
    fn command(&self) -> String {
        format!("kvroute import {}", self.name())
    }

    /// The error for an input that cannot be opened or read.
    fn cannot_read(&self, input: &Path, error: std::io::Error) -> ImportError {
        let reason = match self.input_kind() {
            Some(kind) => format!("cannot read {kind}: {error}"),
            None => format!("cannot read: {error}"),
        };
        ImportError::Rejected(vec![Problem::of_input(input, reason)])
    }
}

/// An accepted import: the trace without its events (those went to the sink) and the
/// report to print.
#[derive(Debug)]
pub struct Imported {
    pub head: Trace,
    pub report: Report,
}

/// What `kvroute import` prints about an accepted import: the counts on its first line
/// (`imported 3 requests, 2 workers, ... -> OUT (DIGEST)`) and the lines after it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Each count with its noun, singular then plural, in the order printed.
    pub counts: Vec<(u64, &'static str, &'static str)>,
    /// Whatever the format says after the first line: tallies, warnings, notes.
    pub lines: Vec<String>,
}

impl Report {
    /// The counts as the first line lists them: `3 requests, 1 worker, 0 segments`.
    pub fn counted(&self) -> String {
        let listed: Vec<String> = self
            .counts
            .iter()
            .map(|&(n, one, many)| format!("{n} {}", if n == 1 { one } else { many }))
            .collect();
        listed.join(", ")
    }
}

/// Why an import wrote nothing: the one error type of every format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportError {
    /// The inputs (or the options) break a rule: each problem names where.
    Rejected(Vec<Problem>),
    /// The inputs are well-formed but hold nothing a replay could use (SPEC.md §13.5).
    Empty(Problem),
}

impl ImportError {
    /// The lines to print, one a problem.
    pub fn lines(&self) -> Vec<String> {
        match self {
            ImportError::Rejected(problems) => problems.iter().map(Problem::to_string).collect(),
            ImportError::Empty(problem) => vec![problem.to_string()],
        }
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

impl std::error::Error for ImportError {}

/// One problem, printed as `AT:LINE: REASON`, or `AT: REASON` for one of an input as a
/// whole (its line 0). `AT` is an input as the user named it or, for a problem of
/// the inputs together or of the options, the command (`kvroute import NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub at: String,
    /// The 1-based line; 0 for the input or the import as a whole.
    pub line: usize,
    pub reason: String,
}

impl Problem {
    /// A problem of line `line` (0: the whole) of `input`.
    pub fn at_line(input: &Path, line: usize, reason: String) -> Problem {
        Problem {
            at: input.display().to_string(),
            line,
            reason,
        }
    }

    /// A problem of `input` as a whole.
    pub fn of_input(input: &Path, reason: String) -> Problem {
        Problem::at_line(input, 0, reason)
    }

    /// A problem of the import as a whole, named by its `command`.
    pub fn of_import(command: String, reason: String) -> Problem {
        Problem {
            at: command,
            line: 0,
            reason,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.at, self.reason),
            line => write!(f, "{}:{line}: {}", self.at, self.reason),
        }
    }
}

/// `sources` as the `N` inputs an importer reads, or the error of a caller that opened
/// another number (named by the importer's `command`).
pub fn sources_as<const N: usize>(
    command: String,
    sources: Vec<Source<'_>>,
) -> Result<[Source<'_>; N], ImportError> {
    let given = sources.len();
    <[Source<'_>; N]>::try_from(sources).map_err(|_| {
        let reason = format!("{N} inputs are read, {given} were opened");
        ImportError::Rejected(vec![Problem::of_import(command, reason)])
    })
}
