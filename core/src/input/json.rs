//! A strict JSON document tree for trace input.
//!
//! `serde_json::Value` silently keeps the last of two members with the same name, so a
//! trace could mean two things at once. [`Node`] keeps every member in document order,
//! which lets validation reject repeated names with a path (SPEC.md §1.1), and keeps
//! numbers as `serde_json::Number` so that `5.0` and `1e3` stay distinguishable from `5`.

use crate::input::limits::integer_literal;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One JSON value, objects as ordered member lists (repeats kept).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// Parses bytes into a [`Node`], or returns the parser's message.
pub fn parse(bytes: &[u8]) -> Result<Node, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let node = Node::deserialize(&mut de).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(node)
}

impl Node {
    /// The node's value when it is an integer literal a trace may carry
    /// ([`integer_literal`]), else `None`.
    pub fn integer(&self) -> Option<u64> {
        match self {
            Node::Number(n) => integer_literal(n),
            _ => None,
        }
    }

    /// The value as `serde_json::Value` (for display only: repeated members collapse).
    pub fn to_value(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.clone()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }

    /// Compact JSON of the value cut to 40 characters, as error reasons quote it.
    pub fn quoted(&self) -> String {
        quote_value(&self.to_value())
    }
}

/// Compact JSON of `value`, cut to 40 characters with `...` appended when longer.
pub fn quote_value(value: &serde_json::Value) -> String {
    const QUOTE_CHARS_MAX: usize = 40;
    let text = value.to_string();
    if text.chars().count() <= QUOTE_CHARS_MAX {
        text
    } else {
        let cut: String = text.chars().take(QUOTE_CHARS_MAX).collect();
        format!("{cut}...")
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Node, E> {
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut members = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Node>()? {
            members.push((key, value));
        }
        Ok(Node::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_members_are_kept() {
        let node = parse(br#"{"a":1,"a":2}"#).unwrap();
        let Node::Object(members) = node else {
            panic!("expected an object")
        };
        assert_eq!(members.len(), 2);
    }

    #[test]
    fn floats_stay_floats() {
        let Node::Number(n) = parse(b"5.0").unwrap() else {
            panic!("expected a number")
        };
        assert!(n.as_u64().is_none());
        let Node::Number(n) = parse(b"1e3").unwrap() else {
            panic!("expected a number")
        };
        assert!(n.as_u64().is_none());
    }

    #[test]
    fn quotes_are_cut_at_forty_characters() {
        let long = serde_json::Value::String("x".repeat(60));
        let quoted = quote_value(&long);
        assert_eq!(quoted, format!("\"{}...", "x".repeat(39)));
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        assert!(parse(b"{} x").is_err());
    }
}
