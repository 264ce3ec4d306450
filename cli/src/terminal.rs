//! Text that came from an input (ids, names, a report's own strings), made safe to print
//! on a terminal. A control character in an id could move the cursor, erase a line or
//! hide the rest of it (`\r\e[2Kok: ...\e[8m` makes a failing check read as a pass), and
//! a bidirectional override could reorder what is shown. Each such character is written
//! as the escape SPEC.md §2.2 uses inside quoted values (`\n`, `\u001b`), or as `\u{...}`
//! for the ones JSON has no short form for above U+001F, so the text shown is the text
//! read, visibly.

use std::borrow::Cow;
use std::fmt::Write;

/// `n` and its noun, singular for exactly one (`1 request`, `0 requests`,
/// `2 divergences`): a summary line is read by people first.
pub fn counted(n: impl Into<u128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Whether `c` changes what a terminal shows instead of being shown: C0 and C1 control
/// characters, DEL, and the bidirectional embeddings, overrides and isolates.
fn acts_on_terminal(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character that would act on a terminal escaped; borrowed when
/// there is none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < ' ' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{counted, printable};

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(counted(1u64, "request", "requests"), "1 request");
        assert_eq!(counted(0u64, "request", "requests"), "0 requests");
        assert_eq!(counted(2u64, "divergence", "divergences"), "2 divergences");
    }

    #[test]
    fn plain_text_is_borrowed_and_unchanged() {
        let text = "request acme-01 (seq 3): \"w0\" ≠ \"w1\" é 😀";
        assert!(matches!(printable(text), std::borrow::Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn every_character_that_acts_on_a_terminal_is_escaped() {
        let spoof = "\r\u{1b}[2Kok: the receipt matches\u{1b}[8m";
        assert_eq!(
            printable(spoof),
            "\\r\\u001b[2Kok: the receipt matches\\u001b[8m"
        );
        assert_eq!(printable("a\u{0}\u{7f}\u{9b}b"), "a\\u0000\\u{7f}\\u{9b}b");
        assert_eq!(printable("\u{202e}cba\u{2066}"), "\\u{202e}cba\\u{2066}");
        assert_eq!(printable("\t\n\u{8}\u{c}"), "\\t\\n\\b\\f");
    }
}
