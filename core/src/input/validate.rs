//! Trace validation: bytes in, a [`Trace`] or every error with its JSON path out.
//!
//! Validation is all-or-nothing and runs in the four stages of SPEC.md §2.3: JSON
//! syntax, shape (types, required, unknown and repeated members), cross-references and
//! limits, then the overflow bound. Paths index the input arrays as given. Nothing in
//! here panics on any input: every value is checked before it is used.

use crate::input::document::{self, Path};
use crate::input::json::{self, quote_str, MemberName, NodeOf as Node, BYTE_ORDER_MARK_MESSAGE};
use crate::input::limits::{CostBound, ERROR_LINES_MAX, JSON_INTEGER_MAX};
use crate::input::trace::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;
use std::sync::Arc;

/// Why a trace was rejected: the first [`ERROR_LINES_MAX`] `PATH: reason` lines in
/// report order, and how many more there were. Only the printed lines are kept, so a
/// document with millions of defects costs 100 strings, not millions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationErrors {
    /// At most [`ERROR_LINES_MAX`] lines.
    pub errors: Vec<String>,
    /// Errors found after the first [`ERROR_LINES_MAX`], counted, not kept.
    pub more: usize,
}

impl ValidationErrors {
    fn one(line: String) -> Self {
        ValidationErrors {
            errors: vec![line],
            more: 0,
        }
    }

    /// Records one error at a path; the line is only formatted while there is room to
    /// keep it, and its path is cut ([`cut_path`]).
    fn push_with<P: AsRef<str>, R: fmt::Display>(&mut self, error: impl FnOnce() -> (P, R)) {
        if self.errors.len() < ERROR_LINES_MAX {
            let (path, reason) = error();
            self.errors
                .push(format!("{}: {reason}", cut_path(path.as_ref())));
        } else {
            self.more += 1;
        }
    }

    /// Appends `other`'s errors after these, as if each had been pushed here.
    fn append(&mut self, other: ValidationErrors) {
        for line in other.errors {
            if self.errors.len() < ERROR_LINES_MAX {
                self.errors.push(line);
            } else {
                self.more += 1;
            }
        }
        self.more += other.more;
    }

    /// Whether no error was found.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Every error found, kept or counted.
    pub fn count(&self) -> usize {
        self.errors.len() + self.more
    }

    /// The lines as printed: at most [`ERROR_LINES_MAX`], then a count of the rest.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.errors.clone();
        if self.more > 0 {
            lines.push(format!("... and {} more errors", self.more));
        }
        lines
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

impl std::error::Error for ValidationErrors {}

/// A path as error lines print it (SPEC.md §2.1): whole up to [`PATH_CHARS_MAX`]
/// characters, else its first [`PATH_HEAD_CHARS`], the marker and its last
/// [`PATH_TAIL_CHARS`]. Characters, not bytes, so a cut never splits a UTF-8 sequence;
/// a 50 MB member name gives a 120-character path, not a 50 MB line.
pub fn cut_path(path: &str) -> Cow<'_, str> {
    // Byte length bounds the character count from above: most paths are ASCII and
    // short, and need no counting.
    if path.len() <= PATH_CHARS_MAX || path.chars().count() <= PATH_CHARS_MAX {
        return Cow::Borrowed(path);
    }
    let head_end = path
        .char_indices()
        .nth(PATH_HEAD_CHARS)
        .map_or(path.len(), |(i, _)| i);
    let tail_start = path
        .char_indices()
        .rev()
        .nth(PATH_TAIL_CHARS - 1)
        .map_or(0, |(i, _)| i);
    Cow::Owned(format!(
        "{}{PATH_CUT_MARKER}{}",
        &path[..head_end],
        &path[tail_start..]
    ))
}

/// The longest path printed whole, and how a longer one is cut (SPEC.md §2.1).
pub const PATH_CHARS_MAX: usize = 120;
pub const PATH_HEAD_CHARS: usize = 80;
pub const PATH_TAIL_CHARS: usize = 35;
pub const PATH_CUT_MARKER: &str = "[...]";

