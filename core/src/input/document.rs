//! The trace document read in one pass without a tree of it (SPEC.md §2.3, stages 1–2).
//!
//! A trace is mostly its `events` array (and, for a large fleet, `workers`), so a tree
//! of the whole document cost about 40 bytes of memory per byte of text. Here serde
//! visits the top-level object member by member: `format`, `limits` and `policy` are
//! small and kept as [`Node`]s; each element of `sharing`, `workers` and `events` is
//! handed to validation's [`Check`], which reads it straight into its typed form when
//! it is regular and as a `Node` to shape-check at its path when not; unknown and
//! repeated members are parsed (the document must still be JSON) and only their names
//! kept. Shape errors are collected per top-level member and put in the order the
//! tree walk reported them in (`format`, `limits`, `policy`, `sharing`, `workers`,
//! `events`, then unknown and repeated members) whatever order the document has.

use crate::input::compact::EventStore;
use crate::input::json::{self, MemberName, NodeOf as Node, NodeSeed};
use crate::input::trace::{Event, Grant, WorkerSpec};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// A JSON path (SPEC.md §2.1), built as a chain of borrowed steps and only written out
/// when an error is reported: formatting the path of every member of every event, as
/// validation once did, was a third of its time on a valid trace.
#[derive(Clone, Copy, Debug)]
pub enum Path<'a> {
    /// `$`, the document.
    Root,
    /// Member `name` of the object at the parent path.
    Member(&'a Path<'a>, &'a str),
    /// Element `i` of the array at the parent path.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub fn member(&'a self, name: &'a str) -> Path<'a> {
        Path::Member(self, name)
    }

    pub fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Path::Root => f.write_str("$"),
            Path::Member(parent, name) => {
                let plain = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                if !plain {
                    write!(
                        f,
                        "{parent}[{}]",
                        serde_json::Value::String(name.to_owned())
                    )
                } else if matches!(parent, Path::Root) {
                    f.write_str(name)
                } else {
                    write!(f, "{parent}.{name}")
                }
            }
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

