//! A JSON tree that keeps every object member, in document order, including repeated
//! names, and every number as its literal text. `serde_json::Value` silently keeps only
//! the last of a repeated member, but SPEC.md §1.1 requires repeated members to be
//! reported; and SPEC §2.2 quotes numbers exactly as written (`1e3`, `-0`, `1e400`),
//! which no parsed number can give back. Parsing itself is serde_json's (through a
//! `Visitor`), so exactly standard JSON is accepted and syntax errors carry serde_json's
//! messages; numbers are handled by a naive byte scan first (see [`parse`]).

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

/// One JSON value. Objects are a list of `(name, value)` pairs so that repeats survive.
#[derive(Debug, Clone)]
pub enum Node {
    Null,
    Bool(bool),
    /// The number's literal text exactly as written in the document (SPEC §2.2).
    Number(String),
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// Builds nodes while serde_json walks the placeholder document: the n-th number
/// serde_json reports is the n-th number literal of the document (JSON object names are
/// always strings, so every number literal is a value and is reported once, in order).
#[derive(Clone, Copy)]
struct NodeSeed<'a> {
    literals: &'a [String],
    next_literal: &'a Cell<usize>,
}

impl NodeSeed<'_> {
    fn number<E: serde::de::Error>(self) -> Result<Node, E> {
        let index = self.next_literal.get();
        self.next_literal.set(index + 1);
        match self.literals.get(index) {
            Some(text) => Ok(Node::Number(text.clone())),
            // Cannot happen: the scan and serde_json see the same literals.
            None => Err(E::custom("internal error: number literal out of step")),
        }
    }
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = Node;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = Node;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    // The placeholder's value is meaningless; only its position in the document counts.
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Node, E> {
        self.number()
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Node, E> {
        self.number()
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Node, E> {
        self.number()
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        // Every member is kept, repeats included; the validator decides what they mean.
        let mut members = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value_seed(self)?;
            members.push((name, value));
        }
        Ok(Node::Object(members))
    }
}

