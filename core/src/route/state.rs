//! The router's view of each worker, and the rules that change it (SPEC.md §3).
//!
//! This is where time passes ([`WorkerState::drain`]), where the **stale rules** live
//! ([`RouterState::apply_cache_event`]: `worker_epoch` applies an event only when its
//! epoch is above the worker's last one, `key_epoch` judges each mutation against the
//! last applied epoch of its own key and the worker's clear floor, `arrival_order`
//! applies everything), where **evidence gaps** of sequential epochs are tracked
//! ([`WorkerState::receive_epoch`]), where load observations are accepted or dropped,
//! and where a placement adds load. Nothing else mutates a worker.
//!
//! Residency itself is kept in [`crate::route::cache::index`]; this module decides which
//! cache events may change it.

use crate::input::epoch::{key_epoch_is_news, worker_epoch_is_news};
use crate::input::trace::{EpochsMode, StaleRule};
use crate::mutant::{active, Mutant};
use crate::route::cache::index::CacheIndex;
use crate::route::compiled::{Compiled, KeyId, NsId, Op};
use std::collections::{BTreeMap, BTreeSet};

/// What happened to a cache event or a load observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// `worker_epoch` dropped the event whole.
    StaleEpoch,
    /// `key_epoch` dropped every mutation of the event.
    StaleKeyEpoch,
    /// `key_epoch` dropped some of the event's mutations and applied the others.
    PartlyStaleKeyEpoch,
    StaleObservation,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::StaleEpoch => "stale_epoch",
            Outcome::StaleKeyEpoch => "stale_key_epoch",
            Outcome::PartlyStaleKeyEpoch => "partly_stale_key_epoch",
            Outcome::StaleObservation => "stale_observation",
        }
    }
}

/// What one cache event did (SPEC.md §3.2, §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheOutcome {
    pub outcome: Outcome,
    /// Mutations the `key_epoch` rule rejected (always 0 under the other rules).
    pub stale_mutations: u64,
    /// Whether this event took its worker from no evidence gap to a gap.
    pub gap_opened: bool,
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
    /// `key_epoch`: the epoch of the last applied clear (the initial cache is as of
    /// `workers[].epoch`); nothing at or below it is news.
    pub floor_epoch: u64,
    /// Sequential epochs: every epoch up to this one has been received.
    pub contiguous_epoch: u64,
    /// Sequential epochs: received epochs above `contiguous_epoch`; not empty means a gap.
    pub received_above: BTreeSet<u64>,
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
    /// The test is inlined into the row builder's loop over every worker; the drain
    /// itself is not, since most workers were drained to `tick` already and its
    /// registers would otherwise be taken from that loop's.
    #[inline(always)]
    pub fn drain_to(&mut self, tick: u64) {
        if tick > self.drained_to_tick {
            self.drain_from_last_drain(tick);
        }
    }

    #[inline(never)]
    fn drain_from_last_drain(&mut self, tick: u64) {
        // An idle worker stays idle: no multiplication for it.
        if self.queued_prefill | self.active_decode != 0 {
            self.drain(tick - self.drained_to_tick);
        }
        self.drained_to_tick = tick;
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

    /// Whether an epoch between the contiguous one and the largest received is missing
    /// (SPEC.md §3.6): the router's copy of this worker's cache may lack a mutation.
    pub fn has_gap(&self) -> bool {
        // The mutant trusts the evidence whatever is missing.
        !active(Mutant::GapIgnored) && !self.received_above.is_empty()
    }

    /// Records that an event with `epoch` arrived; `resyncs` when it is a clear the
    /// stale rule applied. Returns whether the worker went from no gap to a gap.
    pub fn receive_epoch(&mut self, epoch: u64, resyncs: bool) -> bool {
        let had_gap = !self.received_above.is_empty();
        if epoch > self.contiguous_epoch {
            self.received_above.insert(epoch);
        }
        if resyncs && epoch > self.contiguous_epoch {
            // What the worker did before the clear no longer matters.
            self.contiguous_epoch = epoch;
            self.received_above = self.received_above.split_off(&(epoch + 1));
        }
        while self.received_above.first() == Some(&(self.contiguous_epoch + 1)) {
            self.received_above.pop_first();
            self.contiguous_epoch += 1;
        }
        !had_gap && !self.received_above.is_empty()
    }
}

