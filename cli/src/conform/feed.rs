//! The seam between the drivers and the publisher: a [`Feed`] owns one ZeroMQ PUB
//! endpoint per worker of a case (and a replay endpoint when the case is replayable),
//! sends the case's cache events on them as vLLM `KVEventBatch` messages with the
//! faults of its `wire` (SPEC.md §16.2), and knows the token ids of each block, so that a
//! request's token ids match what the router hashed. The publishing is `kvroute
//! publish`'s own (SPEC.md §17).

use super::case::Case;
use crate::publish::{encode, plan, socket::Publishers};
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

/// The publishers of one case.
struct Published {
    plan: plan::Plan,
    publishers: Publishers,
}

impl Published {
    fn index(&self, worker: &str) -> usize {
        self.plan
            .workers
            .iter()
            .position(|w| w == worker)
            .unwrap_or(0)
    }
}

impl Feed for Published {
    fn endpoint(&self, worker: &str) -> String {
        self.publishers.endpoints[self.index(worker)].clone()
    }

    fn replay_endpoint(&self, worker: &str) -> Option<String> {
        self.publishers.replay_endpoints[self.index(worker)].clone()
    }

    fn send_all(&mut self, join: Duration, timeout: Duration) -> Result<(), String> {
        self.publishers.send(&self.plan, join, timeout).map(|_| ())
    }

    fn request_token_ids(&self, keys: &[String], prompt_tokens: u64) -> Vec<u64> {
        encode::request_token_ids(keys, prompt_tokens)
    }
}

/// Binds the case's publishers on ports the system chooses, writing tenants' salts
/// in `salt`'s form.
pub fn bind(case: &Case, salt: encode::SaltForm) -> Result<Box<dyn Feed>, String> {
    let plan = plan::plan(&case.trace_json, &case.wire, salt)
        .map_err(|e| format!("{}: {e}", case.name))?;
    let timeout = Duration::from_secs(10);
    let publishers = Publishers::bind(plan.workers.len(), case.wire.replayable, None, timeout)?;
    Ok(Box::new(Published { plan, publishers }))
}
