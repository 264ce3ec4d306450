//! SPEC §14.1.4: telling the completions' layout from the first line that is not blank.
//! That line (§14.5's blank: only space, tab, `\n`, `\r`) must be at most the line cap
//! and parse as a JSON object with exactly one of the sets of top-level members
//! `metadata` (`aiperf`), `event` or `event_type` (`dynamo`), `ttfts` (`vllm-bench`);
//! nothing else of the input is looked at. As in the line readers, the cap is checked
//! before the blank rule, so an over-long line of spaces is the line that cannot tell.

use super::{blank, split_lines, MAX_LINE_BYTES};
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

/// The layout of `bytes`: `Ok(None)` when no line is non-blank (no completion records),
/// `Err(line)` with the 1-based number of the first non-blank line when it cannot tell.
pub(super) fn detect(bytes: &[u8]) -> Result<Option<Layout>, usize> {
    for (index, line) in split_lines(bytes).iter().enumerate() {
        let number = index + 1;
        if line.len() > MAX_LINE_BYTES {
            return Err(number);
        }
        if blank(line) {
            continue;
        }
        let Ok(Node::Object(members)) = json::parse(line) else {
            return Err(number);
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
            _ => Err(number),
        };
    }
    Ok(None)
}
