//! The generated events in the trace's own terms (SPEC.md §11): what `--events-out`
//! writes, so a policy's loop can be replayed open-loop with `kvroute replay`.

use crate::input::trace::{CacheOp, Event, EventKind, Segment};
use crate::route::compiled::{CEvent, Compiled, KeyId, NsId, Op, Step};
use std::sync::Arc;

/// A generated event in the trace's own terms.
pub fn to_trace_event(compiled: &Compiled, event: &CEvent) -> Event {
    let Step::Cache { worker, epoch, op } = &event.step else {
        unreachable!("the engine model generates cache events only");
    };
    let tables = &compiled.tables;
    let namespace = |ns: &NsId| tables.namespaces[*ns as usize].clone();
    let key = |k: &KeyId| -> Arc<str> { Arc::from(tables.keys.name(*k)) };
    let op = match op {
        Op::Store { ns, segments } => CacheOp::Store {
            namespace: namespace(ns),
            segments: segments
                .iter()
                .map(|s| Segment {
                    key: key(&s.key),
                    tokens: s.tokens,
                })
                .collect(),
        },
        Op::Evict { ns, keys } => CacheOp::Evict {
            namespace: namespace(ns),
            keys: keys.iter().map(key).collect(),
        },
        Op::Clear => CacheOp::Clear,
    };
    Event {
        seq: event.seq,
        tick: event.tick,
        kind: EventKind::Cache {
            worker: Arc::from(compiled.worker_ids[*worker as usize]),
            epoch: *epoch,
            op,
        },
    }
}
