//! Routing: the rules that decide (SPEC.md §3–§5).
//!
//! A validated trace is compiled ([`compiled`]; one whose events are held compactly,
//! [`compact`]), then each policy's run is replayed by
//! the [`engine`] (which runs, and into which output, is [`crate::replay`]'s business). What belongs here: the router's state and the epoch rule ([`state`]),
//! residency, the reuse walk and the count of entry operations ([`cache`]), the tenant
//! rule ([`tenant`]), candidate rows and their dominance ([`candidate`]), row reasons
//! ([`reason`]), the policy rule ([`policy`]), metrics ([`metrics`]), and the records
//! a run produces with the sinks they go to ([`record`]). What
//! must not: bytes. Routing reads `input`'s types and never writes JSON or CSV;
//! [`crate::output`] does.

pub(crate) mod cache;
pub(crate) mod candidate;
pub(crate) mod compact;
pub(crate) mod compiled;
pub(crate) mod engine;
pub(crate) mod metrics;
pub(crate) mod policy;
pub(crate) mod reason;
pub(crate) mod record;
pub(crate) mod state;
pub(crate) mod tenant;

// The public part of routing: the compiled trace, one run (whole, or stepped by a
// `Runner`), the router state with the reuse walk a peer comparison asks, the tenant
// rule, and the records and sinks a run produces.
pub use cache::reuse::{reuse_walk, WalkScratch};
pub use candidate::CandidateRow;
pub use compiled::{
    CEvent, CWorker, Compiled, DecisionsRouted, KeyId, NameId, NsId, Op, Req, Seg, Step, Tables,
};
pub use engine::{run_metrics, run_policy, run_with_sink, Runner};
pub use metrics::Metrics;
pub use policy::Policy;
pub use reason::{Reason, Reasons};
pub use record::{
    CacheLogEntry, CollectSink, Decision, DecisionRef, ObservationLogEntry, Run, RunSink,
};
pub use state::{CacheOutcome, Outcome, RouterState};
pub use tenant::{NamespaceRule, Sharing};
