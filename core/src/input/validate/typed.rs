//! Stage 2's common case: an element of `sharing`, `workers` or `events` read straight
//! into its typed form, with no [`Node`] tree of it (SPEC.md §2.3).
//!
//! One serde visitor reads the element's members by name, each as the type the contract
//! gives that name (an integer as its `u64`, a string borrowed from the text when it has
//! no escape, a list of segments, keys or cache entries already typed). A value that is
//! not of its type, or not in its range, is read as a [`Node`] in its place; once the
//! element is read, it is typed only if it is regular: exactly its object's members,
//! each once and each typed. Anything else (a wrong type, an unknown, repeated or
//! missing member, a masked literal) turns the members read back into the element's
//! node, and the shape walk of [`super::shape`] checks that node as it checks every
//! element: the errors, their order and every quoted value stay the walk's own. The
//! text is read once either way, so serde_json's syntax errors and positions, and the
//! queue of masked literals (each `-0` is read as a node, which takes its text), are
//! as they were.

use super::shape::{SharedStrings, Walk};
use crate::input::document::{self, Path};
use crate::input::json::{self, MemberName, NodeOf as Node, NodeSeed, Number};
use crate::input::limits::JSON_INTEGER_MAX;
use crate::input::trace::*;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// What the contract expects of a member, by its name: each name means one type in
/// every object it appears in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// An integer from 0 to 2^53 - 1.
    Integer,
    /// An integer from 1 to 2^53 - 1.
    Rate,
    /// A non-empty string.
    Text,
    /// An array of segments.
    Segments,
    /// An array of non-empty strings.
    Texts,
    /// An array of cache entries.
    Entries,
}

/// Defines [`Field`] from one list, so each name and its type are written once.
macro_rules! fields {
    ($($field:ident = $name:literal: $expect:ident,)*) => {
        /// A member name that some element of the streamed arrays may carry.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        enum Field { $($field,)* }

        impl Field {
            fn of(name: &str) -> Option<Field> {
                match name {
                    $($name => Some(Field::$field),)*
                    _ => None,
                }
            }

            fn name(self) -> &'static str {
                match self {
                    $(Field::$field => $name,)*
                }
            }

            fn expect(self) -> Expect {
                match self {
                    $(Field::$field => Expect::$expect,)*
                }
            }
        }
    };
}

fields! {
    Seq = "seq": Integer,
    Tick = "tick": Integer,
    Type = "type": Text,
    Op = "op": Text,
    Worker = "worker": Text,
    Epoch = "epoch": Integer,
    Tenant = "tenant": Text,
    Model = "model": Text,
    Adapter = "adapter": Text,
    Segments = "segments": Segments,
    Keys = "keys": Texts,
    Id = "id": Text,
    Prefix = "prefix": Segments,
    PromptTokens = "prompt_tokens": Integer,
    DecodeTokens = "decode_tokens": Integer,
    ObservedTick = "observed_tick": Integer,
    QueuedPrefill = "queued_prefill": Integer,
    ActiveDecode = "active_decode": Integer,
    Key = "key": Text,
    Tokens = "tokens": Integer,
    Tenants = "tenants": Texts,
    Adapters = "adapters": Texts,
    PrefillRate = "prefill_rate": Rate,
    DecodeRate = "decode_rate": Rate,
    Cache = "cache": Entries,
}

/// The members of each object, as in [`members`] (a test keeps the two in step).
mod tables {
    use super::Field::{self, *};

