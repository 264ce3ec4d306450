//! One Weka session file turned into the compact requests the import keeps (SPEC.md
//! §19.2): every rule of §19.3 checked by JSON path, the parent and its sub-agents
//! flattened depth first, the requests put in arrival order, and each request's ids
//! kept only as what it adds to the request before it in the same parent or sub-agent.

use super::clock::seconds_to_ms;
use super::json::{
    parse_document, Document, DocumentMembers, Entries, Entry, EntryMembers, Ids, Value,
};
use crate::input::limits::{LimitsProfile, JSON_INTEGER_MAX};

/// The largest session file read: 64 MiB (SPEC.md §19.3).
pub const FILE_BYTES_MAX: usize = 64 << 20;

/// The longest block a file may declare: the `scale` tokens per request.
const BLOCK_SIZE_MAX: u64 = 2_097_152;

/// What the first bytes of a file that carries a byte order mark are refused with.
const BOM_REASON: &str = "invalid JSON: the file starts with a UTF-8 byte order mark (EF BB BF), \
                          which JSON text must not carry";

/// One request as the import keeps it until it is written: 48 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRecord {
    /// Milliseconds from the session's start.
    pub offset_ms: u64,
    pub prompt_tokens: u64,
    pub decode_tokens: u64,
    /// Its number `k` in the session's depth-first walk, from 1.
    pub k: u32,
    /// The parent (0) or the sub-agent (1, 2, ... in walk order) it belongs to.
    pub context: u32,
    /// How many ids it shares, from the start, with the request before it in its
    /// context (in arrival order).
    pub kept_ids: u32,
    /// Its further ids: `added_len` of them from `added_start` in the session's list.
    pub added_start: u32,
    pub added_len: u32,
}

/// A session's requests in arrival order, ready to be merged with the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRequests {
    pub records: Vec<RequestRecord>,
    /// Every request's added ids, one after another.
    pub added_ids: Vec<u64>,
    /// Contexts: the parent and each sub-agent.
    pub contexts: u32,
    pub block_tokens: u64,
    pub subagents: u64,
    /// Requests that belong to a sub-agent.
    pub subagent_requests: u64,
    /// Distinct ids of the session.
    pub distinct_blocks: u64,
}

/// One request while its file is checked: the ids still borrowed from the parse.
struct FlatRequest<'d> {
    offset_ms: u64,
    prompt_tokens: u64,
    decode_tokens: u64,
    context: u32,
    ids: &'d [u64],
}

/// Reads one session's bytes (at most [`FILE_BYTES_MAX`], the caller's to cut) into its
/// requests, or the reasons it is refused, each `PATH: REASON` with its line when it
/// has one (a syntax error).
pub fn read_session(bytes: &[u8]) -> Result<SessionRequests, Vec<(usize, String)>> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(vec![(0, BOM_REASON.to_owned())]);
    }
    let document = parse_document(bytes).map_err(|problem| vec![problem])?;
    let mut reasons = Vec::new();
    let members = match document {
        Document::Object(members) => members,
        Document::Other(found) => {
            return Err(vec![(
                0,
                format!("$: expected an object, found {}", found.kind()),
            )]);
        }
    };
    let flat = flatten_document(&members, &mut reasons);
    match flat {
        Some((block_tokens, requests, subagents)) if reasons.is_empty() => {
            Ok(encode(block_tokens, requests, subagents))
        }
        _ => Err(reasons.into_iter().map(|reason| (0, reason)).collect()),
    }
}

/// The session's block size, requests and sub-agent count, every problem pushed on
/// `reasons`.
fn flatten_document<'d>(
    members: &'d DocumentMembers,
    reasons: &mut Vec<String>,
) -> Option<(u64, Vec<FlatRequest<'d>>, u64)> {
    for name in &members.repeated {
        reasons.push(format!("$: repeated member \"{name}\""));
    }
    let block_tokens = match &members.block_size {
        None => missing("$", "block_size", reasons),
        Some(Value::Unsigned(b)) if (1..=BLOCK_SIZE_MAX).contains(b) => Some(*b),
        Some(found) => {
            reasons.push(format!(
                "block_size: expected an integer from 1 to {BLOCK_SIZE_MAX}, found {}",
                found.shown()
            ));
            None
        }
    };
    match &members.hash_id_scope {
        None => {
            missing::<()>("$", "hash_id_scope", reasons);
        }
        Some(Value::Text(scope)) if scope == "local" => {}
        Some(found) => reasons.push(format!(
            "hash_id_scope: only \"local\" is read, found {}",
            found.shown()
        )),
    }
    let Some(entries) = &members.requests else {
        return missing("$", "requests", reasons);
    };
    let mut walk = Walk {
        block_tokens: block_tokens.unwrap_or(1),
        requests: Vec::new(),
        contexts: 1,
        subagents: 0,
        reasons,
    };
    walk.entries(entries, "requests", 0, 0);
    let Walk {
        requests,
        subagents,
        ..
    } = walk;
    block_tokens.map(|b| (b, requests, subagents))
}