/// What reads and checks the elements of the streamed arrays (validation's walk).
pub(super) trait Check: Default {
    /// Reports that the array at `path` is `node`, which is not an array.
    fn expected_array(&mut self, path: &Path, node: &Node<'_>);
    /// Reads the element at `path` from `de`: its typed form, or `None` once its shape
    /// errors are reported.
    fn grant<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Grant>, D::Error>;
    fn worker<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<WorkerSpec>, D::Error>;
    fn event<'de, D: Deserializer<'de>>(
        &mut self,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Event>, D::Error>;
}

/// The typed form of one streamed array's elements, and which [`Check`] method reads one.
pub(super) trait Element: Sized {
    fn read<'de, D: Deserializer<'de>, W: Check>(
        walk: &mut W,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Self>, D::Error>;
}

impl Element for Grant {
    fn read<'de, D: Deserializer<'de>, W: Check>(
        walk: &mut W,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Self>, D::Error> {
        walk.grant(de, path, nodes)
    }
}

impl Element for WorkerSpec {
    fn read<'de, D: Deserializer<'de>, W: Check>(
        walk: &mut W,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Self>, D::Error> {
        walk.worker(de, path, nodes)
    }
}

impl Element for Event {
    fn read<'de, D: Deserializer<'de>, W: Check>(
        walk: &mut W,
        de: D,
        path: &Path,
        nodes: NodeSeed<'_>,
    ) -> Result<Option<Self>, D::Error> {
        walk.event(de, path, nodes)
    }
}

/// Where a streamed array's items are kept: a `Vec`, or for events an [`EventStore`].
pub(super) trait Items<T>: Default {
    fn push_item(&mut self, item: T);
}

impl<T> Items<T> for Vec<T> {
    fn push_item(&mut self, item: T) {
        self.push(item);
    }
}

impl Items<Event> for EventStore {
    fn push_item(&mut self, item: Event) {
        self.push(item);
    }
}

/// One streamed top-level array: its items when every one was valid, and its errors.
pub(super) struct Listed<C, W> {
    pub items: Option<C>,
    pub walk: W,
}

/// The top-level object as read: its members in document order, the three streamed
/// arrays (first occurrence only) standing as `null` among them.
pub(super) struct Document<'s, W, E> {
    pub members: Vec<(MemberName, Node<'s>)>,
    pub sharing: Option<Listed<Vec<Grant>, W>>,
    pub workers: Option<Listed<Vec<WorkerSpec>, W>>,
    pub events: Option<Listed<E, W>>,
}

/// What the document turned out to be.
pub(super) enum Read<'s, W, E> {
    Object(Document<'s, W, E>),
    /// Not an object: the value, for the error to quote.
    Other(Node<'s>),
}

/// Reads one trace document from `de` (the caller checks the end of input).
pub(super) fn read<'de, D: Deserializer<'de>, W: Check, E: Items<Event>>(
    de: D,
    nodes: NodeSeed<'_>,
) -> Result<Read<'de, W, E>, D::Error> {
    de.deserialize_any(DocumentVisitor {
        nodes,
        walk: PhantomData,
    })
}

struct DocumentVisitor<'a, W, E> {
    nodes: NodeSeed<'a>,
    walk: PhantomData<(W, E)>,
}

impl<W, E> DocumentVisitor<'_, W, E> {
    fn node(&self) -> NodeSeed<'_> {
        self.nodes
    }
}

/// Every visit but `visit_map` builds the value, for the error to quote.
macro_rules! other_values {
    ($value:ty, $wrap:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<$value, E> {
            self.node().visit_unit().map($wrap)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<$value, E> {
            self.node().visit_none().map($wrap)
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<$value, E> {
            self.node().visit_bool(v).map($wrap)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<$value, E> {
            self.node().visit_u64(v).map($wrap)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<$value, E> {
            self.node().visit_i64(v).map($wrap)
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<$value, E> {
            self.node().visit_f64(v).map($wrap)
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$value, E> {
            self.node().visit_str(v).map($wrap)
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<$value, E> {
            self.node().visit_string(v).map($wrap)
        }
    };
}

impl<'de, W: Check, Es: Items<Event>> Visitor<'de> for DocumentVisitor<'_, W, Es> {
    type Value = Read<'de, W, Es>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace document")
    }

    other_values!(Read<'de, W, Es>, Read::Other);

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Read<'de, W, Es>, A::Error> {
        self.node().visit_seq(seq).map(Read::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read<'de, W, Es>, A::Error> {
        let mut document = Document {
            members: Vec::new(),
            sharing: None,
            workers: None,
            events: None,
        };
        while let Some(name) = map.next_key::<String>()? {
            let first = !document.members.iter().any(|(seen, _)| *seen == name);
            let value = match name.as_str() {
                "sharing" if first => {
                    document.sharing = Some(map.next_value_seed(self.list::<Grant, _>("sharing"))?);
                    Node::Null
                }
                "workers" if first => {
                    document.workers =
                        Some(map.next_value_seed(self.list::<WorkerSpec, _>("workers"))?);
                    Node::Null
                }
                "events" if first => {
                    document.events = Some(map.next_value_seed(self.list::<Event, Es>("events"))?);
                    Node::Null
                }
                "format" | "limits" | "policy" if first => map.next_value_seed(self.node())?,
                // Unknown or repeated: only its name is reported, its value never read.
                _ => {
                    map.next_value_seed(Discard {
                        literals: self.nodes.literals,
                    })?;
                    Node::Null
                }
            };
            document.members.push((name.into(), value));
        }
        Ok(Read::Object(document))
    }
}

impl<'a, W, E> DocumentVisitor<'a, W, E> {
    fn list<T, C>(&self, name: &'static str) -> ListSeed<'a, T, C, W> {
        ListSeed {
            nodes: self.nodes,
            name,
            read: PhantomData,
        }
    }
}

/// One top-level array, element by element.
struct ListSeed<'a, T, C, W> {
    nodes: NodeSeed<'a>,
    name: &'static str,
    read: PhantomData<(T, C, W)>,
}

impl<T, C, W: Check> ListSeed<'_, T, C, W> {
    fn node(&self) -> NodeSeed<'_> {
        self.nodes
    }

    /// Not an array: the error the tree walk reported.
    fn not_array(&self, node: Node<'_>) -> Listed<C, W> {
        let mut walk = W::default();
        let root = Path::Root;
        walk.expected_array(&root.member(self.name), &node);
        Listed { items: None, walk }
    }
}

impl<'de, T: Element, C: Items<T>, W: Check> DeserializeSeed<'de> for ListSeed<'_, T, C, W> {
    type Value = Listed<C, W>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, T: Element, C: Items<T>, W: Check> Visitor<'de> for ListSeed<'_, T, C, W> {
    type Value = Listed<C, W>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.not_array(Node::Null))
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.not_array(Node::Null))
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(self.not_array(Node::Bool(v)))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        let node = self.node().visit_u64(v)?;
        Ok(self.not_array(node))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        let node = self.node().visit_i64(v)?;
        Ok(self.not_array(node))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        let node = self.node().visit_f64(v)?;
        Ok(self.not_array(node))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(self.not_array(Node::String(v.into())))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(self.not_array(Node::String(v.into())))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let node = self.node().visit_map(map)?;
        Ok(self.not_array(node))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut walk = W::default();
        let root = Path::Root;
        let path = root.member(self.name);
        let mut items = Some(C::default());
        let mut i = 0;
        while let Some(item) = seq.next_element_seed(ElementSeed {
            walk: &mut walk,
            path: &path.index(i),
            nodes: self.nodes,
            element: PhantomData,
        })? {
            match item {
                Some(item) => {
                    if let Some(items) = &mut items {
                        items.push_item(item);
                    }
                }
                // The list is rejected whole: stop holding the items before it.
                None => items = None,
            }
            i += 1;
        }
        Ok(Listed { items, walk })
    }
}

/// One element of a streamed array, read by its [`Element`] method.
struct ElementSeed<'a, T, W> {
    walk: &'a mut W,
    path: &'a Path<'a>,
    nodes: NodeSeed<'a>,
    element: PhantomData<T>,
}

impl<'de, T: Element, W: Check> DeserializeSeed<'de> for ElementSeed<'_, T, W> {
    type Value = Option<T>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<T>, D::Error> {
        T::read(self.walk, deserializer, self.path, self.nodes)
    }
}

/// Parses a value and keeps nothing of it, taking its literals off the queue so the
/// ones after it stay aligned.
#[derive(Clone, Copy)]
struct Discard<'a> {
    literals: &'a json::Literals,
}

impl<'de> DeserializeSeed<'de> for Discard<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Discard<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    // Only a masked literal, visited as `-0.0`, has a text queued (see `NodeSeed`).
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        if json::is_mask_marker(v) {
            self.literals.borrow_mut().pop_front();
        }
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}