/// Everything one policy run knows about the workers.
#[derive(Debug, Clone)]
pub struct RouterState {
    pub workers: Vec<WorkerState>,
    pub cache: CacheIndex,
    pub stale_rule: StaleRule,
    pub epochs: EpochsMode,
    /// `key_epoch`: per worker, the epoch of the last applied mutation of each
    /// `(namespace, key)`; an entry whose key is not resident is a tombstone. A sorted
    /// map, so a clear's sweep never depends on hash order.
    pub key_epochs: Vec<BTreeMap<(NsId, KeyId), u64>>,
    /// A tick every worker has been drained to: the row builder drains every worker to
    /// a request's tick and sets this to it, and no worker's `drained_to_tick` ever
    /// goes back. Most requests share their tick with the one before, and then no
    /// worker needs even the test of [`WorkerState::drain_to`].
    pub all_drained_to_tick: u64,
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
                    floor_epoch: spec.epoch,
                    contiguous_epoch: spec.epoch,
                    received_above: BTreeSet::new(),
                }
            })
            .collect();
        RouterState {
            workers,
            cache,
            stale_rule: compiled.trace.policy.stale_rule,
            epochs: compiled.trace.policy.epochs,
            key_epochs: vec![BTreeMap::new(); compiled.worker_count()],
            all_drained_to_tick: 0,
        }
    }

    /// One cache event under the trace's stale rule (SPEC.md §3.2), then, with
    /// sequential epochs, its place in the worker's received epochs (§3.6).
    pub fn apply_cache_event(
        &mut self,
        worker: u32,
        tick: u64,
        epoch: u64,
        op: &Op,
    ) -> CacheOutcome {
        let (outcome, stale_mutations) = match self.stale_rule {
            StaleRule::WorkerEpoch => (self.apply_worker_epoch(worker, tick, epoch, op), 0),
            StaleRule::KeyEpoch => self.apply_key_epoch(worker, tick, epoch, op),
            StaleRule::ArrivalOrder => {
                self.workers[worker as usize].last_cache_tick = Some(tick);
                self.apply_op(worker, op);
                (Outcome::Applied, 0)
            }
        };
        let gap_opened = self.epochs == EpochsMode::Sequential && {
            let resyncs = matches!(op, Op::Clear) && outcome == Outcome::Applied;
            self.workers[worker as usize].receive_epoch(epoch, resyncs)
        };
        CacheOutcome {
            outcome,
            stale_mutations,
            gap_opened,
        }
    }

    /// Applies every mutation of `op` (SPEC.md §3.2, "applying means").
    fn apply_op(&mut self, worker: u32, op: &Op) {
        match op {
            Op::Store { ns, segments } => {
                crate::route::cache::work::count(segments.len() as u64);
                let entries = segments.iter().map(|segment| (segment.key, segment.tokens));
                self.cache.set_each_counted_by_caller(worker, *ns, entries);
            }
            Op::Evict { ns, keys } => {
                crate::route::cache::work::count(keys.len() as u64);
                let entries = keys.iter().map(|&key| (key, 0));
                self.cache.set_each_counted_by_caller(worker, *ns, entries);
            }
            Op::Clear => self.cache.clear(worker),
        }
    }

    /// `worker_epoch`: epochs are per worker and strictly increase. A cache event whose
    /// epoch is not above the last applied one is stale and changes nothing at all (not
    /// even `last_heard`), because applying an older eviction or store would resurrect
    /// or destroy residency the worker has since changed.
    fn apply_worker_epoch(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> Outcome {
        let state = &mut self.workers[worker as usize];
        if !worker_epoch_is_news(state.last_epoch, epoch) && !active(Mutant::StaleEpochsAccepted) {
            return Outcome::StaleEpoch;
        }
        state.last_epoch = epoch;
        state.last_cache_tick = Some(tick);
        self.apply_op(worker, op);
        Outcome::Applied
    }

    /// `key_epoch`: a mutation is news exactly when it is newer than the last applied
    /// mutation of the same key and than the last applied clear, because a worker
    /// stamps its epochs in its own true order. Evictions leave tombstones, so a late
    /// store cannot resurrect a block evicted after it; a clear keeps what was stamped
    /// after it. Returns the outcome and how many mutations were rejected.
    fn apply_key_epoch(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> (Outcome, u64) {
        let w = worker as usize;
        let floor = self.workers[w].floor_epoch;
        let last_epoch = self.workers[w].last_epoch;
        let key_epochs = &self.key_epochs[w];
        // Each key is judged against the state before the event, so a key repeated in
        // one store is applied (or rejected) every time it appears.
        let accepted = |ns: NsId, key: KeyId| {
            if active(Mutant::KeyEpochAsWorker) {
                // The mutant falls back to the per-worker rule.
                return worker_epoch_is_news(last_epoch, epoch);
            }
            key_epoch_is_news(floor, key_epochs.get(&(ns, key)).copied(), epoch)
        };
        let verdicts: Vec<bool> = match op {
            Op::Clear => Vec::new(),
            Op::Store { ns, segments } => segments.iter().map(|s| accepted(*ns, s.key)).collect(),
            Op::Evict { ns, keys } => keys.iter().map(|&k| accepted(*ns, k)).collect(),
        };
        let (outcome, stale_mutations) = match op {
            Op::Clear => {
                if epoch <= floor {
                    return (Outcome::StaleKeyEpoch, 1);
                }
                let key_epochs = &mut self.key_epochs[w];
                self.cache.retain_worker(worker, |ns, key| {
                    key_epochs.get(&(ns, key)).is_some_and(|&e| e > epoch)
                });
                key_epochs.retain(|_, e| *e > epoch);
                self.workers[w].floor_epoch = epoch;
                (Outcome::Applied, 0)
            }
            Op::Store { ns, segments } => {
                for (segment, _) in segments.iter().zip(&verdicts).filter(|(_, &ok)| ok) {
                    self.cache.set(worker, *ns, segment.key, segment.tokens);
                    self.key_epochs[w].insert((*ns, segment.key), epoch);
                }
                key_outcome(epoch > floor, &verdicts)
            }
            Op::Evict { ns, keys } => {
                for (&key, _) in keys.iter().zip(&verdicts).filter(|(_, &ok)| ok) {
                    self.cache.set(worker, *ns, key, 0);
                    if active(Mutant::TombstonesForgotten) {
                        // The mutant forgets the eviction once the entry is gone.
                        self.key_epochs[w].remove(&(*ns, key));
                    } else {
                        self.key_epochs[w].insert((*ns, key), epoch);
                    }
                }
                key_outcome(epoch > floor, &verdicts)
            }
        };
        if outcome != Outcome::StaleKeyEpoch {
            let state = &mut self.workers[w];
            state.last_cache_tick = Some(tick);
            state.last_epoch = state.last_epoch.max(epoch);
        }
        (outcome, stale_mutations)
    }
}

/// The `key_epoch` outcome of a store or evict from its per-mutation verdicts; an event
/// without mutations is judged by the floor alone (`above_floor`).
fn key_outcome(above_floor: bool, verdicts: &[bool]) -> (Outcome, u64) {
    let rejected = verdicts.iter().filter(|&&ok| !ok).count() as u64;
    let outcome = if verdicts.is_empty() {
        if above_floor {
            Outcome::Applied
        } else {
            Outcome::StaleKeyEpoch
        }
    } else if rejected == 0 {
        Outcome::Applied
    } else if rejected == verdicts.len() as u64 {
        Outcome::StaleKeyEpoch
    } else {
        Outcome::PartlyStaleKeyEpoch
    };
    (outcome, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::compiled::Seg;

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
                floor_epoch: 3,
                contiguous_epoch: 3,
                received_above: BTreeSet::new(),
            }],
            cache: CacheIndex::new(2, 1),
            stale_rule: StaleRule::WorkerEpoch,
            epochs: EpochsMode::Any,
            key_epochs: vec![BTreeMap::new()],
            all_drained_to_tick: 0,
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
            r.apply_cache_event(0, 9, 3, &store(0, 0, 5)).outcome,
            Outcome::StaleEpoch
        );
        assert_eq!(
            r.apply_cache_event(0, 9, 2, &store(0, 0, 5)).outcome,
            Outcome::StaleEpoch
        );
        assert_eq!(r.workers, before.workers);
        assert_eq!(r.key_epochs, before.key_epochs);
        assert_eq!(r.cache.residency(), before.cache.residency());
        assert_eq!(
            r.apply_cache_event(0, 9, 4, &store(0, 0, 5)).outcome,
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

    fn evict(ns: NsId, key: KeyId) -> Op {
        Op::Evict {
            ns,
            keys: vec![key],
        }
    }

    /// A worker with `epoch 0`, an empty cache and keys k0..k2 (ids 0..2), namespace 0.
    fn empty_router(rule: StaleRule) -> RouterState {
        let mut r = router();
        r.cache = CacheIndex::new(3, 1);
        let w = &mut r.workers[0];
        (w.last_epoch, w.floor_epoch, w.contiguous_epoch) = (0, 0, 0);
        r.stale_rule = rule;
        r
    }

    /// SPEC.md §3.2's worked example, seq by seq: outcome, stale mutations, and the
    /// cache each rule ends with.
    #[test]
    fn the_three_stale_rules_on_the_specs_worked_example() {
        use Outcome::*;
        let events = [
            (2, store(0, 1, 100)),
            (
                1,
                Op::Store {
                    ns: 0,
                    segments: vec![Seg { key: 0, tokens: 50 }, Seg { key: 1, tokens: 30 }],
                },
            ),
            (4, evict(0, 0)),
            (3, store(0, 0, 50)),
            (7, store(0, 2, 10)),
            (6, Op::Clear),
            (5, store(0, 1, 40)),
        ];
        let expected = [
            (
                StaleRule::WorkerEpoch,
                vec![
                    Applied, StaleEpoch, Applied, StaleEpoch, Applied, StaleEpoch, StaleEpoch,
                ],
                vec![0; 7],
                [0, 100, 10],
            ),
            (
                StaleRule::KeyEpoch,
                vec![
                    Applied,
                    PartlyStaleKeyEpoch,
                    Applied,
                    StaleKeyEpoch,
                    Applied,
                    Applied,
                    StaleKeyEpoch,
                ],
                vec![0, 1, 0, 1, 0, 0, 1],
                [0, 0, 10],
            ),
            (
                StaleRule::ArrivalOrder,
                vec![Applied; 7],
                vec![0; 7],
                [0, 40, 0],
            ),
        ];
        for (rule, outcomes, stale, cache) in expected {
            let mut r = empty_router(rule);
            let got: Vec<CacheOutcome> = events
                .iter()
                .enumerate()
                .map(|(i, (epoch, op))| r.apply_cache_event(0, i as u64 + 1, *epoch, op))
                .collect();
            let got_outcomes: Vec<Outcome> = got.iter().map(|o| o.outcome).collect();
            let got_stale: Vec<u64> = got.iter().map(|o| o.stale_mutations).collect();
            assert_eq!(got_outcomes, outcomes, "{rule:?}");
            assert_eq!(got_stale, stale, "{rule:?}");
            let resident: Vec<u64> = (0..3).map(|k| r.cache.resident(0, 0, k)).collect();
            assert_eq!(resident, cache, "{rule:?}");
        }
    }

    #[test]
    fn key_epoch_repeated_keys_and_empty_events_follow_the_floor() {
        let mut r = empty_router(StaleRule::KeyEpoch);
        let twice = Op::Store {
            ns: 0,
            segments: vec![Seg { key: 0, tokens: 5 }, Seg { key: 0, tokens: 7 }],
        };
        assert_eq!(
            r.apply_cache_event(0, 1, 1, &twice).outcome,
            Outcome::Applied
        );
        assert_eq!(r.cache.resident(0, 0, 0), 7);
        assert_eq!(
            r.apply_cache_event(0, 2, 3, &Op::Clear).outcome,
            Outcome::Applied
        );
        let empty = Op::Evict {
            ns: 0,
            keys: vec![],
        };
        let stale = r.apply_cache_event(0, 3, 2, &empty);
        assert_eq!(
            (stale.outcome, stale.stale_mutations),
            (Outcome::StaleKeyEpoch, 0)
        );
        assert_eq!(r.workers[0].last_heard(), 2);
        assert_eq!(
            r.apply_cache_event(0, 4, 4, &empty).outcome,
            Outcome::Applied
        );
        assert_eq!(r.workers[0].last_heard(), 4);
        let clear = r.apply_cache_event(0, 5, 3, &Op::Clear);
        assert_eq!(
            (clear.outcome, clear.stale_mutations),
            (Outcome::StaleKeyEpoch, 1)
        );
    }

    /// SPEC.md §3.6's example: a gap opens at e3, closes when e2 arrives late (stale
    /// under worker_epoch, but received), and a lost epoch waits for a resyncing clear.
    #[test]
    fn sequential_epochs_open_and_close_gaps() {
        let mut r = empty_router(StaleRule::WorkerEpoch);
        r.epochs = EpochsMode::Sequential;
        assert!(!r.apply_cache_event(0, 1, 1, &store(0, 0, 5)).gap_opened);
        assert!(!r.workers[0].has_gap());
        assert!(r.apply_cache_event(0, 2, 3, &store(0, 0, 5)).gap_opened);
        assert!(r.workers[0].has_gap());
        let late = r.apply_cache_event(0, 3, 2, &store(0, 1, 5));
        assert_eq!(
            (late.outcome, late.gap_opened),
            (Outcome::StaleEpoch, false)
        );
        assert!(!r.workers[0].has_gap());
        assert_eq!(r.workers[0].contiguous_epoch, 3);
        // e4 is lost: e5 opens a gap that only an applied clear closes.
        assert!(r.apply_cache_event(0, 4, 5, &store(0, 0, 5)).gap_opened);
        assert!(!r.apply_cache_event(0, 5, 7, &store(0, 0, 5)).gap_opened);
        assert!(r.workers[0].has_gap());
        // A stale clear (6 <= 7) does not resync.
        r.apply_cache_event(0, 6, 6, &Op::Clear);
        assert!(r.workers[0].has_gap());
        r.apply_cache_event(0, 7, 8, &Op::Clear);
        assert!(!r.workers[0].has_gap());
        assert_eq!(r.workers[0].contiguous_epoch, 8);
    }
}
