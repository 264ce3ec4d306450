//! The mapping from a trace's keys to an engine's wire (SPEC.md §17.1): each key's
//! block hash and token ids, its chain parent, and the vLLM `KVEventBatch` MessagePack
//! a batch of events is written as.

use rmpv::Value as Pack;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The tokens of every block `publish` writes and a router is told (SPEC.md §17.1).
pub const BLOCK_TOKENS: u64 = 16;

/// A cache namespace: what a key is scoped by (SPEC.md §3).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Namespace {
    pub tenant: String,
    pub model: String,
    pub adapter: String,
}

impl Namespace {
    /// The namespace members of a store, evict, cache entry or request.
    pub fn of(value: &Value) -> Namespace {
        let member = |name: &str| value[name].as_str().unwrap_or("").to_string();
        Namespace {
            tenant: member("tenant"),
            model: member("model"),
            adapter: member("adapter"),
        }
    }
}

/// Each `(namespace, key)`'s chain parent: the key before it in the first request
/// prefix that names it (SPEC.md §12); keys no prefix names after another have none.
pub type Parents = BTreeMap<(Namespace, String), String>;

/// One engine event, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireEvent {
    Stored {
        namespace: Namespace,
        /// The run's keys, consecutive in their chain.
        keys: Vec<String>,
        /// The chain parent of the first key.
        parent: Option<String>,
        medium: &'static str,
    },
    Removed {
        namespace: Namespace,
        keys: Vec<String>,
    },
    Cleared,
}