    pub const SEGMENT: &[Field] = &[Key, Tokens];
    pub const CACHE_ENTRY: &[Field] = &[Tenant, Model, Adapter, Key, Tokens];
    pub const GRANT: &[Field] = &[Model, Adapter, Tenants];
    pub const WORKER: &[Field] = &[
        Id,
        Model,
        Adapters,
        PrefillRate,
        DecodeRate,
        QueuedPrefill,
        ActiveDecode,
        ObservedTick,
        Epoch,
        Cache,
    ];
    pub const CACHE_STORE: &[Field] = &[
        Seq, Tick, Type, Op, Worker, Epoch, Tenant, Model, Adapter, Segments,
    ];
    pub const CACHE_EVICT: &[Field] = &[
        Seq, Tick, Type, Op, Worker, Epoch, Tenant, Model, Adapter, Keys,
    ];
    pub const CACHE_CLEAR: &[Field] = &[Seq, Tick, Type, Op, Worker, Epoch];
    pub const LOAD: &[Field] = &[
        Seq,
        Tick,
        Type,
        Worker,
        ObservedTick,
        QueuedPrefill,
        ActiveDecode,
    ];
    pub const REQUEST: &[Field] = &[
        Seq,
        Tick,
        Type,
        Id,
        Tenant,
        Model,
        Adapter,
        Prefix,
        PromptTokens,
        DecodeTokens,
    ];
}

/// A member's name as read: one the typed read knows, or any other (kept for the node).
enum Key {
    Field(Field),
    Other(MemberName),
}

impl Key {
    fn into_name(self) -> MemberName {
        match self {
            Key::Field(field) => Cow::Borrowed(field.name()),
            Key::Other(name) => name,
        }
    }
}

/// A member's value read as its name's type, and in range.
enum Value<'de> {
    Integer(u64),
    Text(Cow<'de, str>),
    Segments(Vec<Segment>),
    Texts(Vec<Arc<str>>),
    Entries(Vec<CacheEntry>),
}

impl<'de> Value<'de> {
    /// The value as the node the shape walk would have read. A typed list's objects
    /// are rebuilt in the contract's member order, which may not be the text's: they are
    /// regular, so no error names their members, and a quoted object is printed in byte
    /// order of its names whatever the order read.
    fn into_node(self) -> Node<'de> {
        match self {
            Value::Integer(v) => integer_node(v),
            Value::Text(s) => Node::String(s),
            Value::Segments(segments) => {
                Node::Array(segments.into_iter().map(segment_node).collect())
            }
            Value::Texts(texts) => Node::Array(texts.iter().map(|s| text_node(s)).collect()),
            Value::Entries(entries) => Node::Array(entries.into_iter().map(entry_node).collect()),
        }
    }
}

fn integer_node<'de>(v: u64) -> Node<'de> {
    Node::Number(Number::Integer(v))
}

fn text_node<'de>(s: &str) -> Node<'de> {
    Node::String(Cow::Owned(s.to_owned()))
}

fn object_node<'de, const N: usize>(members: [(Field, Node<'de>); N]) -> Node<'de> {
    Node::Object(
        members
            .into_iter()
            .map(|(field, node)| (Cow::Borrowed(field.name()), node))
            .collect(),
    )
}

fn segment_node<'de>(segment: Segment) -> Node<'de> {
    object_node([
        (Field::Key, text_node(&segment.key)),
        (Field::Tokens, integer_node(segment.tokens)),
    ])
}

fn entry_node<'de>(entry: CacheEntry) -> Node<'de> {
    object_node([
        (Field::Tenant, text_node(&entry.namespace.tenant)),
        (Field::Model, text_node(&entry.namespace.model)),
        (Field::Adapter, text_node(&entry.namespace.adapter)),
        (Field::Key, text_node(&entry.key)),
        (Field::Tokens, integer_node(entry.tokens)),
    ])
}

