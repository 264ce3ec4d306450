//! SPEC §14.1.4: telling the completions' layout from the first line that is not blank.
//! That line (§14.5's blank: only space, tab, `\n`, `\r`) must be at most the line cap
//! and parse as a JSON object with exactly one of the sets of top-level members
//! `metadata` (`aiperf`), `event` or `event_type` (`dynamo`), `ttfts` (`vllm-bench`);
//! nothing else of the input is looked at. As in the line readers, the cap is checked
//! before the blank rule, so an over-long line of spaces is the line that cannot tell.
//! A first line that is not JSON text whatever its layout (a byte order mark, bytes
//! that are not UTF-8) is not a line that cannot tell but its own line error.

use super::{blank, split_lines, BOM_REASON, MAX_LINE_BYTES};
use crate::json::{self, Node};

/// The three layouts of SPEC §14.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    Aiperf,
    Dynamo,
    VllmBench,
}

impl Layout {
    /// The layout `--completions-format` names.
    pub(super) fn named(name: &str) -> Option<Layout> {
        match name {
            "aiperf" => Some(Layout::Aiperf),
            "dynamo" => Some(Layout::Dynamo),
            "vllm-bench" => Some(Layout::VllmBench),
            _ => None,
        }
    }
}

/// Why the layout was not told, with the 1-based number of the first non-blank line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Undetected {
    /// The line cannot tell the layout (`cannot tell the completions format`).
    CannotTell(usize),
    /// The line is not JSON text whatever its layout: the reason, `invalid JSON: ...`.
    NotJsonText(usize, String),
}

/// Why `line` is not JSON text whatever its layout, if it is not (§14.1.4): the byte
/// order mark first, as §14.5, 1 checks it before anything else of a line; then the
/// first byte that does not continue valid UTF-8, whose 1-based column is one past the
/// valid prefix (a sequence cut short by the end of the line counts from its lead byte).
fn not_json_text(line: &[u8]) -> Option<String> {
    if line.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Some(BOM_REASON.to_owned());
    }
    let error = std::str::from_utf8(line).err()?;
    let column = error.valid_up_to() + 1;
    Some(format!(
        "invalid JSON: the line is not UTF-8 at column {column}"
    ))
}

/// The layout of `bytes`: `Ok(None)` when no line is non-blank (no completion records),
/// else the first non-blank line's layout, or why it gives none.
pub(super) fn detect(bytes: &[u8]) -> Result<Option<Layout>, Undetected> {
    for (index, line) in split_lines(bytes).iter().enumerate() {
        let number = index + 1;
        // The cap first: an over-long line is never scanned for UTF-8 (§14.1.4).
        if line.len() > MAX_LINE_BYTES {
            return Err(Undetected::CannotTell(number));
        }
        if blank(line) {
            continue;
        }
        if let Some(reason) = not_json_text(line) {
            return Err(Undetected::NotJsonText(number, reason));
        }
        let Ok(Node::Object(members)) = json::parse(line) else {
            return Err(Undetected::CannotTell(number));
        };
        let has = |name: &str| members.iter().any(|(n, _)| n == name);
        let sets = [
            (has("metadata"), Layout::Aiperf),
            (has("event") || has("event_type"), Layout::Dynamo),
            (has("ttfts"), Layout::VllmBench),
        ];
        let mut found = sets.iter().filter(|(present, _)| *present);
        return match (found.next(), found.next()) {
            (Some((_, layout)), None) => Ok(Some(*layout)),
            _ => Err(Undetected::CannotTell(number)),
        };
    }
    Ok(None)
}
