//! The engines' MessagePack payload as typed values (SPEC.md §13.1).
//!
//! vLLM and SGLang encode one `EventBatch` per ZeroMQ message, with msgspec, in either
//! of two layouts per struct: positional arrays with the tag first, or maps with a
//! `"type"` member. Which one a value uses is told by the value itself, so one decoder
//! reads both engines and every version. A value of a type the engines never write is
//! an error naming its path by meaning (`payload.events[2].block_hashes[0]`), never a
//! skipped event: an unknown *shape* must not import as an empty trace. An unknown
//! event type or field is different, it is a known shape with more in it, and is
//! counted for the report.

use rmpv::Value;

/// The largest payload decoded: 16 MiB holds a batch storing about three million token
/// ids, more than the `scale` profile's longest request. Decoding expands a payload
/// into a tree of about 32 bytes a scalar, so this cap bounds the tree at about half a
/// GiB whatever the line holds.
pub const PAYLOAD_BYTES_MAX: usize = 16 * 1024 * 1024;

/// How deep a payload may nest: a batch, its events, an event, a field, `extra_keys`'
/// entries and what they hold. Deeper is no engine's layout, and the cap keeps the
/// decoder's recursion far from the stack's end.
const DEPTH_MAX: usize = 32;

/// A block hash as the engine published it. A signed integer is kept as the unsigned
/// one with the same 64 bits, so both spellings of one block are one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum BlockHash {
    Int(u64),
    Bytes(Vec<u8>),
}

/// `BlockStored`'s fields that decide whether and how the store is imported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub block_hashes: Vec<BlockHash>,
    pub parent_block_hash: Option<BlockHash>,
    pub token_ids: Vec<u64>,
    pub block_size: u64,
    /// The deprecated numeric adapter id, shown only when there is no `lora_name`.
    pub lora_id: Option<i128>,
    pub medium: Option<String>,
    pub lora_name: Option<String>,
    /// `extra_keys`: one entry per block (nil as `None`), each the block's keys other
    /// than its tokens; empty when the member is absent or nil.
    pub extra_keys: Vec<Option<Vec<ExtraKey>>>,
    pub group_idx: Option<i128>,
    pub kv_cache_spec_kind: Option<String>,
    pub kv_cache_spec_sliding_window: Option<i128>,
    /// Dynamo's hash of each block's tokens, where Dynamo gives it in place of the
    /// tokens (§13.7): the blocks are then keyed by these.
    pub tokens_hashes: Option<Vec<u64>>,
}

/// One key of an `extra_keys` entry, as far as the import tells keys apart (SPEC.md
/// §13.4, *Extra keys*): vLLM publishes an adapter's name and a salt as strings, a
/// multimodal input as an array and prompt embeddings as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraKey {
    Text(String),
    /// Anything but a string: no key of this kind can be recomputed from tokens.
    Other,
}

/// `BlockRemoved`'s fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    pub block_hashes: Vec<BlockHash>,
    pub medium: Option<String>,
    pub group_idx: Option<i128>,
}

/// One event of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// Boxed: a store has many more fields than the other events.
    Stored(Box<Stored>),
    Removed(Removed),
    Cleared,
    /// A tag that is none of the three, kept for the report.
    Unknown(String),
}

/// One decoded `EventBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// `ts` as whole milliseconds since the Unix epoch (SPEC.md §13.4); `None` only
    /// for a Dynamo event that carries no time (§13.7).
    pub time_ms: Option<u64>,
    pub events: Vec<EngineEvent>,
    /// The data-parallel rank; nil or absent is 0.
    pub rank: u64,
    /// Members and elements no table lists, as `Type.name` or `Type[i]`.
    pub unknown_fields: Vec<String>,
}

/// Field names in declaration order, the order of the positional layout.
const BATCH_FIELDS: &[&str] = &["ts", "events", "data_parallel_rank"];
/// SGLang's name for the batch's rank, accepted in the map layout too.
const BATCH_RANK_ALIAS: &str = "attn_dp_rank";
const STORED_FIELDS: &[&str] = &[
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
];
const REMOVED_FIELDS: &[&str] = &["block_hashes", "medium", "group_idx"];

/// The tag member of the map layout: msgspec's default `tag_field`.
const TAG_MEMBER: &str = "type";

