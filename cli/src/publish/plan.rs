//! What a trace's cache events become on the wire (SPEC.md §17.2): one message per
//! cache event, numbered per worker's publisher, with the faults of a [`Wire`]. This is
//! pure: the sockets of [`super::socket`] only send what the plan lists, in its order.

use super::encode::{self, Namespace, SaltForm, WireEvent, BLOCK_TOKENS};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// How the wire departs from the trace (SPEC.md §16.2, `wire`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wire {
    #[serde(default)]
    pub lost: Vec<u64>,
    #[serde(default)]
    pub replayable: bool,
    #[serde(default)]
    pub restart: Vec<u64>,
    #[serde(default)]
    pub block_size: BTreeMap<String, u64>,
    #[serde(default)]
    pub host_copies: Vec<HostCopy>,
    #[serde(default)]
    pub swap: Vec<[u64; 2]>,
}

/// A host-tier copy a worker publishes after an event (SPEC.md §16.2).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCopy {
    pub after: u64,
    pub worker: String,
    pub keys: Vec<String>,
}

/// One step of the plan, for one worker's publisher.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A message: its sequence number, payload, whether it goes out on the live socket
    /// and whether the replay buffer keeps it.
    Message {
        worker: usize,
        seq: u64,
        payload: Vec<u8>,
        live: bool,
        buffered: bool,
    },
    /// The worker's publisher restarts: its socket is bound again, its numbering starts
    /// at 0 and its replay buffer is emptied.
    Restart { worker: usize },
}

/// A trace's messages in sending order, and the workers they are sent by.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Worker ids in byte order; a step's `worker` indexes this.
    pub workers: Vec<String>,
    pub steps: Vec<Step>,
}

/// A cache event of the trace, reduced to what the wire needs.
struct CacheEvent {
    seq: u64,
    tick: u64,
    worker: usize,
    events: Vec<WireEvent>,
}

/// Builds the plan of `trace` (a `kvroute-trace/1` document already validated) under
/// `wire`, with blocks of [`BLOCK_TOKENS`] tokens. Err names what cannot be published.
pub fn plan(trace: &Value, wire: &Wire, salt: SaltForm) -> Result<Plan, String> {
    let workers = worker_ids(trace);
    let index = |id: &str| workers.iter().position(|w| w == id);
    for (id, size) in &wire.block_size {
        if index(id).is_none() || *size == 0 || size % BLOCK_TOKENS != 0 {
            return Err(format!(
                "wire.block_size: {id:?} {size}: expected a worker of the trace and a multiple of {BLOCK_TOKENS}"
            ));
        }
    }
    let parents = encode::chain_parents(trace);
    let mut cache_events = initial_caches(trace, &workers, &parents)?;
    let mut events: Vec<&Value> = trace["events"].as_array().into_iter().flatten().collect();
    events.sort_by_key(|e| (e["tick"].as_u64(), e["seq"].as_u64()));
    for event in events.into_iter().filter(|e| e["type"] == "cache") {
        let seq = event["seq"].as_u64().unwrap_or(0);
        let worker_id = event["worker"].as_str().unwrap_or("");
        let worker = index(worker_id).ok_or_else(|| format!("event {seq}: unknown worker"))?;
        let wire_events =
            encode::cache_event(event, &parents).map_err(|e| format!("event {seq}: {e}"))?;
        cache_events.push(CacheEvent {
            seq,
            tick: event["tick"].as_u64().unwrap_or(0),
            worker,
            events: wire_events,
        });
    }
    check_seqs(wire, &cache_events)?;
    let steps = number(wire, &workers, &cache_events, trace, &parents, salt)?;
    Ok(Plan { workers, steps })
}

