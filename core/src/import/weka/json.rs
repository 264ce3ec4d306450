//! The shape of one Weka session file as serde reads it (SPEC.md §19.1), kept loose:
//! every member the import reads is held as whatever JSON it was, so that a wrong type
//! is reported later by its JSON path in the import's own words, and only bytes that
//! are not JSON at all are serde_json's errors. Members the import does not read are
//! skipped without being held.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A JSON value where the import wanted one of a few: scalars kept, arrays and objects
/// only named.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(String),
    Bool(bool),
    Null,
    Array,
    Object,
}

impl Value {
    /// What the value is, as a reason names it (`a string`).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Unsigned(_) | Value::Signed(_) | Value::Float(_) => "a number",
            Value::Text(_) => "a string",
            Value::Bool(_) => "a boolean",
            Value::Null => "null",
            Value::Array => "an array",
            Value::Object => "an object",
        }
    }

    /// The value as serde_json writes it: a string quoted, a number as read back; an
    /// array or an object by its kind.
    pub fn shown(&self) -> String {
        match self {
            Value::Unsigned(n) => n.to_string(),
            Value::Signed(n) => n.to_string(),
            Value::Float(x) => {
                serde_json::Number::from_f64(*x).map_or_else(|| x.to_string(), |n| n.to_string())
            }
            Value::Text(s) => serde_json::Value::String(s.clone()).to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Null => "null".to_owned(),
            Value::Array | Value::Object => self.kind().to_owned(),
        }
    }
}

/// The `visit_*` methods of a scalar, each turning its value into a [`Value`] and that
/// into the visitor's own type through `From<Value>`.
macro_rules! scalar_visits {
    () => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Value::Bool(v).into())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Value::Signed(v).into())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Value::Unsigned(v).into())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Value::Float(v).into())
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Value::Text(v.to_owned()).into())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Value::Null.into())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Value::Null.into())
        }
    };
}

/// Reads every element of an array without holding it.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Reads every member of an object without holding it.
fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        drain_seq(seq).map(|()| Value::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        drain_map(map).map(|()| Value::Object)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

/// A request's `hash_ids`: the ids, or where the first entry that is not an integer
/// from 0 to 2^64 - 1 is (range against 2^53 - 1 is checked later), or what stood in
/// place of the array.
#[derive(Debug, Clone, PartialEq)]
pub enum Ids {
    List(Vec<u64>),
    BadEntry { index: usize, found: Value },
    NotArray(Value),
}

impl From<Value> for Ids {
    fn from(value: Value) -> Ids {
        Ids::NotArray(value)
    }
}

struct IdsVisitor;

impl<'de> Visitor<'de> for IdsVisitor {
    type Value = Ids;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of ids")
    }
    scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ids, A::Error> {
        let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut bad = None;
        while let Some(value) = seq.next_element::<Value>()? {
            match (value, &bad) {
                (Value::Unsigned(id), None) => ids.push(id),
                (_, Some(_)) => {}
                (found, None) => bad = Some((ids.len(), found)),
            }
        }
        Ok(match bad {
            Some((index, found)) => Ids::BadEntry { index, found },
            None => Ids::List(ids),
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Ids, A::Error> {
        drain_map(map).map(|()| Ids::NotArray(Value::Object))
    }
}

impl<'de> Deserialize<'de> for Ids {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ids, D::Error> {
        deserializer.deserialize_any(IdsVisitor)
    }
}

/// A `requests` array: its entries, or what stood in its place.
#[derive(Debug, Clone, PartialEq)]
pub enum Entries {
    List(Vec<Entry>),
    NotArray(Value),
}

impl From<Value> for Entries {
    fn from(value: Value) -> Entries {
        Entries::NotArray(value)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of requests")
    }
    scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
        let mut entries = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(entry) = seq.next_element::<Entry>()? {
            entries.push(entry);
        }
        Ok(Entries::List(entries))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entries, A::Error> {
        drain_map(map).map(|()| Entries::NotArray(Value::Object))
    }
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entries, D::Error> {
        deserializer.deserialize_any(EntriesVisitor)
    }
}

/// The members of one entry of `requests` that the import reads (a request's, or a
/// sub-agent's), each as found; and the names given more than once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EntryMembers {
    pub kind: Option<Value>,
    pub t: Option<Value>,
    pub input: Option<Value>,
    pub output: Option<Value>,
    pub hash_ids: Option<Ids>,
    pub requests: Option<Entries>,
    pub repeated: Vec<String>,
}

/// One entry of `requests`: an object, or what stood in its place.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Object(Box<EntryMembers>),
    Other(Value),
}

impl From<Value> for Entry {
    fn from(value: Value) -> Entry {
        Entry::Other(value)
    }
}

/// Puts `value` in `slot`, noting `name` as repeated when the slot was already filled.
fn fill<T>(slot: &mut Option<T>, value: T, name: &str, repeated: &mut Vec<String>) {
    if slot.replace(value).is_some() && !repeated.iter().any(|r| r == name) {
        repeated.push(name.to_owned());
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a request or a sub-agent")
    }
    scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Entry, A::Error> {
        drain_seq(seq).map(|()| Entry::Other(Value::Array))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let mut m = EntryMembers::default();
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let repeated = &mut m.repeated;
            match &*name {
                "type" => fill(&mut m.kind, map.next_value()?, &name, repeated),
                "t" => fill(&mut m.t, map.next_value()?, &name, repeated),
                "in" => fill(&mut m.input, map.next_value()?, &name, repeated),
                "out" => fill(&mut m.output, map.next_value()?, &name, repeated),
                "hash_ids" => fill(&mut m.hash_ids, map.next_value()?, &name, repeated),
                "requests" => fill(&mut m.requests, map.next_value()?, &name, repeated),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(Entry::Object(Box::new(m)))
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Entry, D::Error> {
        deserializer.deserialize_any(EntryVisitor)
    }
}

/// The top-level members the import reads, each as found, and the names repeated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocumentMembers {
    pub block_size: Option<Value>,
    pub hash_id_scope: Option<Value>,
    pub requests: Option<Entries>,
    pub repeated: Vec<String>,
}

/// A session file: an object, or what stood in its place.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    Object(DocumentMembers),
    Other(Value),
}

impl From<Value> for Document {
    fn from(value: Value) -> Document {
        Document::Other(value)
    }
}

struct DocumentVisitor;

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Document;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a session object")
    }
    scalar_visits!();
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Document, A::Error> {
        drain_seq(seq).map(|()| Document::Other(Value::Array))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut m = DocumentMembers::default();
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let repeated = &mut m.repeated;
            match &*name {
                "block_size" => fill(&mut m.block_size, map.next_value()?, &name, repeated),
                "hash_id_scope" => fill(&mut m.hash_id_scope, map.next_value()?, &name, repeated),
                "requests" => fill(&mut m.requests, map.next_value()?, &name, repeated),
                _ => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(Document::Object(m))
    }
}

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Document, D::Error> {
        deserializer.deserialize_any(DocumentVisitor)
    }
}

/// Parses one session file's bytes: the document, or serde_json's syntax error as
/// `(line, reason)` with the reason naming the column.
pub fn parse_document(bytes: &[u8]) -> Result<Document, (usize, String)> {
    serde_json::from_slice::<Document>(bytes).map_err(|e| {
        let message = e.to_string();
        let at = format!(" at line {} column {}", e.line(), e.column());
        let bare = message.strip_suffix(&at).unwrap_or(&message);
        (
            e.line(),
            format!("invalid JSON: {bare} at column {}", e.column()),
        )
    })
}