/// The members of one object read so far, while each is one the typed read knows,
/// read once and of its type: in document order, on the stack (an event has 10).
#[derive(Default)]
struct Record<'de> {
    members: SmallVec<[(Field, Value<'de>); 10]>,
    /// The fields read, one bit each.
    seen: u32,
}

impl Field {
    fn bit(self) -> u32 {
        1 << self as u32
    }
}

impl<'de> Record<'de> {
    /// Whether the members are exactly `table`'s (each was read once).
    fn is_exactly(&self, table: &[Field]) -> bool {
        self.members.len() == table.len() && table.iter().all(|f| self.seen & f.bit() != 0)
    }

    fn get(&self, field: Field) -> Option<&Value<'de>> {
        self.members
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, value)| value)
    }

    fn get_mut(&mut self, field: Field) -> Option<&mut Value<'de>> {
        self.members
            .iter_mut()
            .find(|(f, _)| *f == field)
            .map(|(_, value)| value)
    }

    fn integer(&self, field: Field) -> Option<u64> {
        match self.get(field)? {
            Value::Integer(v) => Some(*v),
            _ => None,
        }
    }

    fn text(&self, field: Field) -> Option<&str> {
        match self.get(field)? {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    fn shared(&self, field: Field, strings: &mut SharedStrings) -> Option<Arc<str>> {
        self.text(field).map(|s| strings.share(s))
    }

    fn namespace(&self, strings: &mut SharedStrings) -> Option<Namespace> {
        Some(Namespace {
            tenant: self.shared(Field::Tenant, strings)?,
            model: self.shared(Field::Model, strings)?,
            adapter: self.shared(Field::Adapter, strings)?,
        })
    }

    fn texts(&self, field: Field) -> Option<&[Arc<str>]> {
        match self.get(field)? {
            Value::Texts(texts) => Some(texts),
            _ => None,
        }
    }

    /// Moves a typed list out, leaving it empty. Called last, once every other member
    /// was found, so a record it fails on is still whole for its node.
    fn take<T>(
        &mut self,
        field: Field,
        list: for<'v> fn(&'v mut Value<'de>) -> Option<&'v mut Vec<T>>,
    ) -> Option<Vec<T>> {
        self.get_mut(field).and_then(list).map(std::mem::take)
    }

    /// The members as the shape walk reads them.
    fn into_members(self) -> Vec<(MemberName, Node<'de>)> {
        self.members
            .into_iter()
            .map(|(field, value)| (Cow::Borrowed(field.name()), value.into_node()))
            .collect()
    }
}

fn segments_of<'a>(value: &'a mut Value<'_>) -> Option<&'a mut Vec<Segment>> {
    match value {
        Value::Segments(list) => Some(list),
        _ => None,
    }
}

fn texts_of<'a>(value: &'a mut Value<'_>) -> Option<&'a mut Vec<Arc<str>>> {
    match value {
        Value::Texts(list) => Some(list),
        _ => None,
    }
}

fn entries_of<'a>(value: &'a mut Value<'_>) -> Option<&'a mut Vec<CacheEntry>> {
    match value {
        Value::Entries(list) => Some(list),
        _ => None,
    }
}

/// An object the typed read builds from a regular [`Record`].
trait Kind: Sized {
    type Typed;
    /// The typed form when `record` is regular, else `None` (the record unchanged).
    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<Self::Typed>;

    /// Reads the object's members and types them: by default through a [`Record`].
    fn read_map<'de, A: MapAccess<'de>>(
        reader: &mut Reader<'_>,
        map: A,
    ) -> Result<Result<Self::Typed, Node<'de>>, A::Error> {
        read_record::<Self, A>(reader, map)
    }
}

struct AsSegment;

impl Kind for AsSegment {
    type Typed = Segment;

