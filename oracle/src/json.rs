//! A JSON tree that keeps every object member, in document order, including repeated
//! names. `serde_json::Value` silently keeps only the last of a repeated member, but
//! SPEC.md §1.1 requires repeated members to be reported, so the oracle parses into
//! this tree instead. Parsing itself is serde_json's (through a `Visitor`), so exactly
//! standard JSON is accepted and numbers are read exactly as `serde_json::Value` reads
//! them: integer literals that fit become u64/i64, everything else an f64.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// One JSON value. Objects are a list of `(name, value)` pairs so that repeats survive.
#[derive(Debug, Clone)]
pub enum Node {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(serde_json::Number::from(v)))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(serde_json::Number::from(v)))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Node, E> {
        // serde_json never hands over a non-finite float, but refuse one rather than panic.
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom("number is not finite"))
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
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        // Every member is kept, repeats included; the validator decides what they mean.
        let mut members = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value::<Node>()?;
            members.push((name, value));
        }
        Ok(Node::Object(members))
    }
}

/// Parses one JSON document (trailing garbage is an error). Err carries serde_json's
/// message, used verbatim in the `$: invalid JSON: <message>` line.
pub fn parse(bytes: &[u8]) -> Result<Node, String> {
    serde_json::from_slice::<Node>(bytes).map_err(|e| e.to_string())
}

/// The `serde_json::Value` this node would have parsed to: members are inserted in
/// document order, so a repeated name keeps its last value, exactly as serde_json does.
pub fn to_value(node: &Node) -> serde_json::Value {
    match node {
        Node::Null => serde_json::Value::Null,
        Node::Bool(b) => serde_json::Value::Bool(*b),
        Node::Number(n) => serde_json::Value::Number(n.clone()),
        Node::String(s) => serde_json::Value::String(s.clone()),
        Node::Array(items) => serde_json::Value::Array(items.iter().map(to_value).collect()),
        Node::Object(members) => {
            let mut map = serde_json::Map::new();
            for (name, value) in members {
                map.insert(name.clone(), to_value(value));
            }
            serde_json::Value::Object(map)
        }
    }
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

/// The offending value as quoted in a reason: compact JSON as serde_json prints it, cut.
pub fn quote(node: &Node) -> String {
    cut(serde_json::to_string(&to_value(node)).unwrap_or_default())
}

/// A string from the trace as quoted in a reason (`"w0"`): JSON-escaped, then cut.
pub fn quote_str(text: &str) -> String {
    cut(serde_json::to_string(text).unwrap_or_default())
}

/// First occurrence of a member; later repeats are reported, never used.
pub fn member<'a>(members: &'a [(String, Node)], name: &str) -> Option<&'a Node> {
    members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}
