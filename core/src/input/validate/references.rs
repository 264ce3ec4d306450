//! Stage 3: duplicates, dangling references, future observations, over-long prefixes
//! and the profile's static limits (SPEC.md §2.3, §1.3).

use super::errors::ValidationErrors;
use crate::input::compact::EventsView;
use crate::input::json::quote_str;
use crate::input::trace::*;
use hashbrown::HashTable;
use rustc_hash::{FxHashSet, FxHasher};
use std::hash::{Hash, Hasher};

/// Stage 3: duplicates, dangling references, future observations, over-long prefixes
/// and the static limits of the profile, in the order SPEC.md §2.3 fixes. The sets are
/// hash sets only asked whether they already hold a value, never iterated, so their
/// order cannot reach an error; the seqs and request ids seen are held as the index of
/// the event that first had each ([`Firsts`]), four bytes a value.
pub(super) fn cross_reference_and_limits<E: EventsView + ?Sized>(
    trace: &Trace,
    events: &E,
) -> ValidationErrors {
    let mut errors = ValidationErrors::default();
    let profile = trace.limits;
    grant_errors(trace, profile, &mut errors);
    let worker_ids = worker_errors(trace, profile, &mut errors);
    let mut firsts = Firsts {
        events,
        seqs: HashTable::with_capacity(events.count()),
        request_ids: HashTable::new(),
    };
    let mut request_count = 0;
    for i in 0..events.count() {
        let request_id = events.request_id_at(i);
        request_count += usize::from(request_id.is_some());
        let seen = Seen {
            worker_ids: &worker_ids,
            firsts: &mut firsts,
        };
        events.with_event(i, |event| {
            reference_errors(i, event, request_id, seen, &mut errors);
            event_limit_errors(i, event, profile, &mut errors);
        });
    }
    let counts = Counts {
        events: events.count(),
        requests: request_count,
    };
    count_errors(trace, counts, profile, &mut errors);
    errors
}

/// A count over its limit.
fn over(count: usize, max: u64) -> bool {
    count as u64 > max
}

/// Grants with more tenants than the profile allows.
fn grant_errors(trace: &Trace, profile: LimitsProfile, errors: &mut ValidationErrors) {
    for (i, grant) in trace.sharing.iter().enumerate() {
        let max = profile.tenants_per_grant_max();
        if over(grant.tenants.len(), max) {
            errors.push_with(|| {
                (
                    format!("sharing[{i}].tenants"),
                    format!(
                        "{} tenants exceed the {} limit of {max} per grant",
                        grant.tenants.len(),
                        profile.name()
                    ),
                )
            });
        }
    }
}

/// Duplicate worker ids and cache entries, and workers over the profile's limits;
/// returns the worker ids, for the events' references.
fn worker_errors<'t>(
    trace: &'t Trace,
    profile: LimitsProfile,
    errors: &mut ValidationErrors,
) -> FxHashSet<&'t str> {
    let mut worker_ids =
        FxHashSet::with_capacity_and_hasher(trace.workers.len(), Default::default());
    for (i, worker) in trace.workers.iter().enumerate() {
        if !worker_ids.insert(&*worker.id) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].id"),
                    format!("duplicate worker id {}", quote_str(&worker.id)),
                )
            });
        }
        let max = profile.adapters_per_worker_max();
        if over(worker.adapters.len(), max) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].adapters"),
                    format!(
                        "{} adapters exceed the {} limit of {max} per worker",
                        worker.adapters.len(),
                        profile.name()
                    ),
                )
            });
        }
        let mut entries =
            FxHashSet::with_capacity_and_hasher(worker.cache.len(), Default::default());
        for (j, entry) in worker.cache.iter().enumerate() {
            if !entries.insert((&entry.namespace, &*entry.key)) {
                errors.push_with(|| {
                    (
                        format!("workers[{i}].cache[{j}]"),
                        format!("duplicate cache entry for key {}", quote_str(&entry.key)),
                    )
                });
            }
        }
        let max = profile.cache_entries_per_worker_max();
        if over(worker.cache.len(), max) {
            errors.push_with(|| {
                (
                    format!("workers[{i}].cache"),
                    format!(
                        "{} cache entries exceed the {} limit of {max} per worker",
                        worker.cache.len(),
                        profile.name()
                    ),
                )
            });
        }
    }
    worker_ids
}

/// The seqs and request ids the events so far have had: for each, the index of the
/// first event that had it, hashed by the value (read back from the events).
struct Firsts<'e, E: ?Sized> {
    events: &'e E,
    seqs: HashTable<u32>,
    request_ids: HashTable<u32>,
}

fn fx_hash(value: impl Hash) -> u64 {
    let mut hasher = FxHasher::default();
    value.hash(&mut hasher);
    hasher.finish()
}

impl<E: EventsView + ?Sized> Firsts<'_, E> {
    fn seq_of(&self, i: u32) -> u64 {
        self.events.tick_seq(i as usize).1
    }

    /// Whether no event before event `i` had its seq `seq`; remembers it if so.
    fn first_seq(&mut self, i: usize, seq: u64) -> bool {
        let hash = fx_hash(seq);
        if self.seqs.find(hash, |&j| self.seq_of(j) == seq).is_some() {
            return false;
        }
        let events = self.events;
        let rehash = |&j: &u32| fx_hash(events.tick_seq(j as usize).1);
        self.seqs.insert_unique(hash, i as u32, rehash);
        true
    }

    /// Whether no event before event `i` had its request id `id`; remembers it if so.
    fn first_request_id(&mut self, i: usize, id: &str) -> bool {
        let hash = fx_hash(id);
        let events = self.events;
        if self
            .request_ids
            .find(hash, |&j| events.request_id_at(j as usize) == Some(id))
            .is_some()
        {
            return false;
        }
        let rehash = |&j: &u32| fx_hash(events.request_id_at(j as usize).unwrap_or_default());
        self.request_ids.insert_unique(hash, i as u32, rehash);
        true
    }
}

