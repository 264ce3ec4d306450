//! Stage 4: the residency limit (SPEC.md §1.3), found by replaying the cache events
//! under the epoch rule ([`crate::input::epoch`]).

use super::errors::ValidationErrors;
use crate::input::epoch::worker_epoch_is_news;
use crate::input::json::quote_str;
use crate::input::trace::*;
use rustc_hash::{FxHashMap, FxHashSet};

/// Stage 4: the residency limit (SPEC.md §1.3). Routing never changes a cache and the
/// epoch rule reads only epochs, so replaying the cache events alone, in `(tick, seq)`
/// order, gives every worker's resident entries at every point of every policy's run.
/// Runs only after stage 3 found nothing: seqs are unique, so the order is total, and
/// every event names a worker.
pub(super) fn residency_errors(trace: &Trace) -> ValidationErrors {
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
        if !worker_epoch_is_news(last_epoch[w], *epoch) {
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
