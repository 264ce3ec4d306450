//! The path and number helpers every validation stage shares: `B` (SPEC §1.1), the
//! paths of SPEC §2.1 (a member, an index, and the cut of a long path) and the
//! `PATH: reason` line of §2.2. They sit below `validate` (stages 1–2) and `limits`
//! (stages 3–5), which both import them, so that neither of those two needs the other
//! for them and the stages run one way only: `validate` calls `limits`.

use crate::json;

/// `B = 2^53 − 1`, the largest integer a trace or receipt carries.
pub const INTEGER_MAX: u64 = 9_007_199_254_740_991;

/// Path of a member: `parent.name`, or just `name` at the top level (parent `""`).
/// A name that is not a plain identifier goes in brackets as a JSON string
/// (`parent["a b"]`, `$["a b"]` at the top level), per SPEC §2.1.
pub fn member_path(parent: &str, name: &str) -> String {
    let mut chars = name.chars();
    let plain = match chars.next() {
        Some(first) => {
            (first.is_ascii_alphabetic() || first == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    };
    if !plain {
        let mut quoted = String::new();
        json::render_string(name, &mut quoted);
        let shown_parent = if parent.is_empty() { "$" } else { parent };
        format!("{shown_parent}[{quoted}]")
    } else if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

pub fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Paths longer than this many characters (Unicode scalar values) are cut (SPEC §2.1).
const PATH_LIMIT_CHARS: usize = 120;
/// A cut path keeps this many leading characters ...
const PATH_HEAD_CHARS: usize = 80;
/// ... then this marker ...
const PATH_CUT_MARKER: &str = "[...]";
/// ... then this many trailing characters: 80 + 5 + 35 = 120 in all.
const PATH_TAIL_CHARS: usize = 35;

/// A path as written in an error line: in full up to 120 characters, else its first 80
/// characters, `[...]` and its last 35, whatever the path's syntax there (SPEC §2.1).
fn shown_path(path: &str) -> String {
    let chars: Vec<char> = path.chars().collect();
    if chars.len() <= PATH_LIMIT_CHARS {
        return path.to_owned();
    }
    let head: String = chars[..PATH_HEAD_CHARS].iter().collect();
    let tail: String = chars[chars.len() - PATH_TAIL_CHARS..].iter().collect();
    format!("{head}{PATH_CUT_MARKER}{tail}")
}

/// One `PATH: reason` line; the whole document (path `""`) is written `$`.
pub fn line(path: &str, reason: &str) -> String {
    let shown = if path.is_empty() { "$" } else { path };
    format!("{}: {reason}", shown_path(shown))
}
