//! Dynamo's indexers as a `kvroute-peer/1` peer (SPEC.md §15): the
//! `kvroute-peer-dynamo` adapter's logic.
//!
//! The in-process comparison ([`crate::compare`]) maps a whole trace onto Dynamo's hash
//! chains before it starts, learning every key's position from every request. A peer
//! gets events one at a time, so [`StreamChains`] places a key at its first occurrence
//! instead (SPEC.md §15.2): after the key before it in a request prefix or in a store's
//! segments, at the root when it comes first there or in the fleet's initial caches
//! (an eviction places nothing).
//! From there the mapping is §12's, through the same [`DynamoBackend`]: one `Stored`
//! per run consecutive in its chain ([`chain_ops`]), `Removed` for evictions and
//! 0-token segments, `Cleared`, and a request's leading whole blocks asked with
//! `find_matches(early_exit = false)`. The hello offers `reset`: a new indexer and new
//! chains per trace, so one process serves a whole `kvroute peer sweep`.

use crate::chains::{local_block_hash, namespace_seed, sequence_hash};
use crate::dynamo::{DynamoBackend, DynamoKind};
use dynamo_kv_router::protocols::{
    ExternalSequenceBlockHash, KvCacheEventData, KvCacheRemoveData, KvCacheStoreData,
    KvCacheStoredBlockData, LocalBlockHash,
};
use kvroute_core::input::Namespace;
use kvroute_core::route::{KeyId, NsId, Op, Seg};
use kvroute_peer_core::chains::{chain_ops, ChainOp};
use kvroute_peer_core::classify::full_block_count;
use kvroute_peer_core::protocol::PROTOCOL;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, Write};

/// The version of `dynamo-kv-router` this binary was linked with, read from the
/// lockfile at build time (`build.rs`), not typed in.
pub const DYNAMO_VERSION: &str = env!("KVROUTE_DYNAMO_KV_ROUTER_VERSION");

#[derive(Debug, Clone, Copy)]
struct StreamBlock {
    parent: Option<KeyId>,
    local_hash: LocalBlockHash,
    sequence_hash: ExternalSequenceBlockHash,
}

/// Keys placed at their first occurrence, hashed as Dynamo hashes them. A key id names
/// a `(namespace, key)` pair; lookups only, never iterated.
#[derive(Default)]
pub struct StreamChains {
    namespaces: HashMap<(String, String, String), (NsId, u64)>,
    keys: HashMap<(NsId, String), KeyId>,
    /// Keys an eviction named before anything placed them: a root block each, for the
    /// `Removed` to name (no worker holds it), not their place (SPEC.md §15.2).
    unplaced: HashMap<(NsId, String), KeyId>,
    blocks: Vec<StreamBlock>,
}

impl StreamChains {
    fn namespace(&mut self, tenant: &str, model: &str, adapter: &str) -> NsId {
        let next = self.namespaces.len() as NsId;
        self.namespaces
            .entry((tenant.into(), model.into(), adapter.into()))
            .or_insert_with(|| {
                let seed = namespace_seed(&Namespace {
                    tenant: tenant.into(),
                    model: model.into(),
                    adapter: adapter.into(),
                });
                (next, seed)
            })
            .0
    }

    fn seed(&self, ns: NsId) -> u64 {
        self.namespaces
            .values()
            .find(|(id, _)| *id == ns)
            .map(|&(_, seed)| seed)
            .expect("a namespace is registered before its keys")
    }

    /// The id of `key` in `ns`, placed after `parent` if this is its first occurrence.
    fn key(&mut self, ns: NsId, seed: u64, key: &str, parent: Option<KeyId>) -> KeyId {
        if let Some(&id) = self.keys.get(&(ns, key.to_string())) {
            return id;
        }
        let id = self.blocks.len() as KeyId;
        let local_hash = local_block_hash(key, seed);
        let parent_hash = parent.map(|p| self.blocks[p as usize].sequence_hash);
        self.blocks.push(StreamBlock {
            parent,
            local_hash,
            sequence_hash: sequence_hash(parent_hash, local_hash),
        });
        self.keys.insert((ns, key.to_string()), id);
        id
    }

