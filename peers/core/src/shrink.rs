//! Cutting a trace down to the few events that still show a difference.
//!
//! [`cut_for`] keeps what one differing row depends on: its worker's initial cache and
//! cache events before the request, the request, and the requests that first name each
//! of those keys and their chain ancestors (they fix each key's chain position, so the
//! Dynamo side hashes it as before). [`shrink`] then removes events, segments, keys and
//! initial entries one chunk at a time while a predicate still holds (delta debugging),
//! so what is left is minimal: removing any one piece loses the difference.

use crate::classify::Difference;
use kvroute_core::input::{CacheOp, EventKind, Namespace, Trace};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

type NsKey = (Namespace, Arc<str>);

/// The part of `trace` that the differing row `difference` depends on: its worker's
/// events when `own_worker_only` (kvroute and `RadixTree` answer per worker), else
/// every worker's (`PositionalIndexer`'s search reads every worker's blocks at once).
pub fn cut_for(trace: &Trace, difference: &Difference, own_worker_only: bool) -> Trace {
    let at = (difference.request_tick, difference.request_seq);
    let mut order: Vec<usize> = (0..trace.events.len()).collect();
    order.sort_by_key(|&i| (trace.events[i].tick, trace.events[i].seq));
    let first = first_requests_naming(trace, &order);
    let mut keep: HashSet<usize> = HashSet::new();
    let mut needed: Vec<NsKey> = Vec::new();
    let worker = &difference.worker;
    for &i in &order {
        let event = &trace.events[i];
        if (event.tick, event.seq) > at {
            break;
        }
        match &event.kind {
            EventKind::Cache { worker: w, op, .. } if **w == **worker || !own_worker_only => {
                keep.insert(i);
                match op {
                    CacheOp::Store {
                        namespace,
                        segments,
                    } => needed.extend(segments.iter().map(|s| (namespace.clone(), s.key.clone()))),
                    CacheOp::Evict { namespace, keys } => {
                        needed.extend(keys.iter().map(|k| (namespace.clone(), k.clone())))
                    }
                    CacheOp::Clear => {}
                }
            }
            EventKind::Request(r) if *r.id == *difference.request_id => {
                keep.insert(i);
            }
            _ => {}
        }
    }
    let mut workers: Vec<_> = trace
        .workers
        .iter()
        .filter(|w| *w.id == **worker || !own_worker_only)
        .cloned()
        .collect();
    for w in &workers {
        needed.extend(w.cache.iter().map(|e| (e.namespace.clone(), e.key.clone())));
    }
    keep_first_requests(&first, needed, &mut keep);
    let mut out = trace.clone();
    out.events = (0..trace.events.len())
        .filter(|i| keep.contains(i))
        .map(|i| trace.events[i].clone())
        .collect();
    workers.sort_by(|a, b| a.id.cmp(&b.id));
    out.workers = workers;
    out
}

/// The first request (in processing `order`) naming each key, and the key before it
/// there (its chain parent).
fn first_requests_naming(
    trace: &Trace,
    order: &[usize],
) -> HashMap<NsKey, (usize, Option<Arc<str>>)> {
    let mut first: HashMap<NsKey, (usize, Option<Arc<str>>)> = HashMap::new();
    for &i in order {
        if let EventKind::Request(request) = &trace.events[i].kind {
            let mut parent = None;
            for s in &request.prefix {
                first
                    .entry((request.namespace.clone(), s.key.clone()))
                    .or_insert((i, parent.clone()));
                parent = Some(s.key.clone());
            }
        }
    }
    first
}

/// Keeps the first request naming each `needed` key, and those naming its chain
/// ancestors.
fn keep_first_requests(
    first: &HashMap<NsKey, (usize, Option<Arc<str>>)>,
    mut needed: Vec<NsKey>,
    keep: &mut HashSet<usize>,
) {
    let mut seen: HashSet<NsKey> = HashSet::new();
    while let Some(k) = needed.pop() {
        if !seen.insert(k.clone()) {
            continue;
        }
        if let Some((i, parent)) = first.get(&k) {
            keep.insert(*i);
            if let Some(p) = parent {
                needed.push((k.0.clone(), p.clone()));
            }
        }
    }
}