/// Decodes one payload, or says what is wrong with it as `payload<path>: reason`.
pub fn decode_batch(payload: &[u8]) -> Result<Batch, String> {
    let mut rest = payload;
    let value = rmpv::decode::read_value_with_max_depth(&mut rest, DEPTH_MAX)
        .map_err(|e| format!("payload: invalid MessagePack: {e}"))?;
    if !rest.is_empty() {
        return Err(format!(
            "payload: {} bytes after the MessagePack value",
            rest.len()
        ));
    }
    // The decoder reads the reserved marker as nil; no encoder writes it.
    if let Some(offset) = reserved_marker_offset(payload) {
        return Err(format!(
            "payload: invalid MessagePack: the reserved byte 0xC1 at byte {offset}"
        ));
    }
    let mut unknown_fields = Vec::new();
    let fields = struct_fields(
        &value,
        "payload",
        "EventBatch",
        BATCH_FIELDS,
        Some(BATCH_RANK_ALIAS),
        &mut unknown_fields,
    )?;
    let ts = fields[0].ok_or("payload: missing field \"ts\"")?;
    let time_ms = time_ms(ts)?;
    let events = fields[1].ok_or("payload: missing field \"events\"")?;
    let events = array(events, "payload.events")?
        .iter()
        .enumerate()
        .map(|(i, event)| decode_event(event, &format!("payload.events[{i}]"), &mut unknown_fields))
        .collect::<Result<Vec<_>, String>>()?;
    let rank =
        optional(fields[2], "payload.data_parallel_rank", integer)?.map_or(Ok(0), |rank| {
            u64::try_from(rank).map_err(|_| {
                format!("payload.data_parallel_rank: expected a rank of at least 0, found {rank}")
            })
        })?;
    Ok(Batch {
        time_ms: Some(time_ms),
        events,
        rank,
        unknown_fields,
    })
}

/// Where the first value marker `0xC1` (MessagePack's "never used") is, walking
/// the values of a payload the decoder has read whole. No stack is needed: each value
/// read adds its elements to the count of values still to read.
fn reserved_marker_offset(payload: &[u8]) -> Option<usize> {
    let (mut at, mut pending) = (0usize, 1u64);
    let length = |at: usize, bytes: usize| -> Option<usize> {
        let field = payload.get(at + 1..at + 1 + bytes)?;
        Some(field.iter().fold(0usize, |n, &b| n << 8 | usize::from(b)))
    };
    while pending > 0 {
        let marker = *payload.get(at)?;
        pending -= 1;
        // (bytes of the header after the marker, bytes of data, elements within)
        let (header, data, elements) = match marker {
            0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => (0, 0, 0),
            0x80..=0x8f => (0, 0, 2 * usize::from(marker & 0x0f)),
            0x90..=0x9f => (0, 0, usize::from(marker & 0x0f)),
            0xa0..=0xbf => (0, usize::from(marker & 0x1f), 0),
            0xc1 => return Some(at),
            0xc4 | 0xd9 => (1, length(at, 1)?, 0),
            0xc5 | 0xda => (2, length(at, 2)?, 0),
            0xc6 | 0xdb => (4, length(at, 4)?, 0),
            0xc7 => (2, length(at, 1)?, 0),
            0xc8 => (3, length(at, 2)?, 0),
            0xc9 => (5, length(at, 4)?, 0),
            0xca => (0, 4, 0),
            0xcb => (0, 8, 0),
            0xcc | 0xd0 => (0, 1, 0),
            0xcd | 0xd1 => (0, 2, 0),
            0xce | 0xd2 => (0, 4, 0),
            0xcf | 0xd3 => (0, 8, 0),
            0xd4..=0xd8 => (1, 1 << (marker - 0xd4), 0),
            0xdc => (2, 0, length(at, 2)?),
            0xdd => (4, 0, length(at, 4)?),
            0xde => (2, 0, 2 * length(at, 2)?),
            0xdf => (4, 0, 2 * length(at, 4)?),
        };
        at = at.checked_add(1 + header + data)?;
        pending = pending.saturating_add(elements as u64);
    }
    None
}

/// `ts` in whole milliseconds: `floor(ts · 1000)` for a float, `ts · 1000` for an
/// integer, from 0 to 2^53 − 1.
fn time_ms(ts: &Value) -> Result<u64, String> {
    let max = crate::input::limits::JSON_INTEGER_MAX;
    let out_of_range =
        |shown: String| format!("payload.ts: expected a time from 0 to {max} ms, found {shown}");
    let seconds = match ts {
        Value::F64(s) => *s,
        Value::F32(s) => f64::from(*s),
        Value::Integer(i) => {
            return i
                .as_u64()
                .and_then(|s| s.checked_mul(1000))
                .filter(|&ms| ms <= max)
                .ok_or_else(|| out_of_range(i.to_string()));
        }
        other => return Err(expected("payload.ts", "a number", other)),
    };
    let ms = (seconds * 1000.0).floor();
    // `max` is exact in an f64 (it is 2^53 - 1), so the comparison is too.
    if ms.is_finite() && (0.0..=max as f64).contains(&ms) {
        Ok(ms as u64)
    } else {
        Err(out_of_range(seconds.to_string()))
    }
}