fn missing<T>(path: &str, name: &str, reasons: &mut Vec<String>) -> Option<T> {
    reasons.push(format!("{path}: missing member \"{name}\""));
    None
}

/// The depth-first walk of a session's entries.
struct Walk<'d, 'r> {
    block_tokens: u64,
    requests: Vec<FlatRequest<'d>>,
    /// Contexts numbered so far (the parent is 0).
    contexts: u32,
    subagents: u64,
    reasons: &'r mut Vec<String>,
}

impl<'d> Walk<'d, '_> {
    /// The entries of one `requests` array at `path`, of `context`, whose times count
    /// from `base_ms`.
    fn entries(&mut self, entries: &'d Entries, path: &str, base_ms: u64, context: u32) {
        let list = match entries {
            Entries::List(list) => list,
            Entries::NotArray(found) => {
                let kind = found.kind();
                return self
                    .reasons
                    .push(format!("{path}: expected an array, found {kind}"));
            }
        };
        for (index, entry) in list.iter().enumerate() {
            let path = format!("{path}[{index}]");
            match entry {
                Entry::Object(members) => self.entry(members, &path, base_ms, context),
                Entry::Other(found) => self.reasons.push(format!(
                    "{path}: expected an object, found {}",
                    found.kind()
                )),
            }
        }
    }

    fn entry(&mut self, m: &'d EntryMembers, path: &str, base_ms: u64, context: u32) {
        for name in &m.repeated {
            self.reasons
                .push(format!("{path}: repeated member \"{name}\""));
        }
        let t_ms = match &m.t {
            None => missing(path, "t", self.reasons),
            Some(found) => self.seconds(found, &format!("{path}.t")),
        };
        let offset_ms = t_ms.and_then(|t| t.checked_add(base_ms));
        match &m.kind {
            None => {
                missing::<()>(path, "type", self.reasons);
            }
            Some(Value::Text(kind)) if kind == "n" || kind == "s" => {
                self.request(m, path, offset_ms, context);
            }
            Some(Value::Text(kind)) if kind == "subagent" => {
                self.subagents += 1;
                let inner = self.contexts;
                self.contexts += 1;
                match &m.requests {
                    None => drop(missing::<()>(path, "requests", self.reasons)),
                    Some(entries) => {
                        let inner_path = format!("{path}.requests");
                        self.entries(entries, &inner_path, offset_ms.unwrap_or(0), inner);
                    }
                }
            }
            Some(found) => self.reasons.push(format!(
                "{path}.type: expected \"n\", \"s\" or \"subagent\", found {}",
                found.shown()
            )),
        }
    }

    /// A request entry: its tokens and ids checked, kept when all are good.
    fn request(&mut self, m: &'d EntryMembers, path: &str, offset_ms: Option<u64>, context: u32) {
        let prompt = self.integer(m.input.as_ref(), path, "in");
        let decode = self.integer(m.output.as_ref(), path, "out");
        let ids = match &m.hash_ids {
            None => missing(path, "hash_ids", self.reasons),
            Some(Ids::List(ids)) => self.ids_in_range(ids, path),
            Some(Ids::BadEntry { index, found }) => {
                let shown = found.shown();
                self.reasons.push(format!(
                    "{path}.hash_ids[{index}]: expected an integer from 0 to {JSON_INTEGER_MAX}, found {shown}"
                ));
                None
            }
            Some(Ids::NotArray(found)) => {
                let kind = found.kind();
                self.reasons
                    .push(format!("{path}.hash_ids: expected an array, found {kind}"));
                None
            }
        };
        let (Some(prompt_tokens), Some(decode_tokens), Some(ids)) = (prompt, decode, ids) else {
            return;
        };
        if !self.fits(prompt_tokens, decode_tokens, ids.len(), path) {
            return;
        }
        if let Some(offset_ms) = offset_ms {
            self.requests.push(FlatRequest {
                offset_ms,
                prompt_tokens,
                decode_tokens,
                context,
                ids,
            });
        }
    }

    /// The coverage rule and the token limit of SPEC.md §19.3.
    fn fits(&mut self, prompt_tokens: u64, decode_tokens: u64, ids: usize, path: &str) -> bool {
        let b = self.block_tokens;
        let full = prompt_tokens / b;
        let partial = u64::from(!prompt_tokens.is_multiple_of(b));
        let n = ids as u64;
        let mut fits = true;
        if n != full && n != full + partial {
            let or_partial = if partial == 1 {
                format!(" (or {} with a partial last block)", full + 1)
            } else {
                String::new()
            };
            self.reasons.push(format!(
                "{path}.hash_ids: in {prompt_tokens} at {b} tokens a block names {full} ids{or_partial}, found {n}"
            ));
            fits = false;
        }
        let limit = LimitsProfile::Scale.tokens_per_request_max();
        let tokens = u128::from(prompt_tokens) + u128::from(decode_tokens);
        if tokens > u128::from(limit) {
            self.reasons.push(format!(
                "{path}: {tokens} tokens (in + out) exceed the scale limit of {limit}"
            ));
            fits = false;
        }
        fits
    }

    fn ids_in_range(&mut self, ids: &'d [u64], path: &str) -> Option<&'d [u64]> {
        match ids.iter().position(|&id| id > JSON_INTEGER_MAX) {
            None => Some(ids),
            Some(index) => {
                self.reasons.push(format!(
                    "{path}.hash_ids[{index}]: expected an integer from 0 to {JSON_INTEGER_MAX}, found {}",
                    ids[index]
                ));
                None
            }
        }
    }

    fn integer(&mut self, value: Option<&Value>, path: &str, name: &str) -> Option<u64> {
        match value {
            None => missing(path, name, self.reasons),
            Some(Value::Unsigned(n)) if *n <= JSON_INTEGER_MAX => Some(*n),
            Some(found) => {
                self.reasons.push(format!(
                    "{path}.{name}: expected an integer from 0 to {JSON_INTEGER_MAX}, found {}",
                    found.shown()
                ));
                None
            }
        }
    }

    /// A `t` in whole milliseconds.
    fn seconds(&mut self, value: &Value, path: &str) -> Option<u64> {
        let seconds = match value {
            Value::Unsigned(n) => Some(*n as f64),
            Value::Float(x) if *x >= 0.0 => Some(*x),
            _ => None,
        };
        let Some(seconds) = seconds else {
            let shown = value.shown();
            self.reasons.push(format!(
                "{path}: expected a non-negative number of seconds, found {shown}"
            ));
            return None;
        };
        let ms = match value {
            Value::Unsigned(n) => n.checked_mul(1000).filter(|&ms| ms <= JSON_INTEGER_MAX),
            _ => seconds_to_ms(seconds),
        };
        if ms.is_none() {
            self.reasons.push(format!(
                "{path}: {} s is past {JSON_INTEGER_MAX} ms",
                value.shown()
            ));
        }
        ms
    }
}

