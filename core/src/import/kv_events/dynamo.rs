//! NVIDIA Dynamo's `RouterEvent`, one JSON object a line, as engine messages (SPEC.md
//! §13.7).
//!
//! Dynamo's router hears every engine through one event type (`dynamo-kv-router`
//! 1.6.1, `protocols.rs`): a worker id, a storage tier and a `KvCacheEvent` with an
//! `event_id`, a data-parallel rank and its data, a store, a removal or a clear. Each
//! line becomes one message of the conversion the vLLM import uses, with `event_id` as
//! its sequence number, so gaps and restarts mean the same. Dynamo's stores carry no
//! tokens, only Dynamo's hash of each block's tokens, so blocks are keyed by that hash
//! ([`super::Keying::DynamoTokensHash`]). The line is read as a JSON tree, so that an
//! unknown member is counted by its path rather than refused, and a value of the
//! wrong type is refused with its path.

use super::lines::Message;
use super::wire::{Batch, BlockHash, EngineEvent, ExtraKey, Removed, Stored};
use crate::input::limits::JSON_INTEGER_MAX;
use serde_json::{Map, Value};

/// The members of each object, as Dynamo 1.6.1 declares them; `received_ms` is
/// kvroute's, the time a recorder heard the line (a `RouterEvent` carries none).
const ROUTER_EVENT: &[&str] = &[
    "worker_id",
    "storage_tier",
    "event",
    "received_ms",
    "residency_domain",
    "state_source",
    "session_id",
];
const KV_CACHE_EVENT: &[&str] = &["event_id", "data", "dp_rank"];
const STORE_DATA: &[&str] = &["parent_hash", "start_position", "blocks"];
const STORED_BLOCK: &[&str] = &["block_hash", "tokens_hash", "mm_extra_info"];
const REMOVE_DATA: &[&str] = &["block_hashes"];

/// The storage tier of the GPU's own cache (`StorageTier::Device`, the default).
const DEVICE_TIER: &str = "device";

/// Reads Dynamo lines one at a time, carrying the last time heard forward to lines
/// that have none.
pub struct DynamoReader {
    block_tokens: u64,
    last_time_ms: Option<u64>,
}

impl DynamoReader {
    /// Stores are taken to hold blocks of `block_tokens` tokens: Dynamo's events do
    /// not say.
    pub fn new(block_tokens: u64) -> Self {
        DynamoReader {
            block_tokens,
            last_time_ms: None,
        }
    }

    /// The message one line is, or why it is not one.
    pub fn line(&mut self, line: &[u8]) -> Result<(Message, Batch), String> {
        let value: Value =
            serde_json::from_slice(line).map_err(|e| format!("invalid JSON: {e}"))?;
        // The tree above keeps a repeated member's last value; the line is refused
        // instead, as a capture line and `join` refuse one (SPEC.md §13.7).
        if let Ok(node) = crate::input::json::parse_node(line) {
            if let Some(reason) = repeated_member(&node, "") {
                return Err(reason);
            }
        }
        let mut unknown_fields = Vec::new();
        let top = object(
            &value,
            "$",
            "RouterEvent",
            ROUTER_EVENT,
            &mut unknown_fields,
        )?;
        let worker_id = integer(required(top, "worker_id", "$")?, "worker_id", u64::MAX)?;
        if let Some(received) = top.get("received_ms") {
            self.last_time_ms = Some(integer(received, "received_ms", JSON_INTEGER_MAX)?);
        }
        let tier = match top.get("storage_tier") {
            None => DEVICE_TIER,
            Some(tier) => tier
                .as_str()
                .ok_or_else(|| expected("storage_tier", "a string", tier))?,
        };
        let event = object(
            required(top, "event", "$")?,
            "event",
            "KvCacheEvent",
            KV_CACHE_EVENT,
            &mut unknown_fields,
        )?;
        let event_id = integer(
            required(event, "event_id", "event")?,
            "event.event_id",
            u64::MAX,
        )?;
        let rank = match event.get("dp_rank") {
            None => 0,
            Some(rank) => integer(rank, "event.dp_rank", u64::MAX)?,
        };
        let data = required(event, "data", "event")?;
        let engine_event = self.data(data, tier, &mut unknown_fields)?;
        let message = Message {
            endpoint: "dynamo".to_owned(),
            topic: worker_id.to_string(),
            seq: event_id,
            payload: Vec::new(),
        };
        let batch = Batch {
            time_ms: self.last_time_ms,
            events: vec![engine_event],
            rank,
            unknown_fields,
        };
        Ok((message, batch))
    }