    /// Segments are most of a trace's objects (207,351 of about 220,000 in the
    /// benchmark's trace), so theirs is a read of its own: two slots, and a record only
    /// once something is irregular.
    fn read_map<'de, A: MapAccess<'de>>(
        reader: &mut Reader<'_>,
        mut map: A,
    ) -> Result<Result<Segment, Node<'de>>, A::Error> {
        let nodes = reader.nodes;
        let (mut key, mut tokens) = (None, None);
        while let Some(name) = map.next_key_seed(KeySeed)? {
            let broken = match name {
                Key::Field(Field::Key) if key.is_none() => {
                    match map.next_value_seed(TextSeed { nodes })? {
                        Ok(text) => {
                            key = Some(text);
                            continue;
                        }
                        Err(node) => (Cow::Borrowed(Field::Key.name()), node),
                    }
                }
                Key::Field(Field::Tokens) if tokens.is_none() => {
                    match map.next_value_seed(IntegerSeed { nodes, min: 0 })? {
                        Ok(integer) => {
                            tokens = Some(integer);
                            continue;
                        }
                        Err(node) => (Cow::Borrowed(Field::Tokens.name()), node),
                    }
                }
                name => {
                    let value = map.next_value_seed(nodes)?;
                    (name.into_name(), value)
                }
            };
            return rest_as_node(map, segment_record(key, tokens), broken, nodes).map(Err);
        }
        Ok(match (key, tokens) {
            (Some(key), Some(tokens)) => Ok(Segment {
                key: reader.strings.share(&key),
                tokens,
            }),
            (key, tokens) => Err(Node::Object(segment_record(key, tokens).into_members())),
        })
    }

    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<Segment> {
        if !record.is_exactly(tables::SEGMENT) {
            return None;
        }
        Some(Segment {
            key: record.shared(Field::Key, strings)?,
            tokens: record.integer(Field::Tokens)?,
        })
    }
}

/// A segment's members read so far, as a [`Record`]: their order is the contract's, not
/// necessarily the text's, which no error or quote can tell apart (see
/// [`Value::into_node`]).
fn segment_record<'de>(key: Option<Cow<'de, str>>, tokens: Option<u64>) -> Record<'de> {
    let mut record = Record::default();
    let members = [
        key.map(|key| (Field::Key, Value::Text(key))),
        tokens.map(|tokens| (Field::Tokens, Value::Integer(tokens))),
    ];
    for (field, value) in members.into_iter().flatten() {
        record.members.push((field, value));
        record.seen |= field.bit();
    }
    record
}

struct AsEntry;

impl Kind for AsEntry {
    type Typed = CacheEntry;

    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<CacheEntry> {
        if !record.is_exactly(tables::CACHE_ENTRY) {
            return None;
        }
        Some(CacheEntry {
            namespace: record.namespace(strings)?,
            key: record.shared(Field::Key, strings)?,
            tokens: record.integer(Field::Tokens)?,
        })
    }
}

struct AsGrant;

impl Kind for AsGrant {
    type Typed = Grant;

    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<Grant> {
        if !record.is_exactly(tables::GRANT) {
            return None;
        }
        let model = record.shared(Field::Model, strings)?;
        let adapter = record.shared(Field::Adapter, strings)?;
        let tenants = record.take(Field::Tenants, texts_of)?;
        Some(Grant {
            model,
            adapter,
            tenants,
        })
    }
}

struct AsWorker;

impl Kind for AsWorker {
    type Typed = WorkerSpec;

    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<WorkerSpec> {
        if !record.is_exactly(tables::WORKER) {
            return None;
        }
        let id = record.shared(Field::Id, strings)?;
        let model = record.shared(Field::Model, strings)?;
        // A worker names a few adapters: copying their pointers keeps `take` the last
        // step, the one that can leave the record changed.
        let adapters = record.texts(Field::Adapters)?.to_vec();
        let rate = |field| record.integer(field);
        let (prefill_rate, decode_rate) = (rate(Field::PrefillRate)?, rate(Field::DecodeRate)?);
        let queued_prefill = record.integer(Field::QueuedPrefill)?;
        let active_decode = record.integer(Field::ActiveDecode)?;
        let observed_tick = record.integer(Field::ObservedTick)?;
        let epoch = record.integer(Field::Epoch)?;
        let cache = record.take(Field::Cache, entries_of)?;
        Some(WorkerSpec {
            id,
            model,
            adapters,
            prefill_rate,
            decode_rate,
            queued_prefill,
            active_decode,
            observed_tick,
            epoch,
            cache,
        })
    }
}