/// Parses and validates trace bytes.
pub fn parse_trace(bytes: &[u8]) -> Result<Trace, ValidationErrors> {
    if bytes.starts_with(BYTE_ORDER_MARK) {
        return Err(invalid_json(BYTE_ORDER_MARK_MESSAGE));
    }
    let (masked, literals) = json::mask_numbers(bytes);
    let mut de = serde_json::Deserializer::from_slice(&masked);
    let read = document::read(&mut de, &literals, &ITEM_FNS).and_then(|read| {
        de.end()?;
        Ok(read)
    });
    match read {
        Ok(read) => validated(read),
        Err(e) => Err(invalid_json(&e.to_string())),
    }
}

/// Why [`read_trace`] failed: the source could not be read, or what it held is not a
/// valid trace.
#[derive(Debug)]
pub enum ReadTraceError {
    Io(io::Error),
    Invalid(ValidationErrors),
}

impl fmt::Display for ReadTraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadTraceError::Io(e) => e.fmt(f),
            ReadTraceError::Invalid(errors) => errors.fmt(f),
        }
    }
}

impl std::error::Error for ReadTraceError {}

/// Reads and validates a trace from a stream (a file, stdin) in one pass, holding
/// neither its text nor a tree of it: the same trace, or the same errors, as
/// [`parse_trace`] of the same bytes.
pub fn read_trace<R: Read>(mut source: R) -> Result<Trace, ReadTraceError> {
    // The byte order mark is refused before parsing (SPEC.md §2.2), so look at the
    // first three bytes, then hand them on ahead of the rest.
    let mut head = Vec::with_capacity(BYTE_ORDER_MARK.len());
    (&mut source)
        .take(BYTE_ORDER_MARK.len() as u64)
        .read_to_end(&mut head)
        .map_err(ReadTraceError::Io)?;
    if head == BYTE_ORDER_MARK {
        return Err(ReadTraceError::Invalid(invalid_json(
            BYTE_ORDER_MARK_MESSAGE,
        )));
    }
    let literals = Rc::new(RefCell::new(VecDeque::new()));
    let masked = json::MaskingReader::new(io::Cursor::new(head).chain(source), literals.clone());
    let mut de = serde_json::Deserializer::from_reader(io::BufReader::new(masked));
    let read = document::read(&mut de, &literals, &ITEM_FNS).and_then(|read| {
        de.end()?;
        Ok(read)
    });
    match read {
        Ok(read) => validated(read).map_err(ReadTraceError::Invalid),
        Err(e) if e.is_io() => Err(ReadTraceError::Io(e.into())),
        Err(e) => Err(ReadTraceError::Invalid(invalid_json(&e.to_string()))),
    }
}

const BYTE_ORDER_MARK: &[u8] = b"\xEF\xBB\xBF";

const ITEM_FNS: document::ItemFns<Walk> = document::ItemFns {
    grant: Walk::grant,
    worker: Walk::worker,
    event: Walk::event,
};

/// The one error of a document that is not JSON (stage 1).
fn invalid_json(reason: &str) -> ValidationErrors {
    ValidationErrors::one(format!("$: invalid JSON: {reason}"))
}

/// Stages 2 to 5 on a document that was JSON.
fn validated(read: document::Read<'_, Walk>) -> Result<Trace, ValidationErrors> {
    let mut walk = Walk::default();
    let trace = match read {
        document::Read::Object(doc) => walk.trace(doc),
        document::Read::Other(node) => {
            walk.object(&Path::Root, &node);
            None
        }
    };
    let trace = match trace {
        Some(trace) if walk.errors.is_empty() => trace,
        _ => return Err(walk.errors),
    };
    let errors = cross_reference_and_limits(&trace);
    if !errors.is_empty() {
        return Err(errors);
    }
    let errors = residency_errors(&trace);
    if !errors.is_empty() {
        return Err(errors);
    }
    if let Some(error) = overflow_error(&trace) {
        return Err(ValidationErrors::one(error));
    }
    Ok(trace)
}

/// The members of one JSON object, for checking required, unknown and repeated names.
struct Members<'p, 'n, 'd> {
    path: Path<'p>,
    members: &'n [(MemberName, Node<'d>)],
}

