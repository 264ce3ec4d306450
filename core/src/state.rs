//! The router's view of each worker, and the rules that change it (SPEC.md §3).
//!
//! This is where time passes ([`WorkerState::drain`]), where the **epoch rule** lives
//! ([`WorkerState::apply_cache_event`]: a cache event is applied only when its epoch is
//! strictly greater than the worker's last one), where load observations are accepted
//! or dropped, and where a placement adds load. Nothing else mutates a worker.

use crate::trace::{CacheOp, Namespace, WorkerSpec};
use std::collections::BTreeMap;

/// What happened to a cache event or a load observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    StaleEpoch,
    StaleObservation,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::StaleEpoch => "stale_epoch",
            Outcome::StaleObservation => "stale_observation",
        }
    }
}

/// One resident entry under a key: its namespace and resident tokens (always > 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resident {
    pub namespace: Namespace,
    pub tokens: u64,
}

/// The router-side view of one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerState {
    pub prefill_rate: u64,
    pub decode_rate: u64,
    pub queued_prefill: u64,
    pub active_decode: u64,
    pub last_epoch: u64,
    pub observed_tick: u64,
    /// Tick of the last applied cache event; `None` until one is applied.
    pub last_cache_tick: Option<u64>,
    /// Cache entries grouped by key, so a lookup visits only the namespaces that hold
    /// that key. An entry with 0 tokens is never stored: it means "not resident".
    pub cache: BTreeMap<String, Vec<Resident>>,
}

impl WorkerState {
    pub fn from_spec(spec: &WorkerSpec) -> Self {
        let mut state = WorkerState {
            prefill_rate: spec.prefill_rate,
            decode_rate: spec.decode_rate,
            queued_prefill: spec.queued_prefill,
            active_decode: spec.active_decode,
            last_epoch: spec.epoch,
            observed_tick: spec.observed_tick,
            last_cache_tick: None,
            cache: BTreeMap::new(),
        };
        for entry in &spec.cache {
            state.set_resident(&entry.namespace, &entry.key, entry.tokens);
        }
        state
    }

    /// The larger of the last observation and the last applied cache event.
    pub fn last_heard(&self) -> u64 {
        self.observed_tick.max(self.last_cache_tick.unwrap_or(0))
    }

    /// Lets `ticks_elapsed` ticks of prefill and decode work complete.
    pub fn drain(&mut self, ticks_elapsed: u64) {
        let prefill_done = self.prefill_rate.saturating_mul(ticks_elapsed);
        let decode_done = self.decode_rate.saturating_mul(ticks_elapsed);
        self.queued_prefill -= self.queued_prefill.min(prefill_done);
        self.active_decode -= self.active_decode.min(decode_done);
    }

    /// The epoch rule: epochs are per worker and strictly increase. A cache event whose
    /// epoch is not above the last applied one is stale and changes nothing at all (not
    /// even `last_heard`), because applying an older eviction or store would resurrect
    /// or destroy residency the worker has since changed.
    pub fn apply_cache_event(&mut self, tick: u64, epoch: u64, op: &CacheOp) -> Outcome {
        if epoch <= self.last_epoch && !cfg!(feature = "mutant-stale-epochs-accepted") {
            return Outcome::StaleEpoch;
        }
        self.last_epoch = epoch;
        self.last_cache_tick = Some(tick);
        match op {
            CacheOp::Store {
                namespace,
                segments,
            } => {
                for segment in segments {
                    self.set_resident(namespace, &segment.key, segment.tokens);
                }
            }
            CacheOp::Evict { namespace, keys } => {
                for key in keys {
                    self.set_resident(namespace, key, 0);
                }
            }
            CacheOp::Clear => self.cache.clear(),
        }
        Outcome::Applied
    }

    /// A load observation replaces the load figures unless it is older than the one the
    /// router already has.
    pub fn apply_observation(
        &mut self,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    ) -> Outcome {
        if observed_tick < self.observed_tick {
            return Outcome::StaleObservation;
        }
        self.observed_tick = observed_tick;
        self.queued_prefill = queued_prefill;
        self.active_decode = active_decode;
        Outcome::Applied
    }