struct AsEvent;

/// The five objects an event can be, by its `type` and `op`.
#[derive(Clone, Copy)]
enum EventShape {
    Store,
    Evict,
    Clear,
    Load,
    Request,
}

impl EventShape {
    fn table(self) -> &'static [Field] {
        match self {
            EventShape::Store => tables::CACHE_STORE,
            EventShape::Evict => tables::CACHE_EVICT,
            EventShape::Clear => tables::CACHE_CLEAR,
            EventShape::Load => tables::LOAD,
            EventShape::Request => tables::REQUEST,
        }
    }
}

impl Kind for AsEvent {
    type Typed = Event;

    fn build(record: &mut Record<'_>, strings: &mut SharedStrings) -> Option<Event> {
        let shape = match (record.text(Field::Type)?, record.text(Field::Op)) {
            ("cache", Some("store")) => EventShape::Store,
            ("cache", Some("evict")) => EventShape::Evict,
            ("cache", Some("clear")) => EventShape::Clear,
            ("load", _) => EventShape::Load,
            ("request", _) => EventShape::Request,
            _ => return None,
        };
        if !record.is_exactly(shape.table()) {
            return None;
        }
        let seq = record.integer(Field::Seq)?;
        let tick = record.integer(Field::Tick)?;
        let kind = match shape {
            EventShape::Load => EventKind::Load {
                worker: record.shared(Field::Worker, strings)?,
                observed_tick: record.integer(Field::ObservedTick)?,
                queued_prefill: record.integer(Field::QueuedPrefill)?,
                active_decode: record.integer(Field::ActiveDecode)?,
            },
            EventShape::Request => {
                let id = Arc::from(record.text(Field::Id)?);
                let namespace = record.namespace(strings)?;
                let prompt_tokens = record.integer(Field::PromptTokens)?;
                let decode_tokens = record.integer(Field::DecodeTokens)?;
                EventKind::Request(Request {
                    id,
                    namespace,
                    prefix: record.take(Field::Prefix, segments_of)?,
                    prompt_tokens,
                    decode_tokens,
                })
            }
            EventShape::Store | EventShape::Evict | EventShape::Clear => {
                let worker = record.shared(Field::Worker, strings)?;
                let epoch = record.integer(Field::Epoch)?;
                let op = match shape {
                    EventShape::Store => {
                        let namespace = record.namespace(strings)?;
                        let segments = record.take(Field::Segments, segments_of)?;
                        CacheOp::Store {
                            namespace,
                            segments,
                        }
                    }
                    EventShape::Evict => {
                        let namespace = record.namespace(strings)?;
                        let keys = record.take(Field::Keys, texts_of)?;
                        CacheOp::Evict { namespace, keys }
                    }
                    _ => CacheOp::Clear,
                };
                EventKind::Cache { worker, epoch, op }
            }
        };
        Some(Event { seq, tick, kind })
    }
}

/// What a typed read needs: the masked literals' queue, for the values read as nodes,
/// and the walk's shared strings.
struct Reader<'a> {
    nodes: NodeSeed<'a>,
    strings: &'a mut SharedStrings,
}

impl Reader<'_> {
    fn node(&self) -> NodeSeed<'_> {
        self.nodes
    }
}

/// Every visit of a typed seed that is not its type reads the value as a node, which
/// is `Err` of the seed's value.
macro_rules! otherwise_node {
    ($($visit:ident($($arg:ident: $ty:ty)?);)*) => {
        $(fn $visit<E: serde::de::Error>(self, $($arg: $ty)?) -> Result<Self::Value, E> {
            self.nodes().$visit($($arg)?).map(Err)
        })*
    };
}

macro_rules! otherwise_node_containers {
    () => {
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            self.nodes().visit_seq(seq).map(Err)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            self.nodes().visit_map(map).map(Err)
        }
    };
}