impl<'p, 'n, 'd> Members<'p, 'n, 'd> {
    fn get(&self, name: &str) -> Option<&'n Node<'d>> {
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
pub(super) struct Walk {
    errors: ValidationErrors,
    strings: SharedStrings,
}

/// The strings handed out so far, one shared copy each: a trace repeats a few names
/// and keys millions of times, and each repeat then costs a pointer, not a `String`
/// (issue 11). Each streamed array is read by its own `Walk`, so a name used in both
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
#[derive(Default)]
struct SharedStrings {
    /// Every string shared so far, in the order first seen.
    order: Vec<Arc<str>>,
    /// Each string's position in `order`.
    position: FxHashMap<Arc<str>, usize>,
    /// The position of the string shared last.
    last: usize,
}

impl SharedStrings {
    fn share(&mut self, s: &str) -> Arc<str> {
        let next = self.last + 1;
        if let Some(shared) = self.order.get(next).filter(|shared| ***shared == *s) {
            self.last = next;
            return Arc::clone(shared);
        }
        if let Some(&at) = self.position.get(s) {
            self.last = at;
            return Arc::clone(&self.order[at]);
        }
        let shared: Arc<str> = Arc::from(s);
        self.last = self.order.len();
        self.position.insert(Arc::clone(&shared), self.last);
        self.order.push(Arc::clone(&shared));
        shared
    }
}

impl document::Check for Walk {
    fn expected_array(&mut self, path: &Path, node: &Node<'_>) {
        self.array(path, node);
    }
}

impl Walk {
    fn err(&mut self, path: &Path, reason: impl fmt::Display) {
        self.errors.push_with(|| (path.to_string(), reason));
    }

    fn object<'p, 'n, 'd>(
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

    fn array<'n, 'd>(&mut self, path: &Path, node: &'n Node<'d>) -> Option<&'n [Node<'d>]> {
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
    /// their errors are put where the walk of a whole tree reported them.
    fn trace(&mut self, doc: document::Document<'_, Walk>) -> Option<Trace> {
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
        obj.finish(
            self,
            &["format", "limits", "policy", "sharing", "workers", "events"],
        );
        if !format_ok {
            return None;
        }
        Some(Trace {
            limits: limits?,
            policy: policy?,
            sharing: sharing?,
            workers: workers?,
            events: events?,
        })
    }

    /// A streamed array's items, its errors reported here, in their place.
    fn listed<T>(&mut self, listed: document::Listed<T, Walk>) -> Option<Vec<T>> {
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
            Some((path, node)) => self.named_choice(
                &path,
                node,
                StaleRule::from_name,
                r#""worker_epoch", "key_epoch" or "arrival_order""#,
            ),
        };
        let epochs = match obj.optional("epochs") {
            None => Some(defaults.epochs),
            Some((path, node)) => self.named_choice(
                &path,
                node,
                EpochsMode::from_name,
                r#""any" or "sequential""#,
            ),
        };
        let cold_reserve_milli = match obj.optional("cold_reserve_milli") {
            None => Some(None),
            Some((path, node)) => self.nullable_integer(&path, node),
        };
        let dynamo_block_tokens = match obj.optional("dynamo_block_tokens") {
            None => Some(None),
            Some((path, node)) => self.block_tokens(&path, node),
        };
        obj.finish(
            self,
            &[
                "decode_weight_milli",
                "imbalance_penalty_milli",
                "freshness_ticks",
                "max_queued_work",
                "stale_rule",
                "epochs",
                "cold_reserve_milli",
                "dynamo_block_tokens",
            ],
        );
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
    fn named_choice<T>(
        &mut self,
        path: &Path,
        node: &Node,
        from_name: impl Fn(&str) -> Option<T>,
        allowed: &str,
    ) -> Option<T> {
        if let Node::String(s) = node {
            if let Some(value) = from_name(s) {
                return Some(value);
            }
        }
        self.err(path, format!("expected {allowed}, found {}", node.quoted()));
        None
    }

    fn grant(&mut self, path: &Path, node: &Node) -> Option<Grant> {
        let obj = self.object(path, node)?;
        let model = self.req_string(&obj, "model");
        let adapter = self.req_string(&obj, "adapter");
        let tenants = self.req_string_list(&obj, "tenants");
        obj.finish(self, &["model", "adapter", "tenants"]);
        Some(Grant {
            model: model?,
            adapter: adapter?,
            tenants: tenants?,
        })
    }

    fn worker(&mut self, path: &Path, node: &Node) -> Option<WorkerSpec> {
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
        obj.finish(
            self,
            &[
                "id",
                "model",
                "adapters",
                "prefill_rate",
                "decode_rate",
                "queued_prefill",
                "active_decode",
                "observed_tick",
                "epoch",
                "cache",
            ],
        );
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
        obj.finish(self, &["tenant", "model", "adapter", "key", "tokens"]);
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
        obj.finish(self, &["key", "tokens"]);
        Some(Segment {
            key: key?,
            tokens: tokens?,
        })
    }

    fn event(&mut self, path: &Path, node: &Node) -> Option<Event> {
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
        let common = ["seq", "tick", "type", "op", "worker", "epoch"];
        let op = match op_name {
            "store" => {
                let namespace = self.namespace(obj);
                let segments = obj
                    .required(self, "segments")
                    .and_then(|(path, node)| self.list(&path, node, Walk::segment));
                let expected: Vec<&str> = common
                    .iter()
                    .copied()
                    .chain(["tenant", "model", "adapter", "segments"])
                    .collect();
                obj.finish(self, &expected);
                Some(CacheOp::Store {
                    namespace: namespace?,
                    segments: segments?,
                })
            }
            "evict" => {
                let namespace = self.namespace(obj);
                let keys = self.req_string_list(obj, "keys");
                let expected: Vec<&str> = common
                    .iter()
                    .copied()
                    .chain(["tenant", "model", "adapter", "keys"])
                    .collect();
                obj.finish(self, &expected);
                Some(CacheOp::Evict {
                    namespace: namespace?,
                    keys: keys?,
                })
            }
            _ => {
                obj.finish(self, &common);
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
        obj.finish(
            self,
            &[
                "seq",
                "tick",
                "type",
                "worker",
                "observed_tick",
                "queued_prefill",
                "active_decode",
            ],
        );
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
        obj.finish(
            self,
            &[
                "seq",
                "tick",
                "type",
                "id",
                "tenant",
                "model",
                "adapter",
                "prefix",
                "prompt_tokens",
                "decode_tokens",
            ],
        );
        Some(EventKind::Request(Request {
            id: id?,
            namespace: namespace?,
            prefix: prefix?,
            prompt_tokens: prompt_tokens?,
            decode_tokens: decode_tokens?,
        }))
    }
}

/// Stage 3: duplicates, dangling references, future observations, over-long prefixes
/// and the static limits of the profile, in the order SPEC.md §2.3 fixes. The sets are
/// hash sets only asked whether they already hold a value, never iterated, so their
/// order cannot reach an error.
fn cross_reference_and_limits(trace: &Trace) -> ValidationErrors {
    let mut errors = ValidationErrors::default();
    let profile = trace.limits;
    let over = |count: usize, max: u64| count as u64 > max;
    for (i, grant) in trace.sharing.iter().enumerate() {
        let max = profile.tenants_per_grant_max();
        if over(grant.tenants.len(), max) {
            errors.push_with(|| {
                (
                    format!("sharing[{i}].tenants"),
                    format!(
                        "{} tenants exceed the {} limit of {max} per grant",
                        grant.tenants.len(),
                        profile.name()
                    ),
                )
            });
        }
    }
    let mut worker_ids =
        FxHashSet::with_capacity_and_hasher(trace.workers.len(), Default::default());
    for (i, worker) in trace.workers.iter().enumerate() {
        if !worker_ids.insert(&*worker.id) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].id"),
                    format!("duplicate worker id {}", quote_str(&worker.id)),
                )
            });
        }
        let max = profile.adapters_per_worker_max();
        if over(worker.adapters.len(), max) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].adapters"),
                    format!(
                        "{} adapters exceed the {} limit of {max} per worker",
                        worker.adapters.len(),
                        profile.name()
                    ),
                )
            });
        }
        let mut entries =
            FxHashSet::with_capacity_and_hasher(worker.cache.len(), Default::default());
        for (j, entry) in worker.cache.iter().enumerate() {
            if !entries.insert((&entry.namespace, &*entry.key)) {
                errors.push_with(|| {
                    (
                        format!("workers[{i}].cache[{j}]"),
                        format!("duplicate cache entry for key {}", quote_str(&entry.key)),
                    )
                });
            }
        }
        let max = profile.cache_entries_per_worker_max();
        if over(worker.cache.len(), max) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].cache"),
                    format!(
                        "{} cache entries exceed the {} limit of {max} per worker",
                        worker.cache.len(),
                        profile.name()
                    ),
                )
            });
        }
    }
    let mut seqs = FxHashSet::with_capacity_and_hasher(trace.events.len(), Default::default());
    let mut request_ids = FxHashSet::default();
    for (i, event) in trace.events.iter().enumerate() {
        if !seqs.insert(event.seq) {
            errors.push_with(|| {
                (
                    format!("events[{i}].seq"),
                    format!("duplicate seq {}", event.seq),
                )
            });
        }
        let worker = match &event.kind {
            EventKind::Cache { worker, .. } | EventKind::Load { worker, .. } => Some(worker),
            EventKind::Request(_) => None,
        };
        if let EventKind::Request(request) = &event.kind {
            if !request_ids.insert(&*request.id) {
                errors.push_with(|| {
                    (
                        format!("events[{i}].id"),
                        format!("duplicate request id {}", quote_str(&request.id)),
                    )
                });
            }
        }
        if let Some(worker) = worker {
            if !worker_ids.contains(&**worker) {
                errors.push_with(|| {
                    (
                        format!("events[{i}].worker"),
                        format!("unknown worker {}", quote_str(worker)),
                    )
                });
            }
        }
        match &event.kind {
            EventKind::Load { observed_tick, .. } if *observed_tick > event.tick => {
                errors.push_with(|| {
                    (
                        format!("events[{i}].observed_tick"),
                        format!(
                            "observed_tick {observed_tick} is after the event tick {}",
                            event.tick
                        ),
                    )
                });
            }
            EventKind::Request(request) => {
                let prefix_tokens: u128 = request.prefix.iter().map(|s| s.tokens as u128).sum();
                if prefix_tokens > request.prompt_tokens as u128 {
                    errors.push_with(|| {
                        (
                            format!("events[{i}].prefix"),
                            format!(
                                "prefix tokens {prefix_tokens} exceed prompt_tokens {}",
                                request.prompt_tokens
                            ),
                        )
                    });
                }
                if let Some(tokens) =
                    profile.tokens_over_limit(request.prompt_tokens, request.decode_tokens)
                {
                    errors.push_with(|| {
                        (
                            format!("events[{i}]"),
                            format!(
                                "{tokens} tokens (prompt_tokens + decode_tokens) exceed the {} limit of {}",
                                profile.name(),
                                profile.tokens_per_request_max()
                            ),
                        )
                    });
                }
            }
            _ => {}
        }
        let keys = match &event.kind {
            EventKind::Request(request) => Some(("prefix", request.prefix.len())),
            EventKind::Cache {
                op: CacheOp::Store { segments, .. },
                ..
            } => Some(("segments", segments.len())),
            EventKind::Cache {
                op: CacheOp::Evict { keys, .. },
                ..
            } => Some(("keys", keys.len())),
            _ => None,
        };
        if let Some((member, count)) = keys {
            let max = profile.keys_per_event_max();
            if over(count, max) {
                errors.push_with(|| {
                    (
                        format!("events[{i}].{member}"),
                        format!(
                            "{count} keys exceed the {} limit of {max} per event",
                            profile.name()
                        ),
                    )
                });
            }
        }
    }
    let counts = [
        (
            "sharing",
            trace.sharing.len() as u64,
            "sharing grants",
            profile.sharing_grants_max(),
        ),
        (
            "workers",
            trace.workers.len() as u64,
            "workers",
            profile.workers_max(),
        ),
        (
            "events",
            trace.request_count() as u64,
            "requests",
            profile.requests_max(),
        ),
        (
            "events",
            trace.events.len() as u64,
            "events",
            profile.events_max(),
        ),
    ];
    for (path, count, noun, max) in counts {
        if count > max {
            errors.push_with(|| {
                (
                    path,
                    format!(
                        "{count} {noun} exceed the {} limit of {max}",
                        profile.name()
                    ),
                )
            });
        }
    }
    errors
}