fn decode_event(
    value: &Value,
    path: &str,
    unknown_fields: &mut Vec<String>,
) -> Result<EngineEvent, String> {
    let tag = tag_of(value, path)?;
    let (names, type_name): (&[&str], &str) = match tag {
        "BlockStored" => (STORED_FIELDS, "BlockStored"),
        "BlockRemoved" => (REMOVED_FIELDS, "BlockRemoved"),
        "AllBlocksCleared" => (&[], "AllBlocksCleared"),
        other => return Ok(EngineEvent::Unknown(other.to_owned())),
    };
    let fields = struct_fields(value, path, type_name, names, None, unknown_fields)?;
    Ok(match type_name {
        "BlockStored" => EngineEvent::Stored(Box::new(stored(&fields, path)?)),
        "BlockRemoved" => EngineEvent::Removed(removed(&fields, path)?),
        _ => EngineEvent::Cleared,
    })
}

/// The tag of an event in either layout.
fn tag_of<'v>(value: &'v Value, path: &str) -> Result<&'v str, String> {
    let tag = match value {
        Value::Array(items) => items.first().ok_or_else(|| {
            format!("{path}: missing field \"{TAG_MEMBER}\" (the empty array has no tag)")
        })?,
        Value::Map(members) => members
            .iter()
            .find(|(name, _)| name.as_str() == Some(TAG_MEMBER))
            .map(|(_, tag)| tag)
            .ok_or_else(|| format!("{path}: missing field \"{TAG_MEMBER}\""))?,
        other => return Err(expected(path, "an array or a map", other)),
    };
    text(tag, &format!("{path}.{TAG_MEMBER}"))
}

/// The fields of a struct in either layout, indexed as `names`; the tag (an event's
/// first element, or its `"type"` member) is skipped. Unknown members and elements
/// past the last name go to `unknown_fields`.
fn struct_fields<'v>(
    value: &'v Value,
    path: &str,
    type_name: &str,
    names: &[&str],
    alias_of_last: Option<&str>,
    unknown_fields: &mut Vec<String>,
) -> Result<Vec<Option<&'v Value>>, String> {
    let tagged = type_name != "EventBatch";
    let mut fields = vec![None; names.len()];
    match value {
        Value::Array(items) => {
            let skip = usize::from(tagged);
            for (i, item) in items.iter().enumerate().skip(skip) {
                match fields.get_mut(i - skip) {
                    Some(field) => *field = Some(item),
                    None => unknown_fields.push(format!("{type_name}[{i}]")),
                }
            }
        }
        Value::Map(members) => {
            for (name, item) in members {
                let name = text(name, &format!("{path} (a member name)"))?;
                if tagged && name == TAG_MEMBER {
                    continue;
                }
                let index = names
                    .iter()
                    .position(|n| *n == name)
                    .or_else(|| (Some(name) == alias_of_last).then(|| names.len() - 1));
                match index {
                    Some(i) if fields[i].is_some() => {
                        return Err(format!("{path}: repeated field \"{name}\""));
                    }
                    Some(i) => fields[i] = Some(item),
                    None => unknown_fields.push(format!("{type_name}.{name}")),
                }
            }
        }
        other => return Err(expected(path, "an array or a map", other)),
    }
    Ok(fields)
}

fn stored(fields: &[Option<&Value>], path: &str) -> Result<Stored, String> {
    let at = |i: usize| format!("{path}.{}", STORED_FIELDS[i]);
    let block_hashes =
        fields[0].ok_or_else(|| format!("{path}: missing field \"block_hashes\""))?;
    let token_ids = match fields[2] {
        None | Some(Value::Nil) => Vec::new(),
        Some(ids) => array(ids, &at(2))?
            .iter()
            .enumerate()
            .map(|(i, id)| token_id(id, &format!("{}[{i}]", at(2))))
            .collect::<Result<_, _>>()?,
    };
    let block_size = optional(fields[3], &at(3), integer)?.unwrap_or(0);
    let block_size = u64::try_from(block_size).map_err(|_| {
        format!(
            "{}: expected a block size of at least 0, found {block_size}",
            at(3)
        )
    })?;
    Ok(Stored {
        block_hashes: hashes(block_hashes, &at(0))?,
        parent_block_hash: optional(fields[1], &at(1), block_hash)?,
        token_ids,
        block_size,
        lora_id: optional(fields[4], &at(4), integer)?,
        medium: optional(fields[5], &at(5), owned_text)?,
        lora_name: optional(fields[6], &at(6), non_empty_text)?,
        extra_keys: optional(fields[7], &at(7), extra_keys)?.unwrap_or_default(),
        group_idx: optional(fields[8], &at(8), integer)?,
        kv_cache_spec_kind: optional(fields[9], &at(9), owned_text)?,
        kv_cache_spec_sliding_window: optional(fields[10], &at(10), integer)?,
        tokens_hashes: None,
    })
}