/// Each worker's initial cache as stores before every event, one message per worker.
fn initial_caches(
    trace: &Value,
    workers: &[String],
    parents: &encode::Parents,
) -> Result<Vec<CacheEvent>, String> {
    let mut out = Vec::new();
    for worker in trace["workers"].as_array().into_iter().flatten() {
        let entries = worker["cache"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        let mut events = Vec::new();
        for entry in entries.iter().filter(|e| e["tokens"].as_u64() != Some(0)) {
            if entry["tokens"].as_u64() != Some(BLOCK_TOKENS) {
                return Err(format!(
                    "worker {}: a cache entry of {} tokens is not one block of {BLOCK_TOKENS}",
                    worker["id"], entry["tokens"]
                ));
            }
            let namespace = Namespace::of(entry);
            let key = entry["key"].as_str().unwrap_or("").to_string();
            events.push(encode::stored(&namespace, &[key], parents, "GPU"));
        }
        if !events.is_empty() {
            let id = worker["id"].as_str().unwrap_or("");
            out.push(CacheEvent {
                seq: u64::MAX,
                tick: 0,
                worker: workers.iter().position(|w| w == id).unwrap_or(0),
                events,
            });
        }
    }
    out.sort_by_key(|e| e.worker);
    Ok(out)
}

/// Every seq the wire names is one of the trace's cache events, a restart a clear.
fn check_seqs(wire: &Wire, events: &[CacheEvent]) -> Result<(), String> {
    let find = |seq: u64| events.iter().find(|e| e.seq == seq);
    let named = wire
        .lost
        .iter()
        .chain(&wire.restart)
        .chain(wire.swap.iter().flatten());
    for seq in named.chain(wire.host_copies.iter().map(|c| &c.after)) {
        if find(*seq).is_none() {
            return Err(format!("wire: {seq} is not the seq of a cache event"));
        }
    }
    for seq in &wire.restart {
        let clear = find(*seq).is_some_and(|e| e.events == [WireEvent::Cleared]);
        if !clear {
            return Err(format!("wire.restart: event {seq} is not a clear"));
        }
    }
    for [a, b] in &wire.swap {
        if find(*a).map(|e| e.worker) != find(*b).map(|e| e.worker) {
            return Err(format!(
                "wire.swap: events {a} and {b} are not one worker's"
            ));
        }
    }
    Ok(())
}

/// Numbers each worker's messages and applies the faults, in sending order.
fn number(
    wire: &Wire,
    workers: &[String],
    events: &[CacheEvent],
    trace: &Value,
    parents: &encode::Parents,
    salt: SaltForm,
) -> Result<Vec<Step>, String> {
    let mut next_seq = vec![0u64; workers.len()];
    let mut steps = Vec::new();
    let mut position_of = BTreeMap::new();
    for event in events {
        if wire.restart.contains(&event.seq) {
            steps.push(Step::Restart {
                worker: event.worker,
            });
            next_seq[event.worker] = 0;
            continue;
        }
        let block_size = wire.block_size.get(&workers[event.worker]).copied();
        let payload = encode::batch(event.tick, &event.events, block_size, salt);
        let lost = wire.lost.contains(&event.seq);
        position_of.insert(event.seq, steps.len());
        steps.push(Step::Message {
            worker: event.worker,
            seq: next_seq[event.worker],
            payload,
            live: !lost,
            buffered: !lost || wire.replayable,
        });
        next_seq[event.worker] += 1;
        for copy in wire.host_copies.iter().filter(|c| c.after == event.seq) {
            let worker = workers
                .iter()
                .position(|w| *w == copy.worker)
                .ok_or_else(|| format!("wire.host_copies: {:?} is not a worker", copy.worker))?;
            let namespace = host_namespace(trace, event.seq);
            let stored = encode::stored(&namespace, &copy.keys, parents, "CPU");
            steps.push(Step::Message {
                worker,
                seq: next_seq[worker],
                payload: encode::batch(event.tick, &[stored], None, salt),
                live: true,
                buffered: true,
            });
            next_seq[worker] += 1;
        }
    }
    for [a, b] in &wire.swap {
        steps.swap(position_of[a], position_of[b]);
    }
    Ok(steps)
}

/// The namespace a host copy after event `seq` is in: that event's, else the first
/// request's.
fn host_namespace(trace: &Value, seq: u64) -> Namespace {
    let events = trace["events"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let after = events.iter().find(|e| e["seq"].as_u64() == Some(seq));
    match after.filter(|e| e.get("tenant").is_some()) {
        Some(event) => Namespace::of(event),
        None => events
            .iter()
            .find(|e| e["type"] == "request")
            .map(Namespace::of)
            .unwrap_or_default(),
    }
}

/// The trace's worker ids in byte order.
pub fn worker_ids(trace: &Value) -> Vec<String> {
    let mut ids: Vec<String> = trace["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["id"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Value {
        serde_json::from_slice(&std::fs::read("tests/publish/wire.trace.json").unwrap()).unwrap()
    }

    /// `(worker, seq, live, buffered)` of each message, `None` for a restart.
    fn shape(plan: &Plan) -> Vec<Option<(usize, u64, bool, bool)>> {
        plan.steps
            .iter()
            .map(|step| match step {
                Step::Message {
                    worker,
                    seq,
                    live,
                    buffered,
                    ..
                } => Some((*worker, *seq, *live, *buffered)),
                Step::Restart { .. } => None,
            })
            .collect()
    }

    #[test]
    fn a_lost_message_keeps_its_number_and_only_a_replayable_wire_buffers_it() {
        for replayable in [false, true] {
            let wire = Wire {
                lost: vec![2],
                replayable,
                ..Wire::default()
            };
            let plan = plan(&trace(), &wire, SaltForm::Vllm).unwrap();
            assert_eq!(shape(&plan)[1], Some((1, 0, false, replayable)));
            assert_eq!(
                shape(&plan)[2],
                Some((1, 1, true, true)),
                "the next keeps counting"
            );
        }
    }

    #[test]
    fn a_restart_replaces_its_clear_and_numbers_again_from_zero() {
        let mut trace = trace();
        let events = trace["events"].as_array_mut().unwrap();
        let mut store = events[5].clone();
        store["seq"] = 10.into();
        store["tick"] = 7.into();
        events.push(store);
        let wire = Wire {
            restart: vec![7],
            ..Wire::default()
        };
        let plan = plan(&trace, &wire, SaltForm::Vllm).unwrap();
        let steps = shape(&plan);
        assert_eq!(steps[6], None);
        assert_eq!(steps[7], Some((1, 0, true, true)));
        assert!(matches!(plan.steps[6], Step::Restart { worker: 1 }));
    }

    #[test]
    fn a_swap_exchanges_two_messages_with_their_numbers() {
        let wire = Wire {
            swap: vec![[2, 3]],
            ..Wire::default()
        };
        let steps = shape(&plan(&trace(), &wire, SaltForm::Vllm).unwrap());
        assert_eq!(
            (steps[1], steps[2]),
            (Some((1, 1, true, true)), Some((1, 0, true, true)))
        );
    }

    #[test]
    fn a_host_copy_is_one_more_cpu_message_after_its_event() {
        let copy = HostCopy {
            after: 1,
            worker: "w1".into(),
            keys: vec!["a0".into()],
        };
        let wire = Wire {
            host_copies: vec![copy],
            ..Wire::default()
        };
        let plan = plan(&trace(), &wire, SaltForm::Vllm).unwrap();
        assert_eq!(shape(&plan)[1], Some((1, 0, true, true)));
        let Step::Message { payload, .. } = &plan.steps[1] else {
            panic!("a message")
        };
        let batch = rmpv::decode::read_value(&mut &payload[..]).unwrap();
        let event = &batch[1][0];
        let medium = event
            .as_map()
            .unwrap()
            .iter()
            .find(|(k, _)| k.as_str() == Some("medium"));
        assert_eq!(medium.unwrap().1.as_str(), Some("CPU"));
    }
}
