//! Stage 2: the shape of the document (SPEC.md §2.3): types, required, unknown and
//! repeated members, value ranges, read into the trace model as the document streams
//! by, with every repeated string shared. A regular element of the streamed arrays is
//! typed by [`super::typed`] without a node; every other one is walked here, which is
//! where every shape error comes from.

use super::errors::ValidationErrors;
use crate::input::document::{self, Path};
use crate::input::json::{quote_str, MemberName, NodeOf as Node};
use crate::input::trace::members;
use crate::input::trace::*;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;

/// The members of one JSON object, for checking required, unknown and repeated names.
pub(super) struct Members<'p, 'n, 'd> {
    path: Path<'p>,
    members: &'n [(MemberName, Node<'d>)],
}

impl<'p, 'n, 'd> Members<'p, 'n, 'd> {
    /// A field read: `name` must be listed in a member table, or the shape check would
    /// call the member unknown.
    fn get(&self, name: &str) -> Option<&'n Node<'d>> {
        debug_assert!(
            members::known_member_name(name).is_some(),
            "{name} is in no member table of crate::input::trace::members"
        );
        self.members.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    fn required<'s>(&'s self, walk: &mut Walk, name: &'s str) -> Option<(Path<'s>, &'n Node<'d>)> {
        match self.get(name) {
            Some(node) => Some((self.path.member(name), node)),
            None => {
                walk.err(
                    &self.path.member(name),
                    format_args!("missing required member {}", quote_str(name)),
                );
                None
            }
        }
    }

    fn optional<'s>(&'s self, name: &'s str) -> Option<(Path<'s>, &'n Node<'d>)> {
        self.get(name).map(|node| (self.path.member(name), node))
    }

    /// Reports unknown and repeated members, in document order. `expected` has at most
    /// 64 names (an event has 10), so the names seen so far are one bit each.
    fn finish(&self, walk: &mut Walk, expected: &[&str]) {
        let mut seen = 0u64;
        for (name, _) in self.members {
            match expected.iter().position(|e| e == name) {
                None => walk.err(
                    &self.path.member(name),
                    format_args!("unknown member {}", quote_str(name)),
                ),
                Some(at) if seen & (1 << at) != 0 => walk.err(
                    &self.path.member(name),
                    format_args!("repeated member {}", quote_str(name)),
                ),
                Some(at) => seen |= 1 << at,
            }
        }
    }
}

#[derive(Default)]
pub(crate) struct Walk {
    pub(super) errors: ValidationErrors,
    pub(super) strings: SharedStrings,
}

/// The strings handed out so far, one shared copy each: a trace repeats a few names
/// and keys millions of times, and each repeat then costs a pointer, not a `String`.
/// Each streamed array is read by its own `Walk`, so a name used in both
/// `workers` and `events` is kept twice at most. Looked up by text, and by position
/// only in the order strings were first seen, so no hash order can reach a trace or
/// an error.
///
/// A probe of the hash map costs about three cache misses on a large trace (its
/// control bytes, its slot, the shared string), and a trace names its prefix keys in
/// runs that repeat: a store or evict lists the keys of a request's prefix in the
/// order the request did. So the string first seen right after the last one shared
/// is tried before the map; it sits next to it in `order` and, allocated just after
/// it, in memory.
///
/// The map holds positions in `order` hashed by the string at them, so a new string is
/// hashed once and shared by `order` alone, not by the map too.
#[derive(Default)]
pub(super) struct SharedStrings {
    /// Every string shared so far, in the order first seen.
    order: Vec<Arc<str>>,
    /// Each string's position in `order`, hashed by the string.
    position: HashTable<usize>,
    /// The position of the string shared last.
    last: usize,
}

impl SharedStrings {
    pub(super) fn share(&mut self, s: &str) -> Arc<str> {
        let next = self.last + 1;
        if let Some(shared) = self.order.get(next).filter(|shared| ***shared == *s) {
            self.last = next;
            return Arc::clone(shared);
        }
        let hash = FxBuildHasher.hash_one(s);
        let order = &self.order;
        if let Some(&at) = self.position.find(hash, |&at| *order[at] == *s) {
            self.last = at;
            return Arc::clone(&self.order[at]);
        }
        let shared: Arc<str> = Arc::from(s);
        self.last = self.order.len();
        self.position
            .insert_unique(hash, self.last, |&at| FxBuildHasher.hash_one(&*order[at]));
        self.order.push(Arc::clone(&shared));
        shared
    }
}

