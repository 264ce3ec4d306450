//! SPEC §1.2–§1.4 as validation stages 3–5 (§2.3): the cross-reference rules, the
//! static limits of the profile, the residency limit (replayed on the worker views of
//! §3) and the static overflow rule, each giving its lines of §2.2 at the paths of §2.1.

use std::collections::BTreeSet;

use crate::json::quote_str;
use crate::model::{Event, EventKind, Profile, StaleRule, Trace};
use crate::paths::{index_path, line, member_path, INTEGER_MAX};
use crate::state::{apply_cache_event, WorkerView};

/// `<n> <what> exceed the <profile> limit of <m><per>` at `path`, when `n > m`. The
/// path is written only for a line that is reported.
fn limit_line(
    path: impl FnOnce() -> String,
    count: u64,
    what: &str,
    profile: Profile,
    max: u64,
    per: &str,
) -> Option<String> {
    (count > max).then(|| {
        line(
            &path(),
            &format!(
                "{count} {what} exceed the {} limit of {max}{per}",
                profile.name()
            ),
        )
    })
}

/// Stage 3 (SPEC §1.2, the static limits of §1.3, in the order of §2.3). Sets are
/// BTreeSets: only membership is asked of them, never their iteration order.
pub fn cross_references(trace: &Trace) -> Vec<String> {
    let mut lines = Vec::new();
    grant_limits(trace, &mut lines);
    let worker_ids = worker_checks(trace, &mut lines);
    event_checks(trace, &worker_ids, &mut lines);
    count_limits(trace, &mut lines);
    lines
}

/// Per grant, in array order: its tenants-per-grant limit.
fn grant_limits(trace: &Trace, lines: &mut Vec<String>) {
    let profile = trace.limits;
    for (i, grant) in trace.sharing.iter().enumerate() {
        lines.extend(limit_line(
            || member_path(&index_path("sharing", i), "tenants"),
            grant.tenants.len() as u64,
            "tenants",
            profile,
            profile.tenants_per_grant_max(),
            " per grant",
        ));
    }
}

/// Per worker, in array order: duplicate id, adapters, duplicate cache entries, cache
/// length. Returns the set of worker ids.
fn worker_checks<'t>(trace: &'t Trace, lines: &mut Vec<String>) -> BTreeSet<&'t str> {
    let profile = trace.limits;
    let mut seen_workers: BTreeSet<&str> = BTreeSet::new();
    for (i, worker) in trace.workers.iter().enumerate() {
        // Paths are written only for the lines reported.
        let worker_path = || index_path("workers", i);
        if !seen_workers.insert(worker.id.as_str()) {
            lines.push(line(
                &member_path(&worker_path(), "id"),
                &format!("duplicate worker id {}", quote_str(&worker.id)),
            ));
        }
        lines.extend(limit_line(
            || member_path(&worker_path(), "adapters"),
            worker.adapters.len() as u64,
            "adapters",
            profile,
            profile.adapters_per_worker_max(),
            " per worker",
        ));
        let cache_path = || member_path(&worker_path(), "cache");
        let mut seen_entries: BTreeSet<(&str, &str, &str, &str)> = BTreeSet::new();
        for (j, entry) in worker.cache.iter().enumerate() {
            let entry_name = (
                entry.tenant.as_str(),
                entry.model.as_str(),
                entry.adapter.as_str(),
                entry.key.as_str(),
            );
            if !seen_entries.insert(entry_name) {
                lines.push(line(
                    &index_path(&cache_path(), j),
                    &format!("duplicate cache entry for key {}", quote_str(&entry.key)),
                ));
            }
        }
        // The array's length, entries of 0 tokens included (SPEC §1.3).
        lines.extend(limit_line(
            cache_path,
            worker.cache.len() as u64,
            "cache entries",
            profile,
            profile.cache_entries_per_worker_max(),
            " per worker",
        ));
    }

    seen_workers
}

