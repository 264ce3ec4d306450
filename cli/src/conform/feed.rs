//! The seam between the drivers and the publisher: a [`Feed`] owns one ZeroMQ PUB
//! endpoint per worker of a case (and a replay endpoint when the case is replayable),
//! sends the case's cache events on them as vLLM `KVEventBatch` messages with the
//! faults of its `wire` (SPEC.md §16.2), and knows the token ids of each block, so that a
//! request's token ids match what the router hashed.

use super::case::Case;
use std::time::Duration;

/// A case's publishers, bound and ready to send.
pub trait Feed {
    /// The worker's PUB endpoint, `tcp://127.0.0.1:PORT`.
    fn endpoint(&self, worker: &str) -> String;
    /// The worker's replay endpoint, when the case's lost messages are replayable.
    fn replay_endpoint(&self, worker: &str) -> Option<String>;
    /// Waits `join` for the router's subscriptions, then sends every message, each send
    /// bounded by `timeout`.
    fn send_all(&mut self, join: Duration, timeout: Duration) -> Result<(), String>;
    /// A request's token ids: its prefix keys' blocks, then `prompt_tokens` minus those
    /// tokens more ids that no block holds.
    fn request_token_ids(&self, keys: &[String], prompt_tokens: u64) -> Vec<u64>;
}

/// Binds the case's publishers.
pub fn bind(case: &Case) -> Result<Box<dyn Feed>, String> {
    Err(format!(
        "{}: publishing a case needs `kvroute publish`'s publisher, which this build does not have",
        case.name
    ))
}