    /// Routing a request here adds its work; it never adds residency.
    pub fn place(&mut self, recomputed_tokens: u64, decode_tokens: u64) {
        self.queued_prefill += recomputed_tokens;
        self.active_decode += decode_tokens;
    }

    /// The entries resident under `key`, in any namespace.
    pub fn residents(&self, key: &str) -> &[Resident] {
        self.cache.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    fn set_resident(&mut self, namespace: &Namespace, key: &str, tokens: u64) {
        let entries = self.cache.entry(key.to_owned()).or_default();
        match entries.iter().position(|r| &r.namespace == namespace) {
            Some(i) if tokens == 0 => {
                entries.remove(i);
            }
            Some(i) => entries[i].tokens = tokens,
            None if tokens == 0 => {}
            None => entries.push(Resident {
                namespace: namespace.clone(),
                tokens,
            }),
        }
        if entries.is_empty() {
            self.cache.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Segment;

    fn ns(tenant: &str) -> Namespace {
        Namespace {
            tenant: tenant.into(),
            model: "m1".into(),
            adapter: "base".into(),
        }
    }

    fn worker() -> WorkerState {
        WorkerState {
            prefill_rate: 100,
            decode_rate: 10,
            queued_prefill: 250,
            active_decode: 5,
            last_epoch: 3,
            observed_tick: 2,
            last_cache_tick: None,
            cache: BTreeMap::new(),
        }
    }

    #[test]
    fn drain_saturates_at_zero() {
        let mut w = worker();
        w.drain(2);
        assert_eq!((w.queued_prefill, w.active_decode), (50, 0));
        w.drain(u64::MAX);
        assert_eq!(w.queued_prefill, 0);
    }

    #[test]
    fn stale_and_equal_epochs_change_nothing() {
        let mut w = worker();
        let store = CacheOp::Store {
            namespace: ns("a"),
            segments: vec![Segment {
                key: "k".into(),
                tokens: 5,
            }],
        };
        let before = w.clone();
        assert_eq!(w.apply_cache_event(9, 3, &store), Outcome::StaleEpoch);
        assert_eq!(w.apply_cache_event(9, 2, &store), Outcome::StaleEpoch);
        assert_eq!(w, before);
        assert_eq!(w.apply_cache_event(9, 4, &store), Outcome::Applied);
        assert_eq!(w.residents("k").len(), 1);
        assert_eq!(w.last_heard(), 9);
    }

    #[test]
    fn older_observation_is_dropped_and_last_heard_never_moves_back() {
        let mut w = worker();
        w.apply_cache_event(7, 4, &CacheOp::Clear);
        assert_eq!(w.apply_observation(1, 0, 0), Outcome::StaleObservation);
        assert_eq!(w.apply_observation(5, 9, 9), Outcome::Applied);
        assert_eq!((w.queued_prefill, w.active_decode), (9, 9));
        assert_eq!(w.last_heard(), 7);
    }

    #[test]
    fn store_of_zero_tokens_removes_and_evict_is_scoped() {
        let mut w = worker();
        let seg = |t| Segment {
            key: "k".into(),
            tokens: t,
        };
        w.apply_cache_event(
            0,
            4,
            &CacheOp::Store {
                namespace: ns("a"),
                segments: vec![seg(5)],
            },
        );
        w.apply_cache_event(
            0,
            5,
            &CacheOp::Store {
                namespace: ns("b"),
                segments: vec![seg(7)],
            },
        );
        w.apply_cache_event(
            0,
            6,
            &CacheOp::Evict {
                namespace: ns("a"),
                keys: vec!["k".into()],
            },
        );
        assert_eq!(
            w.residents("k"),
            &[Resident {
                namespace: ns("b"),
                tokens: 7
            }]
        );
        w.apply_cache_event(
            0,
            7,
            &CacheOp::Store {
                namespace: ns("b"),
                segments: vec![seg(0)],
            },
        );
        assert!(w.cache.is_empty());
    }
}