/// The seed that reads a value as a node, for [`otherwise_node`].
trait Nodes {
    fn nodes(&self) -> NodeSeed<'_>;
}

impl Nodes for IntegerSeed<'_> {
    fn nodes(&self) -> NodeSeed<'_> {
        self.nodes
    }
}

impl Nodes for TextSeed<'_> {
    fn nodes(&self) -> NodeSeed<'_> {
        self.nodes
    }
}

impl Nodes for ListVisitor<'_, '_> {
    fn nodes(&self) -> NodeSeed<'_> {
        self.reader.nodes
    }
}

impl<K> Nodes for RecordSeed<'_, '_, K> {
    fn nodes(&self) -> NodeSeed<'_> {
        self.reader.nodes
    }
}

/// An integer of at least `min`, at most 2^53 - 1.
struct IntegerSeed<'l> {
    nodes: NodeSeed<'l>,
    min: u64,
}

impl<'de> DeserializeSeed<'de> for IntegerSeed<'_> {
    type Value = Result<u64, Node<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IntegerSeed<'_> {
    type Value = Result<u64, Node<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }
    // A plain integer reaches serde_json as written (see `json`), so its `u64` is the
    // value the walk's `integer` reads.
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(if (self.min..=JSON_INTEGER_MAX).contains(&v) {
            Ok(v)
        } else {
            Err(integer_node(v))
        })
    }
    otherwise_node! {
        visit_unit(); visit_none(); visit_bool(v: bool); visit_i64(v: i64); visit_f64(v: f64);
        visit_borrowed_str(v: &'de str); visit_str(v: &str); visit_string(v: String);
    }
    otherwise_node_containers!();
}

/// A non-empty string, borrowed from the text when serde_json can.
struct TextSeed<'l> {
    nodes: NodeSeed<'l>,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = Result<Cow<'de, str>, Node<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = Result<Cow<'de, str>, Node<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(non_empty(Cow::Borrowed(v)))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(non_empty(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(non_empty(Cow::Owned(v)))
    }
    otherwise_node! {
        visit_unit(); visit_none(); visit_bool(v: bool); visit_u64(v: u64); visit_i64(v: i64);
        visit_f64(v: f64);
    }
    otherwise_node_containers!();
}

fn non_empty(s: Cow<'_, str>) -> Result<Cow<'_, str>, Node<'_>> {
    if s.is_empty() {
        Err(Node::String(s))
    } else {
        Ok(s)
    }
}

/// One member's value, read as its name's type.
struct ValueSeed<'r, 'a> {
    reader: &'r mut Reader<'a>,
    expect: Expect,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Result<Value<'de>, Node<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        let nodes = self.reader.nodes;
        let integer = |min| IntegerSeed { nodes, min };
        Ok(match self.expect {
            Expect::Integer => integer(0).deserialize(de)?.map(Value::Integer),
            Expect::Rate => integer(1).deserialize(de)?.map(Value::Integer),
            Expect::Text => TextSeed { nodes }.deserialize(de)?.map(Value::Text),
            Expect::Segments | Expect::Texts | Expect::Entries => {
                de.deserialize_any(ListVisitor {
                    reader: self.reader,
                    expect: self.expect,
                })?
            }
        })
    }
}

/// A typed list: `Segments`, `Texts` or `Entries`.
struct ListVisitor<'r, 'a> {
    reader: &'r mut Reader<'a>,
    expect: Expect,
}