    /// The id an eviction names `key` in `ns` by: its placed id, else a root block
    /// that places nothing (an eviction is no occurrence that fixes a position).
    fn evicted_key(&mut self, ns: NsId, seed: u64, key: &str) -> KeyId {
        if let Some(&id) = self.keys.get(&(ns, key.to_string())) {
            return id;
        }
        if let Some(&id) = self.unplaced.get(&(ns, key.to_string())) {
            return id;
        }
        let id = self.blocks.len() as KeyId;
        let local_hash = local_block_hash(key, seed);
        self.blocks.push(StreamBlock {
            parent: None,
            local_hash,
            sequence_hash: sequence_hash(None, local_hash),
        });
        self.unplaced.insert((ns, key.to_string()), id);
        id
    }

    fn parent(&self, key: KeyId) -> Option<KeyId> {
        self.blocks[key as usize].parent
    }

    fn dynamo_event(&self, op: &ChainOp) -> KvCacheEventData {
        match op {
            ChainOp::Stored { run, .. } => KvCacheEventData::Stored(KvCacheStoreData {
                parent_hash: self
                    .parent(run[0].key)
                    .map(|p| self.blocks[p as usize].sequence_hash),
                start_position: None,
                blocks: run
                    .iter()
                    .map(|s| {
                        let block = self.blocks[s.key as usize];
                        KvCacheStoredBlockData {
                            block_hash: block.sequence_hash,
                            tokens_hash: block.local_hash,
                            mm_extra_info: None,
                        }
                    })
                    .collect(),
            }),
            ChainOp::Removed { keys, .. } => KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: keys
                    .iter()
                    .map(|&k| self.blocks[k as usize].sequence_hash)
                    .collect(),
            }),
            ChainOp::Cleared => KvCacheEventData::Cleared,
        }
    }
}

/// A protocol error the adapter reports to kvroute (message 5) before exiting.
pub struct AdapterError(pub String);

fn field<'v>(v: &'v Value, path: &str, name: &str) -> Result<&'v Value, AdapterError> {
    v.get(name)
        .ok_or_else(|| AdapterError(format!("{path}: missing member \"{name}\"")))
}

fn text<'v>(v: &'v Value, path: &str, name: &str) -> Result<&'v str, AdapterError> {
    field(v, path, name)?
        .as_str()
        .ok_or_else(|| AdapterError(format!("{path}.{name}: expected a string")))
}

fn number(v: &Value, path: &str, name: &str) -> Result<u64, AdapterError> {
    field(v, path, name)?
        .as_u64()
        .ok_or_else(|| AdapterError(format!("{path}.{name}: expected an integer")))
}

fn array<'v>(v: &'v Value, path: &str, name: &str) -> Result<&'v Vec<Value>, AdapterError> {
    field(v, path, name)?
        .as_array()
        .ok_or_else(|| AdapterError(format!("{path}.{name}: expected an array")))
}

/// The adapter's state between messages.
pub struct DynamoPeer {
    kind: DynamoKind,
    backend: DynamoBackend,
    chains: StreamChains,
    block_tokens: u64,
    workers: HashMap<String, u32>,
    worker_ids: Vec<String>,
    query: Vec<LocalBlockHash>,
}

impl DynamoPeer {
    pub fn new(kind: DynamoKind) -> Self {
        DynamoPeer {
            kind,
            backend: DynamoBackend::new(kind),
            chains: StreamChains::default(),
            block_tokens: 16,
            workers: HashMap::new(),
            worker_ids: Vec::new(),
            query: Vec::new(),
        }
    }

    /// The peer name the hello gives.
    pub fn name(&self) -> String {
        format!("dynamo_{}", self.kind.name())
    }

