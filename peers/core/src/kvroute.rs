//! kvroute's own answer to the [`Peer`] question: the epoch rule, the cache index and
//! the reuse walk, exactly as a policy run uses them (through core's public API), so a
//! difference found here is a difference with what kvroute routes on.

use crate::{Applied, Peer};
use kvroute_core::route::Reasons;
use kvroute_core::route::{reuse_walk, WalkScratch};
use kvroute_core::route::{Compiled, Op, Req, Tables};
use kvroute_core::route::{NamespaceRule, Sharing};
use kvroute_core::route::{Outcome, RouterState};

/// Core's router state and reuse walk behind the [`Peer`] trait.
pub struct KvrouteIndex<'t> {
    state: RouterState,
    tables: Tables<'t>,
    rule: NamespaceRule<'t>,
    scratch: WalkScratch,
    /// Each worker's reuse as the walk sums it; only the last walk's workers are not 0.
    reuse: Vec<u64>,
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
            scratch: {
                let mut scratch = WalkScratch::new(workers);
                for w in 0..workers {
                    scratch.set_walking(w, true);
                }
                scratch
            },
            reuse: vec![0; workers],
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

    fn reuse_tokens(&mut self, request: &Req, answer: &mut Vec<(u32, u64)>) {
        // Every worker is walked (eligibility and freshness are routing questions, not
        // residency ones, and a peer indexer has neither), but only the workers the last
        // walk changed need resetting: every other one is still walking at depth 0 with
        // reuse 0 and no boundary reason (`WalkScratch::walked`). So a request costs
        // O(holders), as a radix tree's `find_matches` does, not O(workers).
        for i in 0..self.scratch.walked().len() {
            let w = self.scratch.walked()[i] as usize;
            self.reuse[w] = 0;
            self.boundary[w] = Reasons::default();
            self.scratch.set_walking(w, true);
        }
        reuse_walk(
            request,
            &self.state.cache,
            &self.tables,
            &mut self.rule,
            &mut self.scratch,
            &mut self.reuse,
            &mut self.boundary,
        );
        answer.clear();
        answer.extend(self.scratch.walked().iter().filter_map(|&w| {
            let tokens = self.reuse[w as usize].min(request.prompt_tokens);
            (tokens > 0).then_some((w, tokens))
        }));
        answer.sort_unstable();
    }
}