impl<'de> Visitor<'de> for ListVisitor<'_, '_> {
    type Value = Result<Value<'de>, Node<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    otherwise_node! {
        visit_unit(); visit_none(); visit_bool(v: bool); visit_u64(v: u64); visit_i64(v: i64);
        visit_f64(v: f64); visit_borrowed_str(v: &'de str); visit_str(v: &str);
        visit_string(v: String);
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.reader.nodes.visit_map(map).map(Err)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let reader = self.reader;
        match self.expect {
            Expect::Segments => typed_list(
                seq,
                reader,
                next_record::<AsSegment, A>,
                Value::Segments,
                segment_node,
            ),
            Expect::Entries => typed_list(
                seq,
                reader,
                next_record::<AsEntry, A>,
                Value::Entries,
                entry_node,
            ),
            _ => typed_list(seq, reader, next_text, Value::Texts, |s| text_node(&s)),
        }
    }
}

/// How a typed list reads its next item: `None` at the list's end, else the item typed
/// or as its node.
type NextItem<'de, A, T> = fn(
    &mut A,
    &mut Reader<'_>,
)
    -> Result<Option<Result<T, Node<'de>>>, <A as SeqAccess<'de>>::Error>;

fn next_record<'de, K: Kind, A: SeqAccess<'de>>(
    seq: &mut A,
    reader: &mut Reader<'_>,
) -> Result<Option<Result<K::Typed, Node<'de>>>, A::Error> {
    seq.next_element_seed(RecordSeed::<K> {
        reader,
        kind: PhantomData,
    })
}

fn next_text<'de, A: SeqAccess<'de>>(
    seq: &mut A,
    reader: &mut Reader<'_>,
) -> Result<Option<Result<Arc<str>, Node<'de>>>, A::Error> {
    let text = seq.next_element_seed(TextSeed {
        nodes: reader.nodes,
    })?;
    Ok(text.map(|text| text.map(|s| reader.strings.share(&s))))
}

/// Reads a list item by item, typed while every item is; from the first that is not,
/// the list is a node: the items before it turned back into nodes, the rest read as
/// nodes.
fn typed_list<'de, A: SeqAccess<'de>, T>(
    mut seq: A,
    reader: &mut Reader<'_>,
    next: NextItem<'de, A, T>,
    wrap: fn(Vec<T>) -> Value<'de>,
    to_node: fn(T) -> Node<'de>,
) -> Result<Result<Value<'de>, Node<'de>>, A::Error> {
    let mut typed = Vec::new();
    loop {
        match next(&mut seq, reader)? {
            None => {
                // A list's length is only known at its end: give back what growing
                // it left over, so a trace holds no more than its items.
                typed.shrink_to_fit();
                return Ok(Ok(wrap(typed)));
            }
            Some(Ok(item)) => typed.push(item),
            Some(Err(node)) => {
                let mut nodes: Vec<Node<'de>> = typed.into_iter().map(to_node).collect();
                nodes.push(node);
                while let Some(node) = seq.next_element_seed(reader.node())? {
                    nodes.push(node);
                }
                return Ok(Err(Node::Array(nodes)));
            }
        }
    }
}

/// A member name, as a [`Key`].
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Key, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(match Field::of(v) {
            Some(field) => Key::Field(field),
            None => Key::Other(json::member_name(v)),
        })
    }
}

/// One object of kind `K`: typed when regular, else its node.
struct RecordSeed<'r, 'a, K> {
    reader: &'r mut Reader<'a>,
    kind: PhantomData<K>,
}

