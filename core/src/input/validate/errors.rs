//! What validation reports: the error lines, capped at [`ERROR_LINES_MAX`], and how a
//! long JSON path is cut to print (SPEC.md §2.1).

use crate::input::limits::ERROR_LINES_MAX;
use std::borrow::Cow;
use std::fmt;

/// Why a trace was rejected: the first [`ERROR_LINES_MAX`] `PATH: reason` lines in
/// report order, and how many more there were. Only the printed lines are kept, so a
/// document with millions of defects costs 100 strings, not millions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    /// At most [`ERROR_LINES_MAX`] lines.
    pub errors: Vec<String>,
    /// Errors found after the first [`ERROR_LINES_MAX`], counted, not kept.
    pub more: usize,
}

impl ValidationErrors {
    pub(super) fn one(line: String) -> Self {
        ValidationErrors {
            errors: vec![line],
            more: 0,
        }
    }

    /// Records one error at a path; the line is only formatted while there is room to
    /// keep it, and its path is cut ([`cut_path`]).
    pub(super) fn push_with<P: AsRef<str>, R: fmt::Display>(
        &mut self,
        error: impl FnOnce() -> (P, R),
    ) {
        if self.errors.len() < ERROR_LINES_MAX {
            let (path, reason) = error();
            self.errors
                .push(format!("{}: {reason}", cut_path(path.as_ref())));
        } else {
            self.more += 1;
        }
    }

    /// Appends `other`'s errors after these, as if each had been pushed here.
    pub(super) fn append(&mut self, other: ValidationErrors) {
        for line in other.errors {
            if self.errors.len() < ERROR_LINES_MAX {
                self.errors.push(line);
            } else {
                self.more += 1;
            }
        }
        self.more += other.more;
    }

    /// Whether no error was found.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Every error found, kept or counted.
    pub fn count(&self) -> usize {
        self.errors.len() + self.more
    }

    /// The lines as printed: at most [`ERROR_LINES_MAX`], then a count of the rest.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.errors.clone();
        if self.more > 0 {
            lines.push(format!("... and {} more errors", self.more));
        }
        lines
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

impl std::error::Error for ValidationErrors {}

/// A path as error lines print it (SPEC.md §2.1): whole up to [`PATH_CHARS_MAX`]
/// characters, else its first [`PATH_HEAD_CHARS`], the marker and its last
/// [`PATH_TAIL_CHARS`]. Characters, not bytes, so a cut never splits a UTF-8 sequence;
/// a 50 MB member name gives a 120-character path, not a 50 MB line.
pub fn cut_path(path: &str) -> Cow<'_, str> {
    // Byte length bounds the character count from above: most paths are ASCII and
    // short, and need no counting.
    if path.len() <= PATH_CHARS_MAX || path.chars().count() <= PATH_CHARS_MAX {
        return Cow::Borrowed(path);
    }
    let head_end = path
        .char_indices()
        .nth(PATH_HEAD_CHARS)
        .map_or(path.len(), |(i, _)| i);
    let tail_start = path
        .char_indices()
        .rev()
        .nth(PATH_TAIL_CHARS - 1)
        .map_or(0, |(i, _)| i);
    Cow::Owned(format!(
        "{}{PATH_CUT_MARKER}{}",
        &path[..head_end],
        &path[tail_start..]
    ))
}

/// The longest path printed whole, and how a longer one is cut (SPEC.md §2.1).
pub const PATH_CHARS_MAX: usize = 120;
pub const PATH_HEAD_CHARS: usize = 80;
pub const PATH_TAIL_CHARS: usize = 35;
pub const PATH_CUT_MARKER: &str = "[...]";