/// Per event, in array order: duplicate seq and request id, unknown worker, future
/// observation, prefix too long, tokens per request, keys per event.
fn event_checks(trace: &Trace, seen_workers: &BTreeSet<&str>, lines: &mut Vec<String>) {
    let profile = trace.limits;
    let mut seen_seqs: BTreeSet<u64> = BTreeSet::new();
    let mut seen_requests: BTreeSet<&str> = BTreeSet::new();
    for event in &trace.events {
        // Paths are written only for the lines reported.
        let event_path = || index_path("events", event.index);
        if !seen_seqs.insert(event.seq) {
            lines.push(line(
                &member_path(&event_path(), "seq"),
                &format!("duplicate seq {}", event.seq),
            ));
        }
        if let EventKind::Request { id, .. } = &event.kind {
            if !seen_requests.insert(id.as_str()) {
                lines.push(line(
                    &member_path(&event_path(), "id"),
                    &format!("duplicate request id {}", quote_str(id)),
                ));
            }
        }
        if let Some(worker) = event.worker() {
            if !seen_workers.contains(worker) {
                lines.push(line(
                    &member_path(&event_path(), "worker"),
                    &format!("unknown worker {}", quote_str(worker)),
                ));
            }
        }
        if let EventKind::Load { observed_tick, .. } = &event.kind {
            if *observed_tick > event.tick {
                lines.push(line(
                    &member_path(&event_path(), "observed_tick"),
                    &format!(
                        "observed_tick {observed_tick} is after the event tick {}",
                        event.tick
                    ),
                ));
            }
        }
        request_token_checks(event, profile, lines);
        keys_per_event_check(event, profile, lines);
    }
}

/// A request's prefix against its prompt, then its tokens against the profile's limit
/// per request.
fn request_token_checks(event: &Event, profile: Profile, lines: &mut Vec<String>) {
    let EventKind::Request {
        prefix,
        prompt_tokens,
        decode_tokens,
        ..
    } = &event.kind
    else {
        return;
    };
    let event_path = || index_path("events", event.index);
    // u128: many segments of up to B tokens each cannot overflow it.
    let prefix_tokens: u128 = prefix.iter().map(|s| u128::from(s.tokens)).sum();
    if prefix_tokens > u128::from(*prompt_tokens) {
        lines.push(line(
            &member_path(&event_path(), "prefix"),
            &format!("prefix tokens {prefix_tokens} exceed prompt_tokens {prompt_tokens}"),
        ));
    }
    let tokens = u128::from(*prompt_tokens) + u128::from(*decode_tokens);
    let limit = profile.tokens_per_request_max();
    if tokens > u128::from(limit) {
        lines.push(line(
            &event_path(),
            &format!(
                "{tokens} tokens (prompt_tokens + decode_tokens) exceed the {} limit of {limit}",
                profile.name()
            ),
        ));
    }
}

/// Keys per event: the one array of keys the event carries, if any.
fn keys_per_event_check(event: &Event, profile: Profile, lines: &mut Vec<String>) {
    let keyed = match &event.kind {
        EventKind::Request { prefix, .. } => Some(("prefix", prefix.len())),
        EventKind::Store { segments, .. } => Some(("segments", segments.len())),
        EventKind::Evict { keys, .. } => Some(("keys", keys.len())),
        EventKind::Clear { .. } | EventKind::Load { .. } => None,
    };
    if let Some((array_name, key_count)) = keyed {
        lines.extend(limit_line(
            || member_path(&index_path("events", event.index), array_name),
            key_count as u64,
            "keys",
            profile,
            profile.keys_per_event_max(),
            " per event",
        ));
    }
}

/// The count limits: sharing grants, workers, requests, events.
fn count_limits(trace: &Trace, lines: &mut Vec<String>) {
    let profile = trace.limits;
    let request_count = trace
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Request { .. }))
        .count();
    // (path, count, what is counted, the profile's maximum), in the order of §2.3.
    for (path, count, what, max) in [
        (
            "sharing",
            trace.sharing.len(),
            "sharing grants",
            profile.sharing_grants_max(),
        ),
        (
            "workers",
            trace.workers.len(),
            "workers",
            profile.workers_max(),
        ),
        ("events", request_count, "requests", profile.requests_max()),
        ("events", trace.events.len(), "events", profile.events_max()),
    ] {
        lines.extend(limit_line(
            || path.to_owned(),
            count as u64,
            what,
            profile,
            max,
            "",
        ));
    }
}