/// Length of the well-formed JSON number literal (RFC 8259 §6:
/// `[-] (0 | [1-9][0-9]*) [. [0-9]+] [(e|E) [+|-] [0-9]+]`) starting at `start`, or
/// `None` when the characters there do not form one (`-`, `1.`, `1e`, `01`).
fn number_literal_len(bytes: &[u8], start: usize) -> Option<usize> {
    let digits_from = |mut at: usize| {
        while at < bytes.len() && bytes[at].is_ascii_digit() {
            at += 1;
        }
        at
    };
    let mut at = start;
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    match bytes.get(at) {
        Some(b'0') => {
            at += 1;
            // A leading zero followed by a digit is not a literal (serde_json: invalid number).
            if bytes.get(at).is_some_and(u8::is_ascii_digit) {
                return None;
            }
        }
        Some(b'1'..=b'9') => at = digits_from(at),
        _ => return None,
    }
    if bytes.get(at) == Some(&b'.') {
        let end = digits_from(at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits_from(at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at - start)
}

/// The document with every well-formed number literal replaced by a placeholder of the
/// same length that serde_json reads in range (`0` or `-0`, padded with spaces, which
/// JSON allows after a number), and the literals' texts in document order. Same length
/// and the same first character keep every syntax error where, and as, serde_json
/// reports it for the document read "as if in range" (SPEC §2). Strings are skipped
/// byte by byte (an escape skips the byte after `\`); a malformed literal is left as
/// it is, so serde_json reports it. Before serde_json's first error this scan and
/// serde_json agree on where strings are; after it nothing matters.
fn with_placeholder_numbers(bytes: &[u8]) -> (Vec<u8>, Vec<String>) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut literals = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if byte == b'"' {
            out.push(byte);
            at += 1;
            while at < bytes.len() {
                let inner = bytes[at];
                out.push(inner);
                at += 1;
                if inner == b'\\' {
                    if at < bytes.len() {
                        out.push(bytes[at]);
                        at += 1;
                    }
                } else if inner == b'"' {
                    break;
                }
            }
        } else if byte == b'-' || byte.is_ascii_digit() {
            match number_literal_len(bytes, at) {
                Some(len) => {
                    // A literal is ASCII, so the lossy conversion never changes it.
                    literals.push(String::from_utf8_lossy(&bytes[at..at + len]).into_owned());
                    let placeholder: &[u8] = if byte == b'-' { b"-0" } else { b"0" };
                    out.extend_from_slice(placeholder);
                    out.resize(out.len() + len - placeholder.len(), b' ');
                    at += len;
                }
                None => {
                    // Copy the whole malformed run so no part of it becomes a placeholder.
                    while at < bytes.len()
                        && matches!(bytes[at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                    {
                        out.push(bytes[at]);
                        at += 1;
                    }
                }
            }
        } else {
            out.push(byte);
            at += 1;
        }
    }
    (out, literals)
}

/// Parses one JSON document (trailing garbage is an error). Err carries serde_json's
/// message, used verbatim in the `$: invalid JSON: <message>` line. Numbers of any size
/// are well-formed (SPEC §1.1) and kept as their literal text.
pub fn parse(bytes: &[u8]) -> Result<Node, String> {
    let (document, literals) = with_placeholder_numbers(bytes);
    let next_literal = Cell::new(0);
    let seed = NodeSeed {
        literals: &literals,
        next_literal: &next_literal,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(&document);
    let root = seed
        .deserialize(&mut deserializer)
        .map_err(|e| e.to_string())?;
    deserializer.end().map_err(|e| e.to_string())?;
    Ok(root)
}

/// Longest quotation, in Unicode scalar values, before `...` is appended (SPEC §2.2).
const QUOTE_LIMIT_CHARS: usize = 40;

/// Cuts a rendering to 40 chars (on a char boundary) and appends `...` when it was longer.
fn cut(rendered: String) -> String {
    if rendered.chars().count() > QUOTE_LIMIT_CHARS {
        let mut short: String = rendered.chars().take(QUOTE_LIMIT_CHARS).collect();
        short.push_str("...");
        short
    } else {
        rendered
    }
}

/// A string as SPEC §2.2 writes it: quoted, `"` and `\` escaped, the five short
/// control escapes, other controls as lowercase `\u00xx`, everything else as itself.
pub fn render_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Compact JSON of a node as SPEC §2.2 writes it: numbers as written, object members in
/// byte order of their names, a repeated name once with its last value.
fn render(node: &Node, out: &mut String) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(true) => out.push_str("true"),
        Node::Bool(false) => out.push_str("false"),
        Node::Number(text) => out.push_str(text),
        Node::String(text) => render_string(text, out),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(item, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            // A later insert replaces an earlier one, so each name keeps its last value;
            // a BTreeMap iterates in byte order of its keys (never a hash order), and
            // keeps an object of very many members from being deduplicated in
            // quadratic time.
            let mut shown: BTreeMap<&str, &Node> = BTreeMap::new();
            for (name, value) in members {
                shown.insert(name, value);
            }
            out.push('{');
            for (i, (name, value)) in shown.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render_string(name, out);
                out.push(':');
                render(value, out);
            }
            out.push('}');
        }
    }
}

/// The offending value as quoted in a reason: compact JSON as SPEC §2.2 writes it, cut.
pub fn quote(node: &Node) -> String {
    let mut rendered = String::new();
    render(node, &mut rendered);
    cut(rendered)
}

/// A string from the trace as quoted in a reason (`"w0"`): JSON-escaped, then cut.
pub fn quote_str(text: &str) -> String {
    let mut rendered = String::new();
    render_string(text, &mut rendered);
    cut(rendered)
}

/// First occurrence of a member; later repeats are reported, never used.
pub fn member<'a>(members: &'a [(String, Node)], name: &str) -> Option<&'a Node> {
    members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}
