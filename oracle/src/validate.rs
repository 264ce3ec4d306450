//! Validation of a trace, in the five stages of SPEC.md §2.3: JSON syntax, shape,
//! cross-references and static limits, the residency limit, then the overflow rule.
//! Each stage runs only when the ones before it found nothing. The shape stage walks
//! the JSON tree in the order the SPEC fixes and, when it finds nothing, yields the
//! typed `Trace` the later stages use. Every error line's path is cut as §2.1 says.

use std::collections::BTreeSet;

use crate::json::{self, member, quote, quote_str, Member, Node};
use crate::limits;
use crate::model::{
    Entry, EpochNumbering, Event, EventKind, Grant, Policy, Profile, Segment, StaleRule, Trace,
    Worker,
};
use crate::paths::{index_path, line, member_path, INTEGER_MAX};

/// At most this many error lines, then one `... and <n> more errors` line.
const MAX_ERROR_LINES: usize = 100;

const TOP_MEMBERS: &[&str] = &["format", "limits", "policy", "sharing", "workers", "events"];
const POLICY_MEMBERS: &[&str] = &[
    "decode_weight_milli",
    "imbalance_penalty_milli",
    "freshness_ticks",
    "max_queued_work",
    "stale_rule",
    "epochs",
    "cold_reserve_milli",
    "dynamo_block_tokens",
];
const GRANT_MEMBERS: &[&str] = &["model", "adapter", "tenants"];
const WORKER_MEMBERS: &[&str] = &[
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
];
const ENTRY_MEMBERS: &[&str] = &["tenant", "model", "adapter", "key", "tokens"];
const SEGMENT_MEMBERS: &[&str] = &["key", "tokens"];
const STORE_MEMBERS: &[&str] = &[
    "seq", "tick", "type", "op", "worker", "epoch", "tenant", "model", "adapter", "segments",
];
const EVICT_MEMBERS: &[&str] = &[
    "seq", "tick", "type", "op", "worker", "epoch", "tenant", "model", "adapter", "keys",
];
const CLEAR_MEMBERS: &[&str] = &["seq", "tick", "type", "op", "worker", "epoch"];
const LOAD_MEMBERS: &[&str] = &[
    "seq",
    "tick",
    "type",
    "worker",
    "observed_tick",
    "queued_prefill",
    "active_decode",
];
const REQUEST_MEMBERS: &[&str] = &[
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
];

/// Where the shape stage is in the document: the chain of member names and indexes
/// from the root. It is written out (by [`member_path`] and [`index_path`]) only when an
/// error is reported there, so that checking a valid trace formats no path at all.
#[derive(Clone, Copy)]
enum Path<'p> {
    /// The whole document, written `""` (and shown as `$`).
    Root,
    Member(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        match self {
            Path::Root => String::new(),
            Path::Member(parent, name) => member_path(&parent.render(), name),
            Path::Index(parent, index) => index_path(&parent.render(), *index),
        }
    }
}