    fn namespace(&mut self, v: &Value, path: &str) -> Result<(NsId, u64), AdapterError> {
        let ns = self.chains.namespace(
            text(v, path, "tenant")?,
            text(v, path, "model")?,
            text(v, path, "adapter")?,
        );
        Ok((ns, self.chains.seed(ns)))
    }

    fn worker(&self, v: &Value, path: &str) -> Result<u32, AdapterError> {
        let id = text(v, path, "worker")?;
        self.workers
            .get(id)
            .copied()
            .ok_or_else(|| AdapterError(format!("{path}.worker: unknown worker \"{id}\"")))
    }

    /// Segments of a store or a request prefix, each key placed after the one before it
    /// on its first occurrence.
    fn segments(
        &mut self,
        v: &Value,
        path: &str,
        name: &str,
        ns: NsId,
        seed: u64,
    ) -> Result<Vec<Seg>, AdapterError> {
        let mut out = Vec::new();
        let mut parent = None;
        for (i, s) in array(v, path, name)?.iter().enumerate() {
            let at = format!("{path}.{name}[{i}]");
            let key = self.chains.key(ns, seed, text(s, &at, "key")?, parent);
            out.push(Seg {
                key,
                tokens: number(s, &at, "tokens")?,
            });
            parent = Some(key);
        }
        Ok(out)
    }

    fn apply(&mut self, worker: u32, op: &Op) {
        let chains = &self.chains;
        for chain_op in chain_ops(|_, key| chains.parent(key), op) {
            // A rejected store or removal is Dynamo's own behaviour, which is what is
            // being compared: it is not an error of the protocol.
            let _ = self.backend.apply(worker, chains.dynamo_event(&chain_op));
        }
    }