impl Walk {
    fn err(&mut self, path: &Path, reason: impl fmt::Display) {
        self.errors.push_with(|| (path.to_string(), reason));
    }

    pub(super) fn object<'p, 'n, 'd>(
        &mut self,
        path: &Path<'p>,
        node: &'n Node<'d>,
    ) -> Option<Members<'p, 'n, 'd>> {
        match node {
            Node::Object(members) => Some(Members {
                path: *path,
                members,
            }),
            other => {
                self.err(
                    path,
                    format!("expected an object, found {}", other.quoted()),
                );
                None
            }
        }
    }

    pub(super) fn array<'n, 'd>(
        &mut self,
        path: &Path,
        node: &'n Node<'d>,
    ) -> Option<&'n [Node<'d>]> {
        match node {
            Node::Array(items) => Some(items),
            other => {
                self.err(path, format!("expected an array, found {}", other.quoted()));
                None
            }
        }
    }

    fn integer(&mut self, path: &Path, node: &Node) -> Option<u64> {
        if let Some(v) = node.integer() {
            return Some(v);
        }
        self.err(
            path,
            format!("expected a non-negative integer, found {}", node.quoted()),
        );
        None
    }

    fn nullable_integer(&mut self, path: &Path, node: &Node) -> Option<Option<u64>> {
        match node {
            Node::Null => return Some(None),
            node => {
                if let Some(v) = node.integer() {
                    return Some(Some(v));
                }
            }
        }
        self.err(
            path,
            format!(
                "expected a non-negative integer or null, found {}",
                node.quoted()
            ),
        );
        None
    }

    /// `policy.dynamo_block_tokens`: a block of zero tokens has no meaning, so unlike
    /// the other nullable members it must be at least 1 (SPEC.md §2.2: one reason for
    /// `0` and for every other wrong value).
    fn block_tokens(&mut self, path: &Path, node: &Node) -> Option<Option<u64>> {
        match node {
            Node::Null => return Some(None),
            node => {
                if let Some(v) = node.integer().filter(|&v| v >= 1) {
                    return Some(Some(v));
                }
            }
        }
        self.err(
            path,
            format!(
                "expected a positive integer or null, found {}",
                node.quoted()
            ),
        );
        None
    }

    fn rate(&mut self, path: &Path, node: &Node) -> Option<u64> {
        match self.integer(path, node)? {
            0 => {
                self.err(path, "expected a positive integer, found 0");
                None
            }
            v => Some(v),
        }
    }

    /// A non-empty string, shared with every earlier occurrence of the same text.
    fn string(&mut self, path: &Path, node: &Node) -> Option<Arc<str>> {
        let text = self.text(path, node)?;
        Some(self.strings.share(text))
    }

    /// A non-empty string that is unique in a valid trace (a request id): not worth
    /// remembering, so it gets its own copy.
    fn unique_string(&mut self, path: &Path, node: &Node) -> Option<Arc<str>> {
        self.text(path, node).map(Arc::from)
    }

    fn text<'n>(&mut self, path: &Path, node: &'n Node<'_>) -> Option<&'n str> {
        match node {
            Node::String(s) if !s.is_empty() => Some(s),
            other => {
                self.err(
                    path,
                    format!("expected a non-empty string, found {}", other.quoted()),
                );
                None
            }
        }
    }

    fn req_integer(&mut self, obj: &Members, name: &str) -> Option<u64> {
        let (path, node) = obj.required(self, name)?;
        self.integer(&path, node)
    }

    fn req_rate(&mut self, obj: &Members, name: &str) -> Option<u64> {
        let (path, node) = obj.required(self, name)?;
        self.rate(&path, node)
    }

    fn req_string(&mut self, obj: &Members, name: &str) -> Option<Arc<str>> {
        let (path, node) = obj.required(self, name)?;
        self.string(&path, node)
    }

    fn string_list(&mut self, path: &Path, node: &Node) -> Option<Vec<Arc<str>>> {
        let items = self.array(path, node)?;
        let parsed: Vec<Option<Arc<str>>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| self.string(&path.index(i), item))
            .collect();
        parsed.into_iter().collect()
    }

    fn req_string_list(&mut self, obj: &Members, name: &str) -> Option<Vec<Arc<str>>> {
        let (path, node) = obj.required(self, name)?;
        self.string_list(&path, node)
    }

    /// A list whose items each parse with `item`; `None` if any item failed.
    fn list<T>(
        &mut self,
        path: &Path,
        node: &Node,
        mut item: impl FnMut(&mut Self, &Path, &Node) -> Option<T>,
    ) -> Option<Vec<T>> {
        let items = self.array(path, node)?;
        let mut parsed = Vec::with_capacity(items.len());
        let mut all_ok = true;
        for (i, node) in items.iter().enumerate() {
            match item(self, &path.index(i), node) {
                Some(v) => parsed.push(v),
                None => all_ok = false,
            }
        }
        all_ok.then_some(parsed)
    }

    fn namespace(&mut self, obj: &Members) -> Option<Namespace> {
        let tenant = self.req_string(obj, "tenant");
        let model = self.req_string(obj, "model");
        let adapter = self.req_string(obj, "adapter");
        Some(Namespace {
            tenant: tenant?,
            model: model?,
            adapter: adapter?,
        })
    }

    /// The top-level object, read by [`document::read`]: the small members are here as
    /// nodes, the three arrays were checked element by element as they streamed by, and
    /// their errors are put where the walk of a whole tree reported them. The trace's
    /// `events` are left empty: they are returned beside it, as they were kept.
    pub(super) fn trace<E>(&mut self, doc: document::Document<'_, Walk, E>) -> Option<(Trace, E)> {
        let obj = Members {
            path: Path::Root,
            members: &doc.members,
        };
        let format_ok = match obj.required(self, "format") {
            Some((path, node)) => {
                if matches!(node, Node::String(s) if s == "kvroute-trace/1") {
                    true
                } else {
                    self.err(
                        &path,
                        format!("expected \"kvroute-trace/1\", found {}", node.quoted()),
                    );
                    false
                }
            }
            None => false,
        };
        let limits = match obj.optional("limits") {
            None => Some(LimitsProfile::Lab),
            Some((_, Node::String(s))) if s == "lab" => Some(LimitsProfile::Lab),
            Some((_, Node::String(s))) if s == "scale" => Some(LimitsProfile::Scale),
            Some((path, node)) => {
                self.err(
                    &path,
                    format!("expected \"lab\" or \"scale\", found {}", node.quoted()),
                );
                None
            }
        };
        let policy = match obj.optional("policy") {
            None => Some(PolicyParams::default()),
            Some((path, node)) => self.policy(&path, node),
        };
        let sharing = match doc.sharing {
            None => Some(Vec::new()),
            Some(listed) => self.listed(listed),
        };
        let workers = obj
            .required(self, "workers")
            .and(doc.workers)
            .and_then(|listed| self.listed(listed));
        let events = obj
            .required(self, "events")
            .and(doc.events)
            .and_then(|listed| self.listed(listed));
        obj.finish(self, members::TRACE);
        if !format_ok {
            return None;
        }
        let trace = Trace {
            limits: limits?,
            policy: policy?,
            sharing: sharing?,
            workers: workers?,
            events: Vec::new(),
        };
        Some((trace, events?))
    }

    /// A streamed array's items, its errors reported here, in their place.
    fn listed<C>(&mut self, listed: document::Listed<C, Walk>) -> Option<C> {
        self.errors.append(listed.walk.errors);
        listed.items
    }

    fn policy(&mut self, path: &Path, node: &Node) -> Option<PolicyParams> {
        let obj = self.object(path, node)?;
        let defaults = PolicyParams::default();
        let decode_weight_milli = match obj.optional("decode_weight_milli") {
            None => Some(defaults.decode_weight_milli),
            Some((path, node)) => self.integer(&path, node),
        };
        let imbalance_penalty_milli = match obj.optional("imbalance_penalty_milli") {
            None => Some(defaults.imbalance_penalty_milli),
            Some((path, node)) => self.integer(&path, node),
        };
        let freshness_ticks = match obj.optional("freshness_ticks") {
            None => Some(None),
            Some((path, node)) => self.nullable_integer(&path, node),
        };
        let max_queued_work = match obj.optional("max_queued_work") {
            None => Some(None),
            Some((path, node)) => self.nullable_integer(&path, node),
        };
        let stale_rule = match obj.optional("stale_rule") {
            None => Some(defaults.stale_rule),
            Some((path, node)) => self.named_choice(&path, node, StaleRule::ALL, StaleRule::name),
        };
        let epochs = match obj.optional("epochs") {
            None => Some(defaults.epochs),
            Some((path, node)) => self.named_choice(&path, node, EpochsMode::ALL, EpochsMode::name),
        };
        let cold_reserve_milli = match obj.optional("cold_reserve_milli") {
            None => Some(None),
            Some((path, node)) => self.nullable_integer(&path, node),
        };
        let dynamo_block_tokens = match obj.optional("dynamo_block_tokens") {
            None => Some(None),
            Some((path, node)) => self.block_tokens(&path, node),
        };
        obj.finish(self, members::POLICY);
        Some(PolicyParams {
            decode_weight_milli: decode_weight_milli?,
            imbalance_penalty_milli: imbalance_penalty_milli?,
            freshness_ticks: freshness_ticks?,
            max_queued_work: max_queued_work?,
            stale_rule: stale_rule?,
            epochs: epochs?,
            cold_reserve_milli: cold_reserve_milli?,
            dynamo_block_tokens: dynamo_block_tokens?,
        })
    }

    /// One of a fixed set of strings (SPEC.md §1.1, "Named choices"); anything else,
    /// whatever its JSON type, is reported with the list of allowed spellings.
    /// One of `choices`, by its name; the error lists the names as `"a", "b" or "c"`,
    /// so each name is spelled once, by its type.
    fn named_choice<T: Copy, const N: usize>(
        &mut self,
        path: &Path,
        node: &Node,
        choices: [T; N],
        name: impl Fn(T) -> &'static str,
    ) -> Option<T> {
        if let Node::String(s) = node {
            if let Some(value) = choices.into_iter().find(|&c| name(c) == &**s) {
                return Some(value);
            }
        }
        let quoted: Vec<String> = choices
            .iter()
            .map(|&c| format!("\"{}\"", name(c)))
            .collect();
        let allowed = match quoted.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        self.err(path, format!("expected {allowed}, found {}", node.quoted()));
        None
    }

    pub(super) fn grant(&mut self, path: &Path, node: &Node) -> Option<Grant> {
        let obj = self.object(path, node)?;
        let model = self.req_string(&obj, "model");
        let adapter = self.req_string(&obj, "adapter");
        let tenants = self.req_string_list(&obj, "tenants");
        obj.finish(self, members::GRANT);
        Some(Grant {
            model: model?,
            adapter: adapter?,
            tenants: tenants?,
        })
    }

    pub(super) fn worker(&mut self, path: &Path, node: &Node) -> Option<WorkerSpec> {
        let obj = self.object(path, node)?;
        let id = self.req_string(&obj, "id");
        let model = self.req_string(&obj, "model");
        let adapters = self.req_string_list(&obj, "adapters");
        let prefill_rate = self.req_rate(&obj, "prefill_rate");
        let decode_rate = self.req_rate(&obj, "decode_rate");
        let queued_prefill = self.req_integer(&obj, "queued_prefill");
        let active_decode = self.req_integer(&obj, "active_decode");
        let observed_tick = self.req_integer(&obj, "observed_tick");
        let epoch = self.req_integer(&obj, "epoch");
        let cache = obj
            .required(self, "cache")
            .and_then(|(path, node)| self.list(&path, node, Walk::cache_entry));
        obj.finish(self, members::WORKER);
        Some(WorkerSpec {
            id: id?,
            model: model?,
            adapters: adapters?,
            prefill_rate: prefill_rate?,
            decode_rate: decode_rate?,
            queued_prefill: queued_prefill?,
            active_decode: active_decode?,
            observed_tick: observed_tick?,
            epoch: epoch?,
            cache: cache?,
        })
    }

    fn cache_entry(&mut self, path: &Path, node: &Node) -> Option<CacheEntry> {
        let obj = self.object(path, node)?;
        let namespace = self.namespace(&obj);
        let key = self.req_string(&obj, "key");
        let tokens = self.req_integer(&obj, "tokens");
        obj.finish(self, members::CACHE_ENTRY);
        Some(CacheEntry {
            namespace: namespace?,
            key: key?,
            tokens: tokens?,
        })
    }

    fn segment(&mut self, path: &Path, node: &Node) -> Option<Segment> {
        let obj = self.object(path, node)?;
        let key = self.req_string(&obj, "key");
        let tokens = self.req_integer(&obj, "tokens");
        obj.finish(self, members::SEGMENT);
        Some(Segment {
            key: key?,
            tokens: tokens?,
        })
    }

    pub(super) fn event(&mut self, path: &Path, node: &Node) -> Option<Event> {
        let obj = self.object(path, node)?;
        let seq = self.req_integer(&obj, "seq");
        let tick = self.req_integer(&obj, "tick");
        let (type_path, type_node) = obj.required(self, "type")?;
        let kind = match type_node {
            Node::String(s) if s == "cache" => self.cache_event(&obj),
            Node::String(s) if s == "load" => self.load_event(&obj),
            Node::String(s) if s == "request" => self.request_event(&obj),
            other => {
                self.err(
                    &type_path,
                    format!(
                        "expected \"cache\", \"load\" or \"request\", found {}",
                        other.quoted()
                    ),
                );
                return None;
            }
        };
        Some(Event {
            seq: seq?,
            tick: tick?,
            kind: kind?,
        })
    }

    fn cache_event(&mut self, obj: &Members) -> Option<EventKind> {
        let (op_path, op_node) = obj.required(self, "op")?;
        let op_name = match op_node {
            Node::String(s) if s == "store" || s == "evict" || s == "clear" => &**s,
            other => {
                self.err(
                    &op_path,
                    format!(
                        "expected \"store\", \"evict\" or \"clear\", found {}",
                        other.quoted()
                    ),
                );
                return None;
            }
        };
        let worker = self.req_string(obj, "worker");
        let epoch = self.req_integer(obj, "epoch");
        let op = match op_name {
            "store" => {
                let namespace = self.namespace(obj);
                let segments = obj
                    .required(self, "segments")
                    .and_then(|(path, node)| self.list(&path, node, Walk::segment));
                obj.finish(self, members::CACHE_STORE);
                Some(CacheOp::Store {
                    namespace: namespace?,
                    segments: segments?,
                })
            }
            "evict" => {
                let namespace = self.namespace(obj);
                let keys = self.req_string_list(obj, "keys");
                obj.finish(self, members::CACHE_EVICT);
                Some(CacheOp::Evict {
                    namespace: namespace?,
                    keys: keys?,
                })
            }
            _ => {
                obj.finish(self, members::CACHE_CLEAR);
                Some(CacheOp::Clear)
            }
        };
        Some(EventKind::Cache {
            worker: worker?,
            epoch: epoch?,
            op: op?,
        })
    }

    fn load_event(&mut self, obj: &Members) -> Option<EventKind> {
        let worker = self.req_string(obj, "worker");
        let observed_tick = self.req_integer(obj, "observed_tick");
        let queued_prefill = self.req_integer(obj, "queued_prefill");
        let active_decode = self.req_integer(obj, "active_decode");
        obj.finish(self, members::LOAD);
        Some(EventKind::Load {
            worker: worker?,
            observed_tick: observed_tick?,
            queued_prefill: queued_prefill?,
            active_decode: active_decode?,
        })
    }

    fn request_event(&mut self, obj: &Members) -> Option<EventKind> {
        let id = obj
            .required(self, "id")
            .and_then(|(path, node)| self.unique_string(&path, node));
        let namespace = self.namespace(obj);
        let prefix = obj
            .required(self, "prefix")
            .and_then(|(path, node)| self.list(&path, node, Walk::segment));
        let prompt_tokens = self.req_integer(obj, "prompt_tokens");
        let decode_tokens = self.req_integer(obj, "decode_tokens");
        obj.finish(self, members::REQUEST);
        Some(EventKind::Request(Request {
            id: id?,
            namespace: namespace?,
            prefix: prefix?,
            prompt_tokens: prompt_tokens?,
            decode_tokens: decode_tokens?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_strings_share_equal_text_only_in_any_order() {
        let mut strings = SharedStrings::default();
        let texts = [
            "a".to_owned(),
            "a\0".to_owned(),
            "a\0\0".to_owned(),
            "x".repeat(14),
            "x".repeat(15),
            "x".repeat(16),
            "x".repeat(100),
            "é".repeat(8),
        ];
        let first: Vec<Arc<str>> = texts.iter().map(|t| strings.share(t)).collect();
        // In first-seen order (each the predicted next), backwards, and one at a
        // time after an unrelated string (each found through the map).
        let forwards = (0..texts.len()).collect::<Vec<_>>();
        let backwards = forwards.iter().rev().copied().collect::<Vec<_>>();
        for order in [forwards.clone(), backwards, forwards] {
            for i in order {
                let again = strings.share(&texts[i].clone());
                assert_eq!(&*again, texts[i].as_str());
                assert!(Arc::ptr_eq(&first[i], &again), "{:?} is shared", texts[i]);
            }
        }
        for (i, text) in texts.iter().enumerate() {
            strings.share(&texts[(i + 3) % texts.len()]);
            assert!(
                Arc::ptr_eq(&first[i], &strings.share(text)),
                "{text:?} is shared"
            );
        }
        for (i, a) in first.iter().enumerate() {
            for b in &first[i + 1..] {
                assert!(!Arc::ptr_eq(a, b), "{a:?} and {b:?} stay apart");
            }
        }
    }
}
