//! kvroute's own answer to the [`Peer`] question: the epoch rule, the cache index and
//! the reuse walk, exactly as a policy run uses them (through core's public API), so a
//! difference found here is a difference with what kvroute routes on.

use crate::{Applied, Peer};
use kvroute_core::route::compiled::{Compiled, Op, Req, Tables};
use kvroute_core::route::reason::Reasons;
use kvroute_core::route::reuse::{reuse_walk, WalkScratch};
use kvroute_core::route::state::{Outcome, RouterState};
use kvroute_core::route::tenant::{NamespaceRule, Sharing};

/// Core's router state and reuse walk behind the [`Peer`] trait.
pub struct KvrouteIndex<'t> {
    state: RouterState,
    tables: Tables<'t>,
    rule: NamespaceRule<'t>,
    scratch: WalkScratch,
    /// Boundary reasons the walk records; the peer question does not ask for them.
    boundary: Vec<Reasons>,
}

impl<'t> KvrouteIndex<'t> {
    /// The state at tick 0 of `compiled`, initial caches included.
    pub fn new(compiled: &Compiled<'t>) -> Self {
        let workers = compiled.worker_count();
        KvrouteIndex {
            state: RouterState::initial(compiled),
            tables: compiled.tables.clone(),
            rule: NamespaceRule::new(Sharing::new(compiled.sharing)),
            scratch: WalkScratch::new(workers),
            boundary: vec![Reasons::default(); workers],
        }
    }

    /// The router state (for causes that ask what is resident).
    pub fn state(&self) -> &RouterState {
        &self.state
    }
}

impl Peer for KvrouteIndex<'_> {
    fn name(&self) -> &'static str {
        "kvroute"
    }

    fn apply_cache_event(&mut self, worker: u32, tick: u64, epoch: u64, op: &Op) -> Applied {
        match self
            .state
            .apply_cache_event(worker, tick, epoch, op)
            .outcome
        {
            Outcome::Applied => Applied::Applied,
            _ => Applied::StaleEpoch,
        }
    }

    fn reuse_tokens(&mut self, request: &Req, reuse_tokens: &mut [u64]) {
        // Every worker is walked: eligibility and freshness are routing questions, not
        // residency ones, and a peer indexer has neither.
        for (w, reuse) in reuse_tokens.iter_mut().enumerate() {
            self.scratch.set_walking(w, true);
            *reuse = 0;
            self.boundary[w] = Reasons::default();
        }
        reuse_walk(
            request,
            &self.state.cache,
            &self.tables,
            &mut self.rule,
            &mut self.scratch,
            reuse_tokens,
            &mut self.boundary,
        );
        for reuse in reuse_tokens.iter_mut() {
            *reuse = (*reuse).min(request.prompt_tokens);
        }
    }
}
