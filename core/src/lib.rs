//! kvroute core: a deterministic replayer for KV-aware LLM request routing.
//!
//! A `kvroute-trace/1` document (workers, cache events, load observations, requests) is
//! validated into a [`Trace`], replayed under four policies, and explained in a
//! [`Receipt`] whose canonical bytes and SHA-256 digest are the same on every run.
//! `SPEC.md` at the repository root is the behaviour this crate implements.
//!
//! Where to find each rule:
//! - the **policy rule** (what each policy prefers, ties, margins, the overload cap):
//!   [`policy`];
//! - the **epoch rule** (stale cache events are dropped): [`state::RouterState::apply_cache_event`];
//! - the **tenant rule** (whose prefix may be reused, boundary reasons): [`tenant`];
//! - candidate figures and dominance: [`candidate`]; the run loop: [`engine`].
//!
//! At scale: [`compiled`] interns the trace's strings, [`state::CacheIndex`] indexes
//! residency by key so a decision costs O(prefix segments + workers), [`stream`] writes
//! JSON Lines and CSV receipts while the runs replay, [`import`] reads Mooncake traces,
//! and [`simulate`] is the closed-loop engine model that generates cache events.

/// How many planted-bug features are enabled. The mutant check enables one at a time;
/// two at once would make a kill unattributable, so the build refuses.
const MUTANTS_ENABLED: usize = cfg!(feature = "mutant-tenant-scope-removed") as usize
    + cfg!(feature = "mutant-stale-epochs-accepted") as usize
    + cfg!(feature = "mutant-decode-ignored") as usize
    + cfg!(feature = "mutant-shared-state") as usize
    + cfg!(feature = "mutant-chosen-only-receipt") as usize
    + cfg!(feature = "mutant-ties-to-last") as usize
    + cfg!(feature = "mutant-freshness-ignored") as usize
    + cfg!(feature = "mutant-reuse-past-partial") as usize
    + cfg!(feature = "mutant-namespace-model-adapter-dropped") as usize
    + cfg!(feature = "mutant-overload-cap-ignored") as usize;
// In a clean build the count is the constant 0, which clippy finds trivially true.
#[allow(clippy::absurd_extreme_comparisons)]
const _: () = assert!(
    MUTANTS_ENABLED <= 1,
    "kvroute-core: enable at most one mutant-* feature at a time"
);

pub mod candidate;
pub mod canonical;
pub mod compiled;
pub mod engine;
pub mod export;
pub mod import;
pub mod json;
pub mod metrics;
pub mod policy;
pub mod receipt;
pub mod simulate;
pub mod state;
pub mod stream;
pub mod tenant;
pub mod trace;
pub mod validate;

pub use policy::Policy;
pub use receipt::Receipt;
pub use trace::Trace;
pub use validate::{parse_trace, ValidationErrors};

/// The built-in lab trace, replayed when the CLI is given no trace.
pub const LAB_TRACE_JSON: &str = include_str!("../../fixtures/lab/trace.json");

/// Validates and replays trace bytes: the canonical receipt bytes (no trailing newline)
/// or the validation errors. The same contract as the oracle's `replay`.
pub fn replay_bytes(trace_json: &[u8]) -> Result<Vec<u8>, ValidationErrors> {
    let trace = parse_trace(trace_json)?;
    Ok(engine::replay(&trace).canonical_bytes())
}