    /// `"cleared"`, `{"stored": …}` or `{"removed": …}`; another single member is an
    /// event of unknown type.
    fn data(
        &self,
        data: &Value,
        tier: &str,
        unknown_fields: &mut Vec<String>,
    ) -> Result<EngineEvent, String> {
        let path = "event.data";
        let medium = (tier != DEVICE_TIER).then(|| tier.to_owned());
        let (kind, body) = match data {
            Value::String(kind) if kind == "cleared" => return Ok(EngineEvent::Cleared),
            Value::String(kind) => return Ok(EngineEvent::Unknown(kind.clone())),
            Value::Object(members) if members.len() == 1 => {
                members.iter().next().expect("one member")
            }
            other => {
                return Err(expected(
                    path,
                    "\"cleared\" or an object of one member",
                    other,
                ));
            }
        };
        let at = format!("{path}.{kind}");
        match kind.as_str() {
            "stored" => {
                let stored = object(body, &at, "KvCacheStoreData", STORE_DATA, unknown_fields)?;
                self.stored(stored, &at, medium, unknown_fields)
            }
            "removed" => {
                let removed = object(body, &at, "KvCacheRemoveData", REMOVE_DATA, unknown_fields)?;
                let hashes = array(
                    required(removed, "block_hashes", &at)?,
                    &format!("{at}.block_hashes"),
                )?;
                Ok(EngineEvent::Removed(Removed {
                    block_hashes: hashes
                        .iter()
                        .enumerate()
                        .map(|(i, h)| hash(h, &format!("{at}.block_hashes[{i}]")))
                        .collect::<Result<_, _>>()?,
                    medium,
                    group_idx: None,
                }))
            }
            other => Ok(EngineEvent::Unknown(other.to_owned())),
        }
    }

    fn stored(
        &self,
        stored: &Map<String, Value>,
        at: &str,
        medium: Option<String>,
        unknown_fields: &mut Vec<String>,
    ) -> Result<EngineEvent, String> {
        let parent_block_hash = match stored.get("parent_hash") {
            None | Some(Value::Null) => None,
            Some(parent) => Some(hash(parent, &format!("{at}.parent_hash"))?),
        };
        let blocks = array(required(stored, "blocks", at)?, &format!("{at}.blocks"))?;
        let mut block_hashes = Vec::with_capacity(blocks.len());
        let mut tokens_hashes = Vec::with_capacity(blocks.len());
        // A multimodal block: its key is more than its tokens' hash.
        let mut extra_keys = Vec::with_capacity(blocks.len());
        for (i, block) in blocks.iter().enumerate() {
            let path = format!("{at}.blocks[{i}]");
            let block = object(
                block,
                &path,
                "KvCacheStoredBlockData",
                STORED_BLOCK,
                unknown_fields,
            )?;
            block_hashes.push(hash(
                required(block, "block_hash", &path)?,
                &format!("{path}.block_hash"),
            )?);
            let tokens = required(block, "tokens_hash", &path)?;
            tokens_hashes.push(integer(tokens, &format!("{path}.tokens_hash"), u64::MAX)?);
            let multimodal = block.get("mm_extra_info").is_some_and(|m| !m.is_null());
            extra_keys.push(multimodal.then(|| vec![ExtraKey::Other]));
        }
        Ok(EngineEvent::Stored(Box::new(Stored {
            block_hashes,
            parent_block_hash,
            block_size: self.block_tokens,
            medium,
            extra_keys,
            tokens_hashes: Some(tokens_hashes),
            ..Stored::default()
        })))
    }
}

/// The first member written twice in one object, depth first, as
/// `<member path>: repeated member "<name>"`; `path` is the value's own (empty for
/// the line).
fn repeated_member(node: &crate::input::json::Node, path: &str) -> Option<String> {
    use crate::input::json::NodeOf;
    match node {
        NodeOf::Object(members) => {
            let mut seen = std::collections::BTreeSet::new();
            members.iter().find_map(|(name, value)| {
                let member = match path {
                    "" => name.to_string(),
                    _ => format!("{path}.{name}"),
                };
                if !seen.insert(name.as_ref()) {
                    let quoted = crate::input::json::quote_str(name);
                    return Some(format!("{member}: repeated member {quoted}"));
                }
                repeated_member(value, &member)
            })
        }
        NodeOf::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| repeated_member(item, &format!("{path}[{i}]"))),
        _ => None,
    }
}

/// `value` as an object whose members `names` lists; others are counted as
/// `<type_name>.<member>`.
fn object<'v>(
    value: &'v Value,
    path: &str,
    type_name: &str,
    names: &[&str],
    unknown_fields: &mut Vec<String>,
) -> Result<&'v Map<String, Value>, String> {
    let members = value
        .as_object()
        .ok_or_else(|| expected(path, "an object", value))?;
    for name in members.keys() {
        if !names.contains(&name.as_str()) {
            unknown_fields.push(format!("{type_name}.{name}"));
        }
    }
    Ok(members)
}

fn required<'v>(
    members: &'v Map<String, Value>,
    name: &str,
    path: &str,
) -> Result<&'v Value, String> {
    members
        .get(name)
        .ok_or_else(|| format!("{path}: missing field \"{name}\""))
}

fn array<'v>(value: &'v Value, path: &str) -> Result<&'v [Value], String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| expected(path, "an array", value))
}

/// A non-negative integer of at most `max`.
fn integer(value: &Value, path: &str, max: u64) -> Result<u64, String> {
    value
        .as_u64()
        .filter(|&n| n <= max)
        .ok_or_else(|| expected(path, &format!("an integer from 0 to {max}"), value))
}

/// Dynamo's block hashes are unsigned 64-bit integers.
fn hash(value: &Value, path: &str) -> Result<BlockHash, String> {
    integer(value, path, u64::MAX).map(BlockHash::Int)
}

fn expected(path: &str, what: &str, found: &Value) -> String {
    let kind = match found {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "an integer",
        Value::Number(n) if n.is_i64() => "a negative integer",
        Value::Number(_) => "a number that is not an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    format!("{path}: expected {what}, found {kind}")
}