/// The checked requests in arrival order (offset, then walk order), each keeping only
/// the ids it adds to the one before it in its context.
fn encode(block_tokens: u64, requests: Vec<FlatRequest<'_>>, subagents: u64) -> SessionRequests {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by_key(|&i| (requests[i].offset_ms, i));
    let contexts = requests.iter().map(|r| r.context + 1).max().unwrap_or(1);
    let mut previous: Vec<&[u64]> = vec![&[]; contexts as usize];
    let mut session = SessionRequests {
        block_tokens,
        subagents,
        contexts,
        ..SessionRequests::default()
    };
    for i in order {
        let request = &requests[i];
        let before = previous[request.context as usize];
        let kept = before
            .iter()
            .zip(request.ids)
            .take_while(|(a, b)| a == b)
            .count();
        let added = &request.ids[kept..];
        session.records.push(RequestRecord {
            offset_ms: request.offset_ms,
            prompt_tokens: request.prompt_tokens,
            decode_tokens: request.decode_tokens,
            k: (i + 1) as u32,
            context: request.context,
            kept_ids: kept as u32,
            added_start: session.added_ids.len() as u32,
            added_len: added.len() as u32,
        });
        session.added_ids.extend_from_slice(added);
        previous[request.context as usize] = request.ids;
        session.subagent_requests += u64::from(request.context != 0);
    }
    let mut distinct = session.added_ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    session.distinct_blocks = distinct.len() as u64;
    session
}