    /// Answers one message; `None` for messages that get no answer.
    pub fn handle(&mut self, message: &Value) -> Result<Option<String>, AdapterError> {
        match text(message, "$", "type")? {
            "hello" => {
                if text(message, "$", "protocol")? != PROTOCOL {
                    return Err(AdapterError(format!(
                        "hello: this adapter speaks {PROTOCOL} only"
                    )));
                }
                self.block_tokens = number(message, "$", "block_tokens")?;
                Ok(Some(
                    serde_json::json!({
                        "type": "hello", "protocol": PROTOCOL, "peer": self.name(),
                        "version": DYNAMO_VERSION, "answers": ["reuse"], "reset": true,
                    })
                    .to_string(),
                ))
            }
            "fleet" => {
                let workers = array(message, "$", "workers")?;
                for (i, w) in workers.iter().enumerate() {
                    let id = text(w, &format!("$.workers[{i}]"), "id")?;
                    self.workers.insert(id.to_string(), i as u32);
                    self.worker_ids.push(id.to_string());
                }
                for (i, w) in workers.iter().enumerate() {
                    for (j, entry) in array(w, &format!("$.workers[{i}]"), "cache")?
                        .iter()
                        .enumerate()
                    {
                        let path = format!("$.workers[{i}].cache[{j}]");
                        if number(entry, &path, "tokens")? == 0 {
                            continue;
                        }
                        let (ns, seed) = self.namespace(entry, &path)?;
                        let key = self.chains.key(ns, seed, text(entry, &path, "key")?, None);
                        let op = Op::Store {
                            ns,
                            segments: vec![Seg { key, tokens: 1 }],
                        };
                        self.apply(i as u32, &op);
                    }
                }
                Ok(Some(r#"{"type":"ready"}"#.into()))
            }
            "event" => self.event(field(message, "$", "event")?),
            "reset" => {
                // A new indexer and new chains: nothing of the last trace (its blocks,
                // its keys' positions, its workers) can reach the next one. The hello's
                // block size stays, as SPEC.md §15.2 says.
                *self = DynamoPeer {
                    block_tokens: self.block_tokens,
                    ..DynamoPeer::new(self.kind)
                };
                Ok(Some(r#"{"type":"ready"}"#.into()))
            }
            "end" => Ok(Some(r#"{"type":"bye"}"#.into())),
            other => Err(AdapterError(format!(
                "$.type: unknown message type \"{other}\""
            ))),
        }
    }

    fn event(&mut self, e: &Value) -> Result<Option<String>, AdapterError> {
        let path = "$.event";
        match text(e, path, "type")? {
            "load" => Ok(None),
            "cache" => {
                let worker = self.worker(e, path)?;
                let op = match text(e, path, "op")? {
                    "store" => {
                        let (ns, seed) = self.namespace(e, path)?;
                        let segments = self.segments(e, path, "segments", ns, seed)?;
                        Op::Store { ns, segments }
                    }
                    "evict" => {
                        let (ns, seed) = self.namespace(e, path)?;
                        let mut keys = Vec::new();
                        for (i, k) in array(e, path, "keys")?.iter().enumerate() {
                            let key = k.as_str().ok_or_else(|| {
                                AdapterError(format!("{path}.keys[{i}]: expected a string"))
                            })?;
                            keys.push(self.chains.evicted_key(ns, seed, key));
                        }
                        Op::Evict { ns, keys }
                    }
                    "clear" => Op::Clear,
                    other => {
                        return Err(AdapterError(format!("{path}.op: unknown op \"{other}\"")))
                    }
                };
                self.apply(worker, &op);
                Ok(None)
            }
            "request" => {
                let seq = number(e, path, "seq")?;
                let prompt_tokens = number(e, path, "prompt_tokens")?;
                let (ns, seed) = self.namespace(e, path)?;
                let prefix = self.segments(e, path, "prefix", ns, seed)?;
                let full = full_block_count(&prefix, self.block_tokens);
                self.query.clear();
                self.query.extend(
                    prefix[..full]
                        .iter()
                        .map(|s| self.chains.blocks[s.key as usize].local_hash),
                );
                let mut reuse: Vec<(u32, u64)> = Vec::new();
                if !self.query.is_empty() {
                    let scores = self.backend.find_matches(&self.query);
                    reuse.extend(scores.scores.iter().filter_map(|(worker, &blocks)| {
                        let tokens: u64 = prefix[..blocks as usize].iter().map(|s| s.tokens).sum();
                        let tokens = tokens.min(prompt_tokens);
                        (tokens > 0).then_some((worker.worker_id as u32, tokens))
                    }));
                    // Dynamo's scores are a hash map: sorted so the line is deterministic.
                    reuse.sort_unstable();
                }
                let reuse: Vec<Value> = reuse
                    .iter()
                    .map(|&(w, tokens)| {
                        serde_json::json!({"worker": self.worker_ids[w as usize], "tokens": tokens})
                    })
                    .collect();
                Ok(Some(
                    serde_json::json!({"type": "answer", "seq": seq, "reuse": reuse}).to_string(),
                ))
            }
            other => Err(AdapterError(format!(
                "{path}.type: unknown event type \"{other}\""
            ))),
        }
    }
}

/// Serves the protocol from `input` to `output` until `end` (exit status 0), or until a
/// message it cannot handle, which it reports as an `error` message (status 1).
pub fn serve(kind: DynamoKind, input: impl BufRead, mut output: impl Write) -> i32 {
    let mut peer = DynamoPeer::new(kind);
    for line in input.lines() {
        let Ok(line) = line else { return 1 };
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(message) => peer.handle(&message),
            Err(e) => Err(AdapterError(format!("not JSON: {e}"))),
        };
        let (text, done, status) = match reply {
            Ok(Some(text)) => {
                let done = text == r#"{"type":"bye"}"#;
                (Some(text), done, 0)
            }
            Ok(None) => (None, false, 0),
            Err(AdapterError(message)) => (
                Some(serde_json::json!({"type": "error", "message": message}).to_string()),
                true,
                1,
            ),
        };
        if let Some(text) = text {
            if writeln!(output, "{text}")
                .and_then(|()| output.flush())
                .is_err()
            {
                return 1;
            }
        }
        if done {
            return status;
        }
    }
    // kvroute closed stdin without `end`: nothing more to answer.
    1
}