/// What the events before this one have named, for duplicates and references.
struct Seen<'s, 't, 'e, E: ?Sized> {
    worker_ids: &'s FxHashSet<&'t str>,
    firsts: &'s mut Firsts<'e, E>,
}

/// A duplicate seq or request id, and an unknown worker. `request_id` is the event's
/// id when it is a request.
fn reference_errors<E: EventsView + ?Sized>(
    i: usize,
    event: &Event,
    request_id: Option<&str>,
    seen: Seen<'_, '_, '_, E>,
    errors: &mut ValidationErrors,
) {
    if !seen.firsts.first_seq(i, event.seq) {
        errors.push_with(|| {
            (
                format!("events[{i}].seq"),
                format!("duplicate seq {}", event.seq),
            )
        });
    }
    let worker = match &event.kind {
        EventKind::Cache { worker, .. } | EventKind::Load { worker, .. } => Some(worker),
        EventKind::Request(_) => None,
    };
    if let Some(id) = request_id {
        if !seen.firsts.first_request_id(i, id) {
            errors.push_with(|| {
                (
                    format!("events[{i}].id"),
                    format!("duplicate request id {}", quote_str(id)),
                )
            });
        }
    }
    if let Some(worker) = worker {
        if !seen.worker_ids.contains(&**worker) {
            errors.push_with(|| {
                (
                    format!("events[{i}].worker"),
                    format!("unknown worker {}", quote_str(worker)),
                )
            });
        }
    }
}

/// An observation from the future, a prefix longer than its prompt, and an event over
/// the profile's token or key limits.
fn event_limit_errors(
    i: usize,
    event: &Event,
    profile: LimitsProfile,
    errors: &mut ValidationErrors,
) {
    match &event.kind {
        EventKind::Load { observed_tick, .. } if *observed_tick > event.tick => {
            errors.push_with(|| {
                (
                    format!("events[{i}].observed_tick"),
                    format!(
                        "observed_tick {observed_tick} is after the event tick {}",
                        event.tick
                    ),
                )
            });
        }
        EventKind::Request(request) => {
            let prefix_tokens: u128 = request.prefix.iter().map(|s| s.tokens as u128).sum();
            if prefix_tokens > request.prompt_tokens as u128 {
                errors.push_with(|| {
                    (
                        format!("events[{i}].prefix"),
                        format!(
                            "prefix tokens {prefix_tokens} exceed prompt_tokens {}",
                            request.prompt_tokens
                        ),
                    )
                });
            }
            if let Some(tokens) =
                profile.tokens_over_limit(request.prompt_tokens, request.decode_tokens)
            {
                errors.push_with(|| {
                    (
                        format!("events[{i}]"),
                        format!(
                            "{tokens} tokens (prompt_tokens + decode_tokens) exceed the {} limit of {}",
                            profile.name(),
                            profile.tokens_per_request_max()
                        ),
                    )
                });
            }
        }
        _ => {}
    }
    event_key_count_errors(i, event, profile, errors);
}

/// An event with more prefix segments, stored segments or evicted keys than the
/// profile allows in one event.
fn event_key_count_errors(
    i: usize,
    event: &Event,
    profile: LimitsProfile,
    errors: &mut ValidationErrors,
) {
    let keys = match &event.kind {
        EventKind::Request(request) => Some(("prefix", request.prefix.len())),
        EventKind::Cache {
            op: CacheOp::Store { segments, .. },
            ..
        } => Some(("segments", segments.len())),
        EventKind::Cache {
            op: CacheOp::Evict { keys, .. },
            ..
        } => Some(("keys", keys.len())),
        _ => None,
    };
    if let Some((member, count)) = keys {
        let max = profile.keys_per_event_max();
        if over(count, max) {
            errors.push_with(|| {
                (
                    format!("events[{i}].{member}"),
                    format!(
                        "{count} keys exceed the {} limit of {max} per event",
                        profile.name()
                    ),
                )
            });
        }
    }
}

/// Arrays longer than the profile allows.
/// How many events and requests the trace has.
#[derive(Clone, Copy)]
struct Counts {
    events: usize,
    requests: usize,
}

fn count_errors(
    trace: &Trace,
    counts: Counts,
    profile: LimitsProfile,
    errors: &mut ValidationErrors,
) {
    let limits = [
        (
            "sharing",
            trace.sharing.len() as u64,
            "sharing grants",
            profile.sharing_grants_max(),
        ),
        (
            "workers",
            trace.workers.len() as u64,
            "workers",
            profile.workers_max(),
        ),
        (
            "events",
            counts.requests as u64,
            "requests",
            profile.requests_max(),
        ),
        (
            "events",
            counts.events as u64,
            "events",
            profile.events_max(),
        ),
    ];
    for (path, count, noun, max) in limits {
        if count > max {
            errors.push_with(|| {
                (
                    path,
                    format!(
                        "{count} {noun} exceed the {} limit of {max}",
                        profile.name()
                    ),
                )
            });
        }
    }
}