/// [`cut_for`] the row's own worker when that still `shows` the difference, else for
/// all workers; `None` when neither does (the difference needs more than the cut keeps).
pub fn cut_reproducing(
    trace: &Trace,
    difference: &Difference,
    shows: impl Fn(&Trace) -> bool,
) -> Option<Trace> {
    [true, false]
        .into_iter()
        .map(|own| cut_for(trace, difference, own))
        .find(|cut| shows(cut))
}

/// Removes pieces of `trace` while `holds` stays true, at most `budget` tries.
pub fn shrink(mut trace: Trace, holds: impl Fn(&Trace) -> bool, budget: usize) -> Trace {
    let mut tries = 0;
    let attempt = |candidate: &Trace, tries: &mut usize| {
        *tries += 1;
        holds(candidate)
    };
    loop {
        let before = trace.clone();
        // Events, in chunks halving down to one.
        let mut chunk = trace.events.len().div_ceil(2).max(1);
        loop {
            let mut start = 0;
            while start < trace.events.len() && tries < budget {
                let mut candidate = trace.clone();
                let end = (start + chunk).min(candidate.events.len());
                candidate.events.drain(start..end);
                if attempt(&candidate, &mut tries) {
                    trace = candidate;
                } else {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
        // Pieces inside events: segments, evicted keys.
        for e in 0..trace.events.len() {
            let mut piece = 0;
            while piece < pieces(&trace.events[e].kind) && tries < budget {
                let mut candidate = trace.clone();
                remove_piece(&mut candidate.events[e].kind, piece);
                if attempt(&candidate, &mut tries) {
                    trace = candidate;
                } else {
                    piece += 1;
                }
            }
        }
        // Initial cache entries, then workers nothing names.
        for w in 0..trace.workers.len() {
            let mut entry = 0;
            while entry < trace.workers[w].cache.len() && tries < budget {
                let mut candidate = trace.clone();
                candidate.workers[w].cache.remove(entry);
                if attempt(&candidate, &mut tries) {
                    trace = candidate;
                } else {
                    entry += 1;
                }
            }
        }
        let named: HashSet<Arc<str>> = trace
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Cache { worker, .. } | EventKind::Load { worker, .. } => {
                    Some(worker.clone())
                }
                EventKind::Request(_) => None,
            })
            .collect();
        let mut candidate = trace.clone();
        candidate
            .workers
            .retain(|w| named.contains(&w.id) || !w.cache.is_empty());
        if candidate.workers.len() < trace.workers.len() && attempt(&candidate, &mut tries) {
            trace = candidate;
        }
        if trace == before || tries >= budget {
            return trace;
        }
    }
}

fn pieces(kind: &EventKind) -> usize {
    match kind {
        EventKind::Cache { op, .. } => match op {
            CacheOp::Store { segments, .. } => segments.len(),
            CacheOp::Evict { keys, .. } => keys.len(),
            CacheOp::Clear => 0,
        },
        EventKind::Request(request) => request.prefix.len(),
        EventKind::Load { .. } => 0,
    }
}

/// Removes piece `i`; a request loses its prefix from `i` on (a prefix stays a chain
/// from the root).
fn remove_piece(kind: &mut EventKind, i: usize) {
    match kind {
        EventKind::Cache { op, .. } => match op {
            CacheOp::Store { segments, .. } => {
                segments.remove(i);
            }
            CacheOp::Evict { keys, .. } => {
                keys.remove(i);
            }
            CacheOp::Clear => {}
        },
        EventKind::Request(request) => {
            let removed: u64 = request.prefix[i..].iter().map(|s| s.tokens).sum();
            request.prefix.truncate(i);
            request.prompt_tokens -= removed.min(request.prompt_tokens);
        }
        EventKind::Load { .. } => {}
    }
}
