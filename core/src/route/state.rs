//! The router's view of each worker, and the rules that change it (SPEC.md §3).
//!
//! This is where time passes ([`WorkerState::drain`]), where the **epoch rule** lives
//! ([`RouterState::apply_cache_event`]: a cache event is applied only when its epoch is
//! strictly greater than the worker's last one), where load observations are accepted
//! or dropped, and where a placement adds load. Nothing else mutates a worker.
//!
//! Residency itself is kept in [`crate::route::cache_index`]; this module decides which
//! cache events may change it.

use crate::route::cache_index::CacheIndex;
use crate::route::compiled::{Compiled, Op};

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

/// The router-side view of one worker's load and freshness.
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
    /// The tick the load figures have been drained to. Draining is lazy: a worker is
    /// brought up to date only when it is read or overwritten, which gives the same
    /// figures as draining every worker before every event (draining `a` then `b` ticks
    /// equals draining `a + b`, both saturating at zero) at O(1) per cache event.
    pub drained_to_tick: u64,
}

impl WorkerState {
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

    /// Drains up to `tick` (events arrive in tick order, so `tick` never goes back).
    pub fn drain_to(&mut self, tick: u64) {
        if tick > self.drained_to_tick {
            self.drain(tick - self.drained_to_tick);
            self.drained_to_tick = tick;
        }
    }

    /// A load observation replaces the load figures unless it is older than the one the
    /// router already has.
    pub fn apply_observation(
        &mut self,
        tick: u64,
        observed_tick: u64,
        queued_prefill: u64,
        active_decode: u64,
    ) -> Outcome {
        if observed_tick < self.observed_tick {
            return Outcome::StaleObservation;
        }
        self.drained_to_tick = self.drained_to_tick.max(tick);
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
}

/// Everything one policy run knows about the workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterState {
    pub workers: Vec<WorkerState>,
    pub cache: CacheIndex,
}

impl RouterState {
    /// The state at tick 0: each run gets a fresh one (SPEC.md §3.5).
    pub fn initial(compiled: &Compiled) -> Self {
        let mut cache = CacheIndex::new(compiled.key_count(), compiled.worker_count());
        let workers = compiled
            .workers
            .iter()
            .enumerate()
            .map(|(w, spec)| {
                for &(ns, key, tokens) in &spec.cache {
                    cache.set(w as u32, ns, key, tokens);
                }
                WorkerState {
                    prefill_rate: spec.prefill_rate,
                    decode_rate: spec.decode_rate,
                    queued_prefill: spec.queued_prefill,
                    active_decode: spec.active_decode,
                    last_epoch: spec.epoch,
                    observed_tick: spec.observed_tick,
                    last_cache_tick: None,
                    drained_to_tick: 0,
                }
            })
            .collect();
        RouterState { workers, cache }
    }

    /// The epoch rule: epochs are per worker and strictly increase. A cache event whose
    /// epoch is not above the last applied one is stale and changes nothing at all (not
    /// even `last_heard`), because applying an older eviction or store would resurrect
    /// or destroy residency the worker has since changed.
    pub fn apply_cache_event(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> Outcome {
        let state = &mut self.workers[worker as usize];
        if epoch <= state.last_epoch && !crate::mutant::active("mutant-stale-epochs-accepted") {
            return Outcome::StaleEpoch;
        }
        state.last_epoch = epoch;
        state.last_cache_tick = Some(tick);
        match op {
            Op::Store { ns, segments } => {
                for segment in segments {
                    self.cache.set(worker, *ns, segment.key, segment.tokens);
                }
            }
            Op::Evict { ns, keys } => {
                for &key in keys {
                    self.cache.set(worker, *ns, key, 0);
                }
            }
            Op::Clear => self.cache.clear(worker),
        }
        Outcome::Applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::compiled::{KeyId, NsId, Seg};

    /// One worker, two keys (0 and 1), namespaces 0 ("a") and 1 ("b").
    fn router() -> RouterState {
        RouterState {
            workers: vec![WorkerState {
                prefill_rate: 100,
                decode_rate: 10,
                queued_prefill: 250,
                active_decode: 5,
                last_epoch: 3,
                observed_tick: 2,
                last_cache_tick: None,
                drained_to_tick: 0,
            }],
            cache: CacheIndex::new(2, 1),
        }
    }

    fn store(ns: NsId, key: KeyId, tokens: u64) -> Op {
        Op::Store {
            ns,
            segments: vec![Seg { key, tokens }],
        }
    }

    #[test]
    fn drain_saturates_at_zero_and_lazy_draining_adds_up() {
        let mut w = router().workers.remove(0);
        w.drain_to(1);
        w.drain_to(2);
        assert_eq!((w.queued_prefill, w.active_decode), (50, 0));
        w.drain_to(2);
        assert_eq!(w.queued_prefill, 50);
        w.drain(u64::MAX);
        assert_eq!(w.queued_prefill, 0);
    }

    #[test]
    fn stale_and_equal_epochs_change_nothing() {
        let mut r = router();
        let before = r.clone();
        assert_eq!(
            r.apply_cache_event(0, 9, 3, &store(0, 0, 5)),
            Outcome::StaleEpoch
        );
        assert_eq!(
            r.apply_cache_event(0, 9, 2, &store(0, 0, 5)),
            Outcome::StaleEpoch
        );
        assert_eq!(r, before);
        assert_eq!(
            r.apply_cache_event(0, 9, 4, &store(0, 0, 5)),
            Outcome::Applied
        );
        assert_eq!(r.cache.resident(0, 0, 0), 5);
        assert_eq!(r.workers[0].last_heard(), 9);
    }

    #[test]
    fn older_observation_is_dropped_and_last_heard_never_moves_back() {
        let mut r = router();
        r.apply_cache_event(0, 7, 4, &Op::Clear);
        let w = &mut r.workers[0];
        assert_eq!(w.apply_observation(7, 1, 0, 0), Outcome::StaleObservation);
        assert_eq!(w.apply_observation(7, 5, 9, 9), Outcome::Applied);
        assert_eq!((w.queued_prefill, w.active_decode), (9, 9));
        assert_eq!(w.last_heard(), 7);
    }

    #[test]
    fn store_of_zero_tokens_removes_evict_is_scoped_and_clear_empties() {
        let mut r = router();
        r.apply_cache_event(0, 0, 4, &store(0, 0, 5));
        r.apply_cache_event(0, 0, 5, &store(1, 0, 7));
        r.apply_cache_event(
            0,
            0,
            6,
            &Op::Evict {
                ns: 0,
                keys: vec![0],
            },
        );
        let holders: Vec<_> = r
            .cache
            .holders(0)
            .iter()
            .map(|h| (h.worker, h.ns, h.tokens))
            .collect();
        assert_eq!(holders, [(0, 1, 7)]);
        r.apply_cache_event(0, 0, 7, &store(1, 0, 0));
        assert!(r.cache.holders(0).is_empty());
        r.apply_cache_event(0, 0, 8, &store(0, 1, 3));
        assert_eq!(r.cache.live_entries(), 1);
        r.apply_cache_event(0, 0, 9, &Op::Clear);
        assert_eq!(r.cache.live_entries(), 0);
        assert!(r.cache.holders(1).is_empty());
    }
}