/// The value of an integer literal as SPEC §1.1 allows it: the text `0`, or a digit
/// 1–9 followed by digits, no sign, at most `B`. `None` for anything else (`5.0`,
/// `1e3`, `-0`, `-1`, `18446744073709551616`, a 5000-digit integer).
fn integer_literal_value(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let well_written = match bytes.first() {
        Some(b'0') => bytes.len() == 1,
        Some(b'1'..=b'9') => bytes.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    // B has 16 digits, so a longer literal is over B without being parsed at all.
    if !well_written || bytes.len() > 16 {
        return None;
    }
    let value: u64 = text.parse().ok()?;
    (value <= INTEGER_MAX).then_some(value)
}

/// The byte order mark that JSON text must not carry (SPEC §2.2 gives it its own line).
const UTF8_BYTE_ORDER_MARK: &[u8] = &[0xEF, 0xBB, 0xBF];

/// Keeps the first 100 lines and summarises the rest (SPEC §2.3).
fn capped(mut lines: Vec<String>) -> Vec<String> {
    if lines.len() > MAX_ERROR_LINES {
        let more = lines.len() - MAX_ERROR_LINES;
        lines.truncate(MAX_ERROR_LINES);
        lines.push(format!("... and {more} more errors"));
    }
    lines
}

/// Runs all five stages. Ok: the typed trace. Err: the (capped) error lines.
pub fn check(bytes: &[u8]) -> Result<Trace, Vec<String>> {
    // Stage 1: JSON syntax, the byte order mark checked before parsing.
    if bytes.starts_with(UTF8_BYTE_ORDER_MARK) {
        return Err(vec![line(
            "",
            "invalid JSON: the document starts with a UTF-8 byte order mark (EF BB BF), \
             which JSON text must not carry",
        )]);
    }
    let root = match json::parse(bytes) {
        Ok(root) => root,
        Err(message) => return Err(vec![format!("$: invalid JSON: {message}")]),
    };

    // Stage 2: shape.
    let mut shape = Shape { lines: Vec::new() };
    let trace = shape.trace(&root);
    if !shape.lines.is_empty() {
        return Err(capped(shape.lines));
    }
    let Some(trace) = trace else {
        // Cannot happen: every failed shape check records a line.
        return Err(vec![line(
            "",
            "internal error: shape check failed silently",
        )]);
    };

    // Stage 3: cross-references and static limits.
    let lines = limits::cross_references(&trace);
    if !lines.is_empty() {
        return Err(capped(lines));
    }

    // Stage 4: the residency limit.
    let lines = limits::residency(&trace);
    if !lines.is_empty() {
        return Err(capped(lines));
    }

    // Stage 5: overflow.
    if let Some(error) = limits::overflow(&trace) {
        return Err(vec![error]);
    }
    Ok(trace)
}

/// The shape stage. Each method checks one value, records every problem it finds, and
/// returns the typed value only when that value (and everything inside it) was fine.
/// Every member check is evaluated before any `?`, so one bad member never hides
/// another's error.
struct Shape {
    lines: Vec<String>,
}

impl Shape {
    fn error(&mut self, path: &Path, reason: String) {
        self.lines.push(line(&path.render(), &reason));
    }

    fn object<'a, 'd>(&mut self, node: &'a Node<'d>, path: &Path) -> Option<&'a [Member<'d>]> {
        match node {
            Node::Object(members) => Some(members),
            other => {
                self.error(path, format!("expected an object, found {}", quote(other)));
                None
            }
        }
    }

    fn array<'a, 'd>(&mut self, node: &'a Node<'d>, path: &Path) -> Option<&'a [Node<'d>]> {
        match node {
            Node::Array(items) => Some(items),
            other => {
                self.error(path, format!("expected an array, found {}", quote(other)));
                None
            }
        }
    }

    fn string(&mut self, node: &Node, path: &Path) -> Option<String> {
        match node {
            Node::String(text) if !text.is_empty() => Some(text.to_string()),
            other => {
                self.error(
                    path,
                    format!("expected a non-empty string, found {}", quote(other)),
                );
                None
            }
        }
    }

    /// A JSON integer literal in `0..=B`, judged by its text (SPEC §1.1).
    fn integer(&mut self, node: &Node, path: &Path) -> Option<u64> {
        if let Node::Number(text) = node {
            if let Some(value) = integer_literal_value(text) {
                return Some(value);
            }
        }
        self.error(
            path,
            format!("expected a non-negative integer, found {}", quote(node)),
        );
        None
    }

    /// A rate: an integer (type error first), then at least 1.
    fn rate(&mut self, node: &Node, path: &Path) -> Option<u64> {
        let value = self.integer(node, path)?;
        if value == 0 {
            self.error(path, "expected a positive integer, found 0".to_owned());
            return None;
        }
        Some(value)
    }

    /// `freshness_ticks` / `max_queued_work` / `cold_reserve_milli`: an integer or `null`.
    fn nullable_integer(&mut self, node: &Node, path: &Path) -> Option<Option<u64>> {
        match node {
            Node::Null => Some(None),
            Node::Number(text) => match integer_literal_value(text) {
                Some(value) => Some(Some(value)),
                None => {
                    self.nullable_error(node, path);
                    None
                }
            },
            _ => {
                self.nullable_error(node, path);
                None
            }
        }
    }

    /// `dynamo_block_tokens`: an integer of at least 1, or `null`. Unlike a rate, one
    /// reason covers both a wrong type and `0` (SPEC §2.2).
    fn positive_or_null(&mut self, node: &Node, path: &Path) -> Option<Option<u64>> {
        let value = match node {
            Node::Null => return Some(None),
            Node::Number(text) => integer_literal_value(text),
            _ => None,
        };
        match value {
            Some(value) if value >= 1 => Some(Some(value)),
            _ => {
                self.error(
                    path,
                    format!("expected a positive integer or null, found {}", quote(node)),
                );
                None
            }
        }
    }

    fn nullable_error(&mut self, node: &Node, path: &Path) {
        self.error(
            path,
            format!(
                "expected a non-negative integer or null, found {}",
                quote(node)
            ),
        );
    }

    /// A required member: reports it missing at its own path, else checks its first
    /// occurrence with `check` (repeats are reported later by `extras`).
    fn required<T>(
        &mut self,
        members: &[Member],
        parent: &Path,
        name: &str,
        check: impl FnOnce(&mut Self, &Node, &Path) -> Option<T>,
    ) -> Option<T> {
        let path = Path::Member(parent, name);
        match member(members, name) {
            Some(node) => check(self, node, &path),
            None => {
                self.error(&path, format!("missing required member \"{name}\""));
                None
            }
        }
    }

    fn required_string(&mut self, members: &[Member], parent: &Path, name: &str) -> Option<String> {
        self.required(members, parent, name, Self::string)
    }

    fn required_integer(&mut self, members: &[Member], parent: &Path, name: &str) -> Option<u64> {
        self.required(members, parent, name, Self::integer)
    }

    /// An array whose every item is checked with `check` at `path[i]`.
    fn list<T>(
        &mut self,
        node: &Node,
        path: &Path,
        mut check: impl FnMut(&mut Self, &Node, &Path) -> Option<T>,
    ) -> Option<Vec<T>> {
        let items = self.array(node, path)?;
        let mut checked = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            checked.push(check(self, item, &Path::Index(path, i)));
        }
        checked.into_iter().collect()
    }

    fn string_list(&mut self, node: &Node, path: &Path) -> Option<Vec<String>> {
        self.list(node, path, Self::string)
    }

    /// Unknown and repeated members, in document order (SPEC.md §2.2). An unlisted
    /// name is "unknown" at every occurrence; a listed name seen earlier in the same
    /// object is "repeated".
    fn extras(&mut self, members: &[Member], allowed: &[&str], parent: &Path) {
        // A set of the names seen so far (membership only), so that an object with very
        // many members is not checked in quadratic time.
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for (name, _) in members {
            let path = Path::Member(parent, name);
            let earlier = !seen.insert(name.as_ref());
            if !allowed.contains(&name.as_ref()) {
                self.error(&path, format!("unknown member {}", quote_str(name)));
            } else if earlier {
                self.error(&path, format!("repeated member {}", quote_str(name)));
            }
        }
    }

    /// A member whose value must be one of a few fixed strings; `None` when missing or
    /// not one of them (the error is recorded).
    fn choice(
        &mut self,
        members: &[Member],
        parent: &Path,
        name: &str,
        options: &[&'static str],
        expected: &str,
    ) -> Option<&'static str> {
        self.required(members, parent, name, |shape, node, path| {
            if let Node::String(text) = node {
                if let Some(option) = options.iter().find(|o| **o == text.as_ref()) {
                    return Some(*option);
                }
            }
            shape.error(path, format!("expected {expected}, found {}", quote(node)));
            None
        })
    }

    fn trace(&mut self, root: &Node) -> Option<Trace> {
        let members = self.object(root, &Path::Root)?;

        let format = self.required(members, &Path::Root, "format", |shape, node, path| {
            if let Node::String(text) = node {
                if text == "kvroute-trace/1" {
                    return Some(());
                }
            }
            shape.error(
                path,
                format!("expected \"kvroute-trace/1\", found {}", quote(node)),
            );
            None
        });

        // Optional members: only absence means "default"; an explicit null is a type error.
        let limits = match member(members, "limits") {
            None => Some(Profile::Lab),
            Some(node) => match node {
                Node::String(text) if text == "lab" => Some(Profile::Lab),
                Node::String(text) if text == "scale" => Some(Profile::Scale),
                other => {
                    self.error(
                        &Path::Member(&Path::Root, "limits"),
                        format!("expected \"lab\" or \"scale\", found {}", quote(other)),
                    );
                    None
                }
            },
        };

        let policy = match member(members, "policy") {
            None => Some(Policy::defaults()),
            Some(node) => self.policy(node, &Path::Member(&Path::Root, "policy")),
        };

        let sharing = match member(members, "sharing") {
            None => Some(Vec::new()),
            Some(node) => self.list(node, &Path::Member(&Path::Root, "sharing"), Self::grant),
        };

        let workers = self.required(members, &Path::Root, "workers", |shape, node, path| {
            shape.list(node, path, Self::worker)
        });

        let events = self.required(members, &Path::Root, "events", |shape, node, path| {
            let items = shape.array(node, path)?;
            let mut checked = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                checked.push(shape.event(item, &Path::Index(path, i), i));
            }
            checked.into_iter().collect::<Option<Vec<Event>>>()
        });

        self.extras(members, TOP_MEMBERS, &Path::Root);

        format?;
        Some(Trace {
            limits: limits?,
            policy: policy?,
            sharing: sharing?,
            workers: workers?,
            events: events?,
        })
    }

    fn policy(&mut self, node: &Node, path: &Path) -> Option<Policy> {
        let members = self.object(node, path)?;
        let decode_weight_milli = match member(members, "decode_weight_milli") {
            None => Some(1000),
            Some(value) => self.integer(value, &Path::Member(path, "decode_weight_milli")),
        };
        let imbalance_penalty_milli = match member(members, "imbalance_penalty_milli") {
            None => Some(0),
            Some(value) => self.integer(value, &Path::Member(path, "imbalance_penalty_milli")),
        };
        let freshness_ticks = match member(members, "freshness_ticks") {
            None => Some(None),
            Some(value) => self.nullable_integer(value, &Path::Member(path, "freshness_ticks")),
        };
        let max_queued_work = match member(members, "max_queued_work") {
            None => Some(None),
            Some(value) => self.nullable_integer(value, &Path::Member(path, "max_queued_work")),
        };
        // The named choices: only the exact strings of §1 (an explicit `null` is an error).
        let stale_rule = match member(members, "stale_rule") {
            None => Some(StaleRule::WorkerEpoch),
            Some(value) => {
                let rules = [
                    StaleRule::WorkerEpoch,
                    StaleRule::KeyEpoch,
                    StaleRule::ArrivalOrder,
                ];
                let found = match value {
                    Node::String(text) => rules.into_iter().find(|r| r.name() == text.as_ref()),
                    _ => None,
                };
                if found.is_none() {
                    self.error(
                        &Path::Member(path, "stale_rule"),
                        format!(
                            "expected \"worker_epoch\", \"key_epoch\" or \"arrival_order\", found {}",
                            quote(value)
                        ),
                    );
                }
                found
            }
        };
        let epochs = match member(members, "epochs") {
            None => Some(EpochNumbering::Any),
            Some(value) => {
                let numberings = [EpochNumbering::Any, EpochNumbering::Sequential];
                let found = match value {
                    Node::String(text) => {
                        numberings.into_iter().find(|n| n.name() == text.as_ref())
                    }
                    _ => None,
                };
                if found.is_none() {
                    self.error(
                        &Path::Member(path, "epochs"),
                        format!("expected \"any\" or \"sequential\", found {}", quote(value)),
                    );
                }
                found
            }
        };
        let cold_reserve_milli = match member(members, "cold_reserve_milli") {
            None => Some(None),
            Some(value) => self.nullable_integer(value, &Path::Member(path, "cold_reserve_milli")),
        };
        let dynamo_block_tokens = match member(members, "dynamo_block_tokens") {
            None => Some(None),
            Some(value) => self.positive_or_null(value, &Path::Member(path, "dynamo_block_tokens")),
        };
        self.extras(members, POLICY_MEMBERS, path);
        Some(Policy {
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

    fn grant(&mut self, node: &Node, path: &Path) -> Option<Grant> {
        let members = self.object(node, path)?;
        let model = self.required_string(members, path, "model");
        let adapter = self.required_string(members, path, "adapter");
        let tenants = self.required(members, path, "tenants", Self::string_list);
        self.extras(members, GRANT_MEMBERS, path);
        Some(Grant {
            model: model?,
            adapter: adapter?,
            tenants: tenants?,
        })
    }

    fn worker(&mut self, node: &Node, path: &Path) -> Option<Worker> {
        let members = self.object(node, path)?;
        let id = self.required_string(members, path, "id");
        let model = self.required_string(members, path, "model");
        let adapters = self.required(members, path, "adapters", Self::string_list);
        let prefill_rate = self.required(members, path, "prefill_rate", Self::rate);
        let decode_rate = self.required(members, path, "decode_rate", Self::rate);
        let queued_prefill = self.required_integer(members, path, "queued_prefill");
        let active_decode = self.required_integer(members, path, "active_decode");
        let observed_tick = self.required_integer(members, path, "observed_tick");
        let epoch = self.required_integer(members, path, "epoch");
        let cache = self.required(members, path, "cache", |shape, node, path| {
            shape.list(node, path, Self::entry)
        });
        self.extras(members, WORKER_MEMBERS, path);
        Some(Worker {
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

    fn entry(&mut self, node: &Node, path: &Path) -> Option<Entry> {
        let members = self.object(node, path)?;
        let tenant = self.required_string(members, path, "tenant");
        let model = self.required_string(members, path, "model");
        let adapter = self.required_string(members, path, "adapter");
        let key = self.required_string(members, path, "key");
        let tokens = self.required_integer(members, path, "tokens");
        self.extras(members, ENTRY_MEMBERS, path);
        Some(Entry {
            tenant: tenant?,
            model: model?,
            adapter: adapter?,
            key: key?,
            tokens: tokens?,
        })
    }

    fn segment(&mut self, node: &Node, path: &Path) -> Option<Segment> {
        let members = self.object(node, path)?;
        let key = self.required_string(members, path, "key");
        let tokens = self.required_integer(members, path, "tokens");
        self.extras(members, SEGMENT_MEMBERS, path);
        Some(Segment {
            key: key?,
            tokens: tokens?,
        })
    }

    fn segments(&mut self, node: &Node, path: &Path) -> Option<Vec<Segment>> {
        self.list(node, path, Self::segment)
    }

    /// An event: `seq`, `tick`, `type`, then (for cache events) `op`, then the members
    /// of its kind. With `type` or `op` missing or invalid nothing further is checked,
    /// not even unknown or repeated members (the allowed set is not known then).
    fn event(&mut self, node: &Node, path: &Path, index: usize) -> Option<Event> {
        let members = self.object(node, path)?;
        let seq = self.required_integer(members, path, "seq");
        let tick = self.required_integer(members, path, "tick");
        let kind_name = self.choice(
            members,
            path,
            "type",
            &["cache", "load", "request"],
            "\"cache\", \"load\" or \"request\"",
        )?;
        let kind = match kind_name {
            "cache" => {
                let op = self.choice(
                    members,
                    path,
                    "op",
                    &["store", "evict", "clear"],
                    "\"store\", \"evict\" or \"clear\"",
                )?;
                self.cache_event(members, path, op)
            }
            "load" => self.load_event(members, path),
            _ => self.request_event(members, path),
        };
        Some(Event {
            index,
            seq: seq?,
            tick: tick?,
            kind: kind?,
        })
    }

    fn cache_event(&mut self, members: &[Member], path: &Path, op: &str) -> Option<EventKind> {
        let worker = self.required_string(members, path, "worker");
        let epoch = self.required_integer(members, path, "epoch");
        match op {
            "clear" => {
                self.extras(members, CLEAR_MEMBERS, path);
                Some(EventKind::Clear {
                    worker: worker?,
                    epoch: epoch?,
                })
            }
            "store" => {
                let tenant = self.required_string(members, path, "tenant");
                let model = self.required_string(members, path, "model");
                let adapter = self.required_string(members, path, "adapter");
                let segments = self.required(members, path, "segments", Self::segments);
                self.extras(members, STORE_MEMBERS, path);
                Some(EventKind::Store {
                    worker: worker?,
                    epoch: epoch?,
                    tenant: tenant?,
                    model: model?,
                    adapter: adapter?,
                    segments: segments?,
                })
            }
            _ => {
                let tenant = self.required_string(members, path, "tenant");
                let model = self.required_string(members, path, "model");
                let adapter = self.required_string(members, path, "adapter");
                let keys = self.required(members, path, "keys", Self::string_list);
                self.extras(members, EVICT_MEMBERS, path);
                Some(EventKind::Evict {
                    worker: worker?,
                    epoch: epoch?,
                    tenant: tenant?,
                    model: model?,
                    adapter: adapter?,
                    keys: keys?,
                })
            }
        }
    }

    fn load_event(&mut self, members: &[Member], path: &Path) -> Option<EventKind> {
        let worker = self.required_string(members, path, "worker");
        let observed_tick = self.required_integer(members, path, "observed_tick");
        let queued_prefill = self.required_integer(members, path, "queued_prefill");
        let active_decode = self.required_integer(members, path, "active_decode");
        self.extras(members, LOAD_MEMBERS, path);
        Some(EventKind::Load {
            worker: worker?,
            observed_tick: observed_tick?,
            queued_prefill: queued_prefill?,
            active_decode: active_decode?,
        })
    }

    fn request_event(&mut self, members: &[Member], path: &Path) -> Option<EventKind> {
        let id = self.required_string(members, path, "id");
        let tenant = self.required_string(members, path, "tenant");
        let model = self.required_string(members, path, "model");
        let adapter = self.required_string(members, path, "adapter");
        let prefix = self.required(members, path, "prefix", Self::segments);
        let prompt_tokens = self.required_integer(members, path, "prompt_tokens");
        let decode_tokens = self.required_integer(members, path, "decode_tokens");
        self.extras(members, REQUEST_MEMBERS, path);
        Some(EventKind::Request {
            id: id?,
            tenant: tenant?,
            model: model?,
            adapter: adapter?,
            prefix: prefix?,
            prompt_tokens: prompt_tokens?,
            decode_tokens: decode_tokens?,
        })
    }
}