/// The chain parents of every key the trace's requests name.
pub fn chain_parents(trace: &Value) -> Parents {
    let mut parents = Parents::new();
    let events = trace["events"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut requests: Vec<&Value> = events.iter().filter(|e| e["type"] == "request").collect();
    requests.sort_by_key(|e| (e["tick"].as_u64(), e["seq"].as_u64()));
    for request in requests {
        let namespace = Namespace::of(request);
        let keys: Vec<&str> = request["prefix"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["key"].as_str())
            .collect();
        for pair in keys.windows(2) {
            parents
                .entry((namespace.clone(), pair[1].to_string()))
                .or_insert_with(|| pair[0].to_string());
        }
    }
    parents
}

/// A store of `keys` (a run of one chain) on the `medium` tier.
pub fn stored(
    namespace: &Namespace,
    keys: &[String],
    parents: &Parents,
    medium: &'static str,
) -> WireEvent {
    let parent = keys
        .first()
        .and_then(|k| parents.get(&(namespace.clone(), k.clone())))
        .cloned();
    WireEvent::Stored {
        namespace: namespace.clone(),
        keys: keys.to_vec(),
        parent,
        medium,
    }
}

/// A trace's cache event as engine events: a store is one `BlockStored` per run of
/// segments consecutive in their chain (a 0-token segment a `BlockRemoved`), an evict
/// one `BlockRemoved`, a clear `AllBlocksCleared`.
pub fn cache_event(event: &Value, parents: &Parents) -> Result<Vec<WireEvent>, String> {
    let namespace = Namespace::of(event);
    match event["op"].as_str() {
        Some("clear") => Ok(vec![WireEvent::Cleared]),
        Some("evict") => {
            let keys = event["keys"].as_array().into_iter().flatten();
            let keys: Vec<String> = keys
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect();
            Ok(vec![WireEvent::Removed { namespace, keys }])
        }
        Some("store") => {
            let mut out = Vec::new();
            let mut run: Vec<String> = Vec::new();
            let flush = |run: &mut Vec<String>, out: &mut Vec<WireEvent>| {
                if !run.is_empty() {
                    out.push(stored(&namespace, run, parents, "GPU"));
                    run.clear();
                }
            };
            for segment in event["segments"].as_array().into_iter().flatten() {
                let key = segment["key"].as_str().unwrap_or("").to_string();
                match segment["tokens"].as_u64() {
                    Some(0) => {
                        flush(&mut run, &mut out);
                        let keys = vec![key];
                        out.push(WireEvent::Removed {
                            namespace: namespace.clone(),
                            keys,
                        });
                    }
                    Some(BLOCK_TOKENS) => {
                        let follows = run.last().is_some_and(|last| {
                            parents.get(&(namespace.clone(), key.clone())) == Some(last)
                        });
                        if !follows {
                            flush(&mut run, &mut out);
                        }
                        run.push(key);
                    }
                    other => {
                        return Err(format!(
                            "segment {key:?} has {} tokens, not one block of {BLOCK_TOKENS}",
                            other.map_or("no".to_string(), |t| t.to_string())
                        ))
                    }
                }
            }
            flush(&mut run, &mut out);
            Ok(out)
        }
        _ => Err("not a cache event".to_string()),
    }
}

fn digest(parts: &[&str]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hasher.finalize().into()
}

/// The engine's block hash of a key: the first 8 bytes of SHA-256 over the namespace
/// and key, with the top bit cleared so that it reads the same signed or unsigned.
pub fn block_hash(namespace: &Namespace, key: &str) -> u64 {
    let d = digest(&[
        "kvroute-block",
        &namespace.tenant,
        &namespace.model,
        &namespace.adapter,
        key,
    ]);
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes")) & (u64::MAX >> 1)
}

/// The lowest token id a key's block carries; ids below it are the request tails'.
pub const KEY_TOKEN_BASE: u32 = 1_000;

/// A key's [`BLOCK_TOKENS`] token ids, a pure function of the key alone (the tenant is
/// the salt and the adapter the LoRA name, as engines fold them): each from 1,000 to
/// 1,000,999,999, from SHA-256 of the key and the token's position.
pub fn key_token_ids(key: &str) -> Vec<u32> {
    (0..BLOCK_TOKENS)
        .map(|i| {
            let d = digest(&["kvroute-token", key, &i.to_string()]);
            let x = u32::from_be_bytes(d[..4].try_into().expect("4 bytes"));
            KEY_TOKEN_BASE + x % 1_000_000_000
        })
        .collect()
}

/// A request's token ids: its prefix keys' blocks in order, then up to
/// `prompt_tokens` ids below [`KEY_TOKEN_BASE`], which no block holds.
pub fn request_token_ids(keys: &[String], prompt_tokens: u64) -> Vec<u64> {
    let mut ids: Vec<u64> = keys
        .iter()
        .flat_map(|k| key_token_ids(k))
        .map(u64::from)
        .collect();
    let mut filler = 0u64;
    while (ids.len() as u64) < prompt_tokens {
        ids.push(1 + filler % (u64::from(KEY_TOKEN_BASE) - 1));
        filler += 1;
    }
    ids
}

/// How a tenant's cache salt reaches the wire. vLLM 0.33.0 has no salt member: the
/// salt is the last item of the first block's `extra_keys` entry, for a chain's root
/// block only. Dynamo reads a salt there only when its own vLLM worker tagged it
/// (`dynamo-cache-salt:<tenant>`), which is the salt that worker hands vLLM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SaltForm {
    /// The tenant itself, as a client's `cache_salt` reaches vLLM.
    #[default]
    Vllm,
    /// `dynamo-cache-salt:<tenant>`, as Dynamo's vLLM worker sets it.
    DynamoTagged,
    /// No salt at all: engines that serve one tenant publish none.
    None,
}

/// One `KVEventBatch` as vLLM 0.33.0 writes it to a ZeroMQ subscriber: the array
/// `[ts, events, data_parallel_rank]`, each event a tagged map. `block_size`, when
/// given, is the size a worker wrongly publishes at: its token ids are cut into blocks
/// of it, one hash per whole block (the hash of the block's last key).
pub fn batch(tick: u64, events: &[WireEvent], block_size: Option<u64>, salt: SaltForm) -> Vec<u8> {
    let events: Vec<Pack> = events.iter().map(|e| event(e, block_size, salt)).collect();
    let ts = tick as f64 / 1000.0;
    let value = Pack::Array(vec![Pack::F64(ts), Pack::Array(events), Pack::from(0)]);
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &value).expect("writing to a Vec cannot fail");
    bytes
}

