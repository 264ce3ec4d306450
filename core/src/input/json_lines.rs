//! Reading JSON Lines input that is not a trace: a Mooncake trace (SPEC.md §10) and
//! completion records (§14). What every such reader shares, written once: a line is
//! capped and a longer one read past, never held; a line's JSON is read strictly (the
//! [`Node`] of [`crate::input::json`], which keeps repeated members and numbers as
//! written) with its byte order mark named and its parser position said as a column of
//! that line; and errors name their input line, the first [`ERROR_LINES_MAX`] kept and
//! the rest counted.

use crate::input::json::{self, Node};
use crate::input::limits::ERROR_LINES_MAX;
use std::fmt;
use std::io::BufRead;

/// The longest line read (SPEC.md §10.2, §14.1). A valid Mooncake request needs at most
/// `ceil(2,097,152 tokens / 1 token a block)` ids of at most 16 digits, about 38 MB with
/// their separators; 64 MiB leaves room for whitespace. A longer line is an error and
/// is read past, never held: a line with no end (a pipe of spaces) once grew until the
/// allocator aborted.
pub const LINE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// What reading one line gave.
enum LineRead {
    /// The end of the input.
    End,
    /// A line, in the buffer (with its `\n`, when it has one).
    Line,
    /// A line over the cap, read to its end and dropped.
    TooLong,
}

/// Reads one line of at most `cap` bytes into `line`; a longer one is consumed to its
/// `\n` (or the input's end) a buffer at a time, and only its first `cap + 1` bytes
/// were ever held.
fn read_line_capped(
    input: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let n = std::io::Read::take(&mut *input, limit).read_until(b'\n', line)?;
    if n == 0 {
        return Ok(LineRead::End);
    }
    if line.len() <= cap || (line.ends_with(b"\n") && line.len() == cap + 1) {
        return Ok(LineRead::Line);
    }
    line.clear();
    loop {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            return Ok(LineRead::TooLong);
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(end) => {
                input.consume(end + 1);
                return Ok(LineRead::TooLong);
            }
            None => {
                let all = buffer.len();
                input.consume(all);
            }
        }
    }
}

/// One line as [`for_each_line`] hands it out.
pub(crate) enum Line<'b> {
    /// The line's bytes as read, with its `\n` when it has one.
    Bytes(&'b [u8]),
    /// A line over the cap, read past and dropped.
    TooLong,
}

/// Calls `each` with the number (from 1) and the [`Line`] of every line of `input`,
/// lines capped at `cap` bytes. On a read error, returns it with the number the line
/// being read would have had; what was read before it was handed out.
pub(crate) fn for_each_line(
    mut input: impl BufRead,
    cap: usize,
    mut each: impl FnMut(usize, Line<'_>),
) -> Result<(), (usize, std::io::Error)> {
    let mut buffer = Vec::new();
    for number in 1.. {
        match read_line_capped(&mut input, &mut buffer, cap) {
            Ok(LineRead::End) => break,
            Ok(LineRead::TooLong) => each(number, Line::TooLong),
            Ok(LineRead::Line) => each(number, Line::Bytes(&buffer)),
            Err(e) => return Err((number, e)),
        }
    }
    Ok(())
}

/// The JSON value of one line (its `\n` or `\r\n` left out), or the reason it is none:
/// `invalid JSON: ...` with the parser's message, the byte order mark named as for a
/// trace (SPEC.md §2.2: the parser would only say `expected value`).
pub(crate) fn line_json(line_bytes: &[u8]) -> Result<Node, String> {
    if line_bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(
            "invalid JSON: the line starts with a UTF-8 byte order mark (EF BB BF), which \
             JSON text must not carry"
                .to_owned(),
        );
    }
    // The line's own terminator is not part of its JSON: left in, an error at the end of
    // the line would be placed on "line 2" of it.
    let json_bytes = line_bytes
        .strip_suffix(b"\n")
        .map_or(line_bytes, |rest| rest.strip_suffix(b"\r").unwrap_or(rest));
    json::parse_node(json_bytes).map_err(|e| invalid_json_reason(&e))
}

/// `invalid JSON: <parser message> at column <c>`: the parser's own position says
/// "line 1" of a single line, which reads like the wrong input line.
fn invalid_json_reason(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) if e.line() == 1 => {
            format!("invalid JSON: {message} at column {}", e.column())
        }
        _ => format!("invalid JSON: {text}"),
    }
}

/// One reason an input was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// The 1-based input line; 0 for a problem with the options or the input as a whole.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.reason)
        } else {
            write!(f, "line {}: {}", self.line, self.reason)
        }
    }
}

impl std::error::Error for LineError {}

/// The errors collected so far: the first [`ERROR_LINES_MAX`] kept, the rest counted.
#[derive(Default)]
pub(crate) struct LineErrors {
    shown: Vec<LineError>,
    more: usize,
}

impl LineErrors {
    pub(crate) fn push(&mut self, line: usize, reason: String) {
        if self.shown.len() < ERROR_LINES_MAX {
            self.shown.push(LineError { line, reason });
        } else {
            self.more += 1;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shown.is_empty()
    }

    pub(crate) fn finish(mut self) -> Vec<LineError> {
        if self.more > 0 {
            self.shown.push(LineError {
                line: 0,
                reason: format!("... and {} more errors", self.more),
            });
        }
        self.shown
    }
}