impl<'de, K: Kind> DeserializeSeed<'de> for RecordSeed<'_, '_, K> {
    type Value = Result<K::Typed, Node<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, K: Kind> Visitor<'de> for RecordSeed<'_, '_, K> {
    type Value = Result<K::Typed, Node<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    otherwise_node! {
        visit_unit(); visit_none(); visit_bool(v: bool); visit_u64(v: u64); visit_i64(v: i64);
        visit_f64(v: f64); visit_borrowed_str(v: &'de str); visit_str(v: &str);
        visit_string(v: String);
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.reader.nodes.visit_seq(seq).map(Err)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        K::read_map(self.reader, map)
    }
}

/// [`Kind::read_map`] by default: any members into a [`Record`], typed while they are
/// regular, then built.
fn read_record<'de, K: Kind, A: MapAccess<'de>>(
    reader: &mut Reader<'_>,
    mut map: A,
) -> Result<Result<K::Typed, Node<'de>>, A::Error> {
    let mut record = Record::default();
    while let Some(key) = map.next_key_seed(KeySeed)? {
        let field = match key {
            Key::Field(field) if record.seen & field.bit() == 0 => field,
            // Unknown or repeated: the object is a node from here on.
            key => {
                let value = map.next_value_seed(reader.nodes)?;
                return rest_as_node(map, record, (key.into_name(), value), reader.nodes).map(Err);
            }
        };
        let value = map.next_value_seed(ValueSeed {
            reader: &mut *reader,
            expect: field.expect(),
        })?;
        match value {
            Ok(value) => {
                record.members.push((field, value));
                record.seen |= field.bit();
            }
            Err(node) => {
                let member = (Cow::Borrowed(field.name()), node);
                return rest_as_node(map, record, member, reader.nodes).map(Err);
            }
        }
    }
    Ok(K::build(&mut record, reader.strings).ok_or_else(|| Node::Object(record.into_members())))
}

/// The object whose typed members so far are `record`, then `member`, and the rest
/// of `map` read as nodes.
fn rest_as_node<'de, A: MapAccess<'de>>(
    mut map: A,
    record: Record<'de>,
    member: (MemberName, Node<'de>),
    nodes: NodeSeed<'_>,
) -> Result<Node<'de>, A::Error> {
    let mut members = record.into_members();
    members.push(member);
    while let Some(key) = map.next_key_seed(KeySeed)? {
        let value = map.next_value_seed(nodes)?;
        members.push((key.into_name(), value));
    }
    Ok(Node::Object(members))
}

impl Walk {
    /// Reads one element of kind `K` at `path`: typed when regular, else checked as a
    /// node by `check`, the shape walk's reading of that element.
    fn typed_or_checked<'de, K: Kind, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
        check: fn(&mut Walk, &Path, &Node<'_>) -> Option<K::Typed>,
    ) -> Result<Option<K::Typed>, D::Error> {
        let mut reader = Reader {
            nodes,
            strings: &mut self.strings,
        };
        let read = RecordSeed::<K> {
            reader: &mut reader,
            kind: PhantomData,
        }
        .deserialize(de)?;
        Ok(match read {
            Ok(typed) => Some(typed),
            Err(node) => check(self, path, &node),
        })
    }
}

impl document::Check for Walk {
    fn expected_array(&mut self, path: &Path, node: &Node<'_>) {
        self.array(path, node);
    }

    fn grant<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Grant>, D::Error> {
        self.typed_or_checked::<AsGrant, D>(de, path, nodes, Walk::grant)
    }

    fn worker<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<WorkerSpec>, D::Error> {
        self.typed_or_checked::<AsWorker, D>(de, path, nodes, Walk::worker)
    }

    fn event<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Event>, D::Error> {
        self.typed_or_checked::<AsEvent, D>(de, path, nodes, Walk::event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_name_the_contracts_members() {
        for (fields, names) in [
            (tables::SEGMENT, members::SEGMENT),
            (tables::CACHE_ENTRY, members::CACHE_ENTRY),
            (tables::GRANT, members::GRANT),
            (tables::WORKER, members::WORKER),
            (tables::CACHE_STORE, members::CACHE_STORE),
            (tables::CACHE_EVICT, members::CACHE_EVICT),
            (tables::CACHE_CLEAR, members::CACHE_CLEAR),
            (tables::LOAD, members::LOAD),
            (tables::REQUEST, members::REQUEST),
        ] {
            let read: Vec<&str> = fields.iter().map(|f| f.name()).collect();
            assert_eq!(read, names);
            for name in names {
                assert_eq!(Field::of(name).map(Field::name), Some(*name));
            }
        }
    }
}