fn map(members: Vec<(&str, Pack)>) -> Pack {
    Pack::Map(
        members
            .into_iter()
            .map(|(k, v)| (Pack::from(k), v))
            .collect(),
    )
}

fn hashes(namespace: &Namespace, keys: &[String]) -> Pack {
    Pack::Array(
        keys.iter()
            .map(|k| Pack::from(block_hash(namespace, k)))
            .collect(),
    )
}

/// vLLM's `extra_keys` of a stored run: per block, the LoRA name (when there is an
/// adapter), then the salt on a chain's root block; `None` for a block with neither,
/// and no member at all when no block has any.
fn extra_keys(namespace: &Namespace, blocks: usize, at_root: bool, salt: SaltForm) -> Option<Pack> {
    let lora =
        (!matches!(namespace.adapter.as_str(), "base" | "")).then(|| namespace.adapter.clone());
    let salted = match salt {
        _ if namespace.tenant.is_empty() => None,
        SaltForm::Vllm => Some(namespace.tenant.clone()),
        SaltForm::DynamoTagged => Some(format!("dynamo-cache-salt:{}", namespace.tenant)),
        SaltForm::None => None,
    };
    let entries: Vec<Pack> = (0..blocks)
        .map(|i| {
            let items: Vec<Pack> = lora
                .iter()
                .chain(salted.iter().filter(|_| i == 0 && at_root))
                .map(|s| Pack::from(s.as_str()))
                .collect();
            if items.is_empty() {
                Pack::Nil
            } else {
                Pack::Array(items)
            }
        })
        .collect();
    entries
        .iter()
        .any(|e| !e.is_nil())
        .then_some(Pack::Array(entries))
}

fn event(event: &WireEvent, block_size: Option<u64>, salt: SaltForm) -> Pack {
    match event {
        WireEvent::Cleared => map(vec![("type", Pack::from("AllBlocksCleared"))]),
        WireEvent::Removed { namespace, keys } => map(vec![
            ("type", Pack::from("BlockRemoved")),
            ("block_hashes", hashes(namespace, keys)),
            ("medium", Pack::from("GPU")),
        ]),
        WireEvent::Stored {
            namespace,
            keys,
            parent,
            medium,
        } => {
            let size = block_size.unwrap_or(BLOCK_TOKENS);
            let per_block = (size / BLOCK_TOKENS).max(1) as usize;
            let whole = keys.len() / per_block * per_block;
            let hashed: Vec<String> = keys[..whole]
                .iter()
                .skip(per_block - 1)
                .step_by(per_block)
                .cloned()
                .collect();
            let tokens: Vec<Pack> = keys[..whole]
                .iter()
                .flat_map(|k| key_token_ids(k))
                .map(Pack::from)
                .collect();
            let extra = extra_keys(namespace, hashed.len(), parent.is_none(), salt);
            let parent = parent
                .as_ref()
                .map_or(Pack::Nil, |p| Pack::from(block_hash(namespace, p)));
            let lora = match namespace.adapter.as_str() {
                "base" | "" => Pack::Nil,
                name => Pack::from(name),
            };
            let mut members = vec![
                ("type", Pack::from("BlockStored")),
                ("block_hashes", hashes(namespace, &hashed)),
                ("parent_block_hash", parent),
                ("token_ids", Pack::Array(tokens)),
                ("block_size", Pack::from(size)),
                ("lora_id", Pack::Nil),
                ("medium", Pack::from(*medium)),
                ("lora_name", lora),
            ];
            if let Some(extra) = extra {
                members.push(("extra_keys", extra));
            }
            map(members)
        }
    }
}