fn removed(fields: &[Option<&Value>], path: &str) -> Result<Removed, String> {
    let at = |i: usize| format!("{path}.{}", REMOVED_FIELDS[i]);
    let block_hashes =
        fields[0].ok_or_else(|| format!("{path}: missing field \"block_hashes\""))?;
    Ok(Removed {
        block_hashes: hashes(block_hashes, &at(0))?,
        medium: optional(fields[1], &at(1), owned_text)?,
        group_idx: optional(fields[2], &at(2), integer)?,
    })
}

/// Reads a field that may be absent or nil.
fn optional<T>(
    field: Option<&Value>,
    path: &str,
    read: impl Fn(&Value, &str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    match field {
        None | Some(Value::Nil) => Ok(None),
        Some(value) => read(value, path).map(Some),
    }
}

fn array<'v>(value: &'v Value, path: &str) -> Result<&'v [Value], String> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(expected(path, "an array", other)),
    }
}

fn hashes(value: &Value, path: &str) -> Result<Vec<BlockHash>, String> {
    array(value, path)?
        .iter()
        .enumerate()
        .map(|(i, hash)| block_hash(hash, &format!("{path}[{i}]")))
        .collect()
}

fn block_hash(value: &Value, path: &str) -> Result<BlockHash, String> {
    match value {
        Value::Integer(i) => match (i.as_u64(), i.as_i64()) {
            (Some(u), _) => Ok(BlockHash::Int(u)),
            // Two's complement: the signed spelling of the same 64 bits.
            (None, Some(s)) => Ok(BlockHash::Int(s as u64)),
            (None, None) => Err(expected(path, "an integer or bytes", value)),
        },
        Value::Binary(bytes) => Ok(BlockHash::Bytes(bytes.clone())),
        other => Err(expected(path, "an integer or bytes", other)),
    }
}

fn integer(value: &Value, path: &str) -> Result<i128, String> {
    match value {
        Value::Integer(i) => Ok(i
            .as_u64()
            .map(i128::from)
            .or_else(|| i.as_i64().map(i128::from))
            .unwrap_or_default()),
        other => Err(expected(path, "an integer", other)),
    }
}

fn token_id(value: &Value, path: &str) -> Result<u64, String> {
    match value {
        Value::Integer(i) => i
            .as_u64()
            .ok_or_else(|| format!("{path}: expected a token id of at least 0, found {i}")),
        other => Err(expected(path, "an integer", other)),
    }
}

fn text<'v>(value: &'v Value, path: &str) -> Result<&'v str, String> {
    match value {
        Value::String(s) => s
            .as_str()
            .ok_or_else(|| format!("{path}: expected a string, found a string that is not UTF-8")),
        other => Err(expected(path, "a string", other)),
    }
}

/// An adapter's name: empty, it would name no adapter in the trace.
fn non_empty_text(value: &Value, path: &str) -> Result<String, String> {
    match text(value, path)? {
        "" => Err(format!(
            "{path}: expected a non-empty string, found an empty string"
        )),
        name => Ok(name.to_owned()),
    }
}

fn owned_text(value: &Value, path: &str) -> Result<String, String> {
    text(value, path).map(str::to_owned)
}

/// `extra_keys`: an array with one entry per block, each nil or an array of keys.
fn extra_keys(value: &Value, path: &str) -> Result<Vec<Option<Vec<ExtraKey>>>, String> {
    let entries = array(value, path)?;
    let entry = |(i, entry): (usize, &Value)| match entry {
        Value::Nil => Ok(None),
        Value::Array(keys) => Ok(Some(keys.iter().map(extra_key).collect())),
        other => Err(expected(&format!("{path}[{i}]"), "nil or an array", other)),
    };
    entries.iter().enumerate().map(entry).collect()
}

fn extra_key(key: &Value) -> ExtraKey {
    match key.as_str() {
        Some(text) => ExtraKey::Text(text.to_owned()),
        None => ExtraKey::Other,
    }
}

fn expected(path: &str, what: &str, found: &Value) -> String {
    format!("{path}: expected {what}, found {}", kind(found))
}

/// A value's kind, as errors name it: never the value itself, which may be long or
/// not text.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Boolean(_) => "a boolean",
        Value::Integer(_) => "an integer",
        Value::F32(_) | Value::F64(_) => "a float",
        Value::String(_) => "a string",
        Value::Binary(_) => "bytes",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        Value::Ext(..) => "an extension",
    }
}