/// Stage 4: the residency limit (SPEC.md §1.3). Routing never changes a cache and the
/// epoch rule reads only epochs, so replaying the cache events alone, in `(tick, seq)`
/// order, gives every worker's resident entries at every point of every policy's run.
/// Runs only after stage 3 found nothing: seqs are unique, so the order is total, and
/// every event names a worker.
fn residency_errors(trace: &Trace) -> ValidationErrors {
    let mut errors = ValidationErrors::default();
    let profile = trace.limits;
    let max = profile.cache_entries_per_worker_max() as usize;
    let index_of: FxHashMap<&str, usize> = trace
        .workers
        .iter()
        .enumerate()
        .map(|(w, worker)| (&*worker.id, w))
        .collect();
    let mut resident: Vec<FxHashSet<(&Namespace, &str)>> = trace
        .workers
        .iter()
        .map(|worker| {
            worker
                .cache
                .iter()
                .filter(|entry| entry.tokens > 0)
                .map(|entry| (&entry.namespace, &*entry.key))
                .collect()
        })
        .collect();
    let mut last_epoch: Vec<u64> = trace.workers.iter().map(|w| w.epoch).collect();
    let mut reported = vec![false; trace.workers.len()];
    let mut order: Vec<usize> = (0..trace.events.len()).collect();
    order.sort_by_key(|&i| (trace.events[i].tick, trace.events[i].seq));
    for i in order {
        let EventKind::Cache { worker, epoch, op } = &trace.events[i].kind else {
            continue;
        };
        let Some(&w) = index_of.get(&**worker) else {
            continue;
        };
        if *epoch <= last_epoch[w] {
            continue;
        }
        last_epoch[w] = *epoch;
        let entries = &mut resident[w];
        match op {
            CacheOp::Store {
                namespace,
                segments,
            } => {
                for segment in segments {
                    if segment.tokens > 0 {
                        entries.insert((namespace, &*segment.key));
                    } else {
                        entries.remove(&(namespace, &*segment.key));
                    }
                }
                if entries.len() > max && !reported[w] {
                    reported[w] = true;
                    let held = entries.len();
                    errors.push_with(|| {
                        (
                            format!("events[{i}]"),
                            format!(
                                "worker {} would hold {held} cache entries, over the {} limit of {max}",
                                quote_str(worker),
                                profile.name()
                            ),
                        )
                    });
                }
            }
            CacheOp::Evict { namespace, keys } => {
                for key in keys {
                    entries.remove(&(namespace, &**key));
                }
            }
            CacheOp::Clear => entries.clear(),
        }
    }
    errors
}

/// Stage 5: the static bound of SPEC.md §1.4 on every exported figure.
fn overflow_error(trace: &Trace) -> Option<String> {
    let mut bound = CostBound::default();
    for worker in &trace.workers {
        bound.add_load(worker.queued_prefill, worker.active_decode);
    }
    for event in &trace.events {
        match &event.kind {
            EventKind::Load {
                queued_prefill,
                active_decode,
                ..
            } => bound.add_load(*queued_prefill, *active_decode),
            EventKind::Request(request) => {
                bound.add_request(request.prompt_tokens, request.decode_tokens)
            }
            EventKind::Cache { .. } => {}
        }
    }
    let policy = &trace.policy;
    let dynamo_over = policy
        .dynamo_block_tokens
        .is_some_and(|block_tokens| bound.dynamo_exceeds_integer_max(block_tokens));
    (bound.exceeds_integer_max(policy.decode_weight_milli, policy.imbalance_penalty_milli)
        || dynamo_over)
        .then(|| {
            format!(
                "$: figures could overflow: the cost bound exceeds {}",
                JSON_INTEGER_MAX
            )
        })
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
