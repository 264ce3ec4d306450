//! The epoch rules of SPEC.md §3.2, written once: when a cache event, or under
//! `key_epoch` one of its mutations, is news. Routing's state
//! ([`crate::route::state`]) applies them to every cache event; validation's residency
//! stage replays the cache events under `worker_epoch` with the same rule. Both read
//! only epochs, so the rule sits below both.

/// `worker_epoch`: an event is news exactly when its epoch is above the last one
/// applied for its worker; an older or equal one is dropped whole.
pub fn worker_epoch_is_news(last_applied: u64, epoch: u64) -> bool {
    epoch > last_applied
}

/// `key_epoch`: a mutation is news exactly when its epoch is above the worker's last
/// applied clear (`floor`) and above the last applied mutation of its key (`key_last`;
/// a key never mutated since the clear counts as the floor).
pub fn key_epoch_is_news(floor: u64, key_last: Option<u64>, epoch: u64) -> bool {
    epoch > floor && epoch > key_last.unwrap_or(floor)
}