/// Stage 4, the residency limit of SPEC §1.3: the cache events alone are replayed from
/// the initial caches in `(tick, seq)` order under the `worker_epoch` rule of §3.2
/// (whatever the trace's own rule), with the worker views of `state`, and after each
/// applied store its worker's resident entries are counted. Only the first store over
/// the limit of each worker is reported. Stage 3 passed, so every event names a known
/// worker and seqs are unique.
pub fn residency(trace: &Trace) -> Vec<String> {
    let profile = trace.limits;
    let max = profile.cache_entries_per_worker_max();
    let mut views: Vec<WorkerView> = trace.workers.iter().map(WorkerView::initial).collect();
    let mut reported: Vec<bool> = vec![false; trace.workers.len()];
    let mut order: Vec<&Event> = trace.events.iter().collect();
    order.sort_by_key(|e| (e.tick, e.seq));
    let mut lines = Vec::new();
    for event in order {
        let (worker_id, epoch) = match &event.kind {
            EventKind::Store { worker, epoch, .. }
            | EventKind::Evict { worker, epoch, .. }
            | EventKind::Clear { worker, epoch } => (worker, *epoch),
            EventKind::Load { .. } | EventKind::Request { .. } => continue,
        };
        let Some(w) = trace.workers.iter().position(|w| &w.id == worker_id) else {
            continue;
        };
        let view = &mut views[w];
        let outcome =
            apply_cache_event(view, StaleRule::WorkerEpoch, &event.kind, epoch, event.tick);
        if outcome.outcome != "applied" || !matches!(event.kind, EventKind::Store { .. }) {
            continue;
        }
        let resident = view.resident as u64;
        if resident > max && !reported[w] {
            reported[w] = true;
            lines.push(line(
                &index_path("events", event.index),
                &format!(
                    "worker {} would hold {resident} cache entries, over the {} limit of {max}",
                    quote_str(worker_id),
                    profile.name()
                ),
            ));
        }
    }
    lines
}

/// Stage 5, the overflow rule of SPEC §1.4 (`bound`, and `dynamo_bound` when
/// `dynamo_block_tokens` is set), in 128-bit integers that saturate: a saturated figure
/// is far above B, so the answer is the exact computation's.
pub fn overflow(trace: &Trace) -> Option<String> {
    let mut queued_max: u64 = 0;
    let mut active_max: u64 = 0;
    for worker in &trace.workers {
        queued_max = queued_max.max(worker.queued_prefill);
        active_max = active_max.max(worker.active_decode);
    }
    let mut prompt_sum: u128 = 0;
    let mut decode_sum: u128 = 0;
    let mut prompt_max: u64 = 0;
    for event in &trace.events {
        match &event.kind {
            EventKind::Load {
                queued_prefill,
                active_decode,
                ..
            } => {
                queued_max = queued_max.max(*queued_prefill);
                active_max = active_max.max(*active_decode);
            }
            EventKind::Request {
                prompt_tokens,
                decode_tokens,
                ..
            } => {
                // At most 2·10^7 events of at most 2^53 each: far below 2^128.
                prompt_sum += u128::from(*prompt_tokens);
                decode_sum += u128::from(*decode_tokens);
                prompt_max = prompt_max.max(*prompt_tokens);
            }
            _ => {}
        }
    }
    let queued = u128::from(queued_max) + prompt_sum;
    let active = u128::from(active_max) + decode_sum;
    let work = queued
        .saturating_mul(1000)
        .saturating_add(active.saturating_mul(u128::from(trace.policy.decode_weight_milli)));
    let imbalance = work.saturating_mul(u128::from(trace.policy.imbalance_penalty_milli)) / 1000;
    let bound = (u128::from(prompt_max) * 1000)
        .saturating_add(work)
        .saturating_add(imbalance);
    // With a `dynamo_default` run, `1000·Q + 1000·(A + b)` bounds its costs and margins
    // too (§4.8: `1000·b·ceil(active_decode / b)` is below `1000·(A + b)`); one line for
    // either bound.
    let dynamo_bound = trace.policy.dynamo_block_tokens.map(|block_tokens| {
        queued.saturating_mul(1000).saturating_add(
            active
                .saturating_add(u128::from(block_tokens))
                .saturating_mul(1000),
        )
    });
    let dynamo_over = matches!(dynamo_bound, Some(figure) if figure > u128::from(INTEGER_MAX));
    if bound > u128::from(INTEGER_MAX) || dynamo_over {
        Some(line(
            "",
            "figures could overflow: the cost bound exceeds 9007199254740991",
        ))
    } else {
        None
    }
}
