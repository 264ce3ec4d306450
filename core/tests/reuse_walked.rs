//! `WalkScratch::walked` (route/cache/reuse.rs): the workers a reuse walk changed. A caller
//! that walks every worker for each request (the `peers` crate's kvroute adapter)
//! resets only those between walks, so these tests pin that the list is complete
//! (holders reached, boundary-only holders, workers passed by a 0-token segment), that
//! it leaves out workers the walk never reached, and that resetting only it gives the
//! same answers as resetting every worker. The row builder's walk, which reads which
//! workers it walks off the rows as it reaches them, is pinned against the walk of
//! workers marked beforehand.

use kvroute_core::harness::reuse_walk_rows;
use kvroute_core::parse_trace;
use kvroute_core::route::RouterState;
use kvroute_core::route::{reuse_walk, WalkScratch};
use kvroute_core::route::{Compiled, Req, Step};
use kvroute_core::route::{NamespaceRule, Sharing};
use kvroute_core::route::{Reason, Reasons};
use serde_json::{json, Value};

fn entry(tenant: &str, key: &str, tokens: u64) -> Value {
    json!({ "tenant": tenant, "model": "m1", "adapter": "base", "key": key, "tokens": tokens })
}

fn worker(id: &str, cache: Vec<Value>) -> Value {
    json!({ "id": id, "model": "m1", "adapters": [], "prefill_rate": 100,
            "decode_rate": 10, "queued_prefill": 0, "active_decode": 0,
            "observed_tick": 0, "epoch": 0, "cache": cache })
}

fn request(seq: u64, id: &str, prefix: Value, prompt_tokens: u64) -> Value {
    json!({ "seq": seq, "tick": seq, "type": "request", "id": id, "tenant": "acme",
            "model": "m1", "adapter": "base", "prefix": prefix,
            "prompt_tokens": prompt_tokens, "decode_tokens": 1 })
}

/// w0 holds k0 whole and k1 in part; w1 holds k0 for another tenant (a boundary reason
/// only); w2 holds k1 only (unreachable behind k0); w3 holds nothing.
fn trace() -> Value {
    json!({
        "format": "kvroute-trace/1",
        "workers": [
            worker("w0", vec![entry("acme", "k0", 512), entry("acme", "k1", 100)]),
            worker("w1", vec![entry("beta", "k0", 512)]),
            worker("w2", vec![entry("acme", "k1", 512)]),
            worker("w3", vec![]),
        ],
        "events": [
            request(1, "r-k0-k1", json!([{"key": "k0", "tokens": 512}, {"key": "k1", "tokens": 512}]), 1024),
            request(2, "r-k1", json!([{"key": "k1", "tokens": 512}]), 512),
            request(3, "r-empty-k1", json!([{"key": "k0", "tokens": 0}, {"key": "k1", "tokens": 512}]), 512),
        ]
    })
}

struct Walker<'c, 't> {
    compiled: &'c Compiled<'t>,
    state: RouterState,
    rule: NamespaceRule<'t>,
    scratch: WalkScratch,
    reuse: Vec<u64>,
    boundary: Vec<Reasons>,
}

impl<'c, 't> Walker<'c, 't> {
    fn new(compiled: &'c Compiled<'t>) -> Self {
        let n = compiled.worker_count();
        let mut scratch = WalkScratch::new(n);
        for w in 0..n {
            scratch.set_walking(w, true);
        }
        Walker {
            compiled,
            state: RouterState::initial(compiled),
            rule: NamespaceRule::new(Sharing::new(compiled.sharing)),
            scratch,
            reuse: vec![0; n],
            boundary: vec![Reasons::default(); n],
        }
    }

    fn walk(&mut self, request: &Req) {
        reuse_walk(
            request,
            &self.state.cache,
            &self.compiled.tables,
            &mut self.rule,
            &mut self.scratch,
            &mut self.reuse,
            &mut self.boundary,
        );
    }

    /// What the adapter does between requests: reset only the walked workers.
    fn reset_walked(&mut self) {
        for &w in self.scratch.walked().to_vec().iter() {
            let w = w as usize;
            self.reuse[w] = 0;
            self.boundary[w] = Reasons::default();
            self.scratch.set_walking(w, true);
        }
    }

    fn walked_sorted(&self) -> Vec<u32> {
        let mut walked = self.scratch.walked().to_vec();
        walked.sort_unstable();
        walked
    }
}

fn requests<'c, 't>(compiled: &'c Compiled<'t>) -> Vec<&'c Req<'t>> {
    compiled
        .events
        .iter()
        .filter_map(|e| match &e.step {
            Step::Request(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn walked_lists_the_holders_reached_and_boundary_only_holders_not_the_unreached() {
    let trace = parse_trace(trace().to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let mut walker = Walker::new(&compiled);
    walker.walk(requests(&compiled)[0]);
    // w0 reached k0 and k1; w1 only k0 (a tenant boundary); w2's k1 is behind k0.
    assert_eq!(walker.walked_sorted(), vec![0, 1]);
    assert_eq!(walker.reuse, vec![612, 0, 0, 0]);
    assert!(walker.boundary[1].contains(Reason::TenantMismatch));
    // Each worker once, even when reached at several segments.
    assert_eq!(walker.scratch.walked().len(), 2);
}

#[test]
fn a_zero_token_segment_passes_every_walking_worker_and_lists_them() {
    let trace = parse_trace(trace().to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let mut walker = Walker::new(&compiled);
    walker.walk(requests(&compiled)[2]);
    assert_eq!(walker.walked_sorted(), vec![0, 1, 2, 3]);
    assert_eq!(walker.reuse, vec![100, 0, 512, 0]);
}

#[test]
fn resetting_only_the_walked_workers_answers_as_a_full_reset_does() {
    let trace = parse_trace(trace().to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let requests = requests(&compiled);
    let mut sparse = Walker::new(&compiled);
    // Every order of the three requests, twice over, so each follows each.
    let orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    for order in orders.iter().chain(orders.iter()) {
        for &r in order {
            sparse.reset_walked();
            sparse.walk(requests[r]);
            let mut full = Walker::new(&compiled);
            full.walk(requests[r]);
            assert_eq!(sparse.reuse, full.reuse, "request {r}");
            assert_eq!(sparse.boundary, full.boundary, "request {r}");
            assert_eq!(sparse.walked_sorted(), full.walked_sorted(), "request {r}");
        }
    }
}

/// The row builder's walk reads which workers it walks off the rows (no reason yet:
/// an ineligible row lists why, and so does a stale one) as it first reaches each
/// one; it must answer as the walk of the eligible, fresh workers marked beforehand
/// does, request after request on one scratch, however the rows change between walks.
#[test]
fn the_walk_from_rows_answers_as_the_walk_of_marked_workers() {
    let trace = parse_trace(trace().to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let n = compiled.worker_count();
    let state = RouterState::initial(&compiled);
    let mut rule = NamespaceRule::new(Sharing::new(compiled.sharing));
    let mut from_rows = WalkScratch::new(n);
    // Per walk: which rows are eligible, and which carry a reason before the walk.
    let row_sets: [([bool; 4], [bool; 4]); 4] = [
        ([true; 4], [false; 4]),
        ([false, true, true, true], [false; 4]),
        ([true; 4], [true, false, false, false]),
        ([true, true, false, true], [false, false, false, true]),
    ];
    for request in requests(&compiled) {
        for (eligible, stale) in &row_sets {
            let reasons: Vec<Reasons> = (0..n)
                .map(|w| {
                    let mut r = Reasons::default();
                    if !eligible[w] {
                        r.insert(Reason::ModelNotServed);
                    }
                    if stale[w] {
                        r.insert(Reason::StaleView);
                    }
                    r
                })
                .collect();
            let mut marked = WalkScratch::new(n);
            for w in 0..n {
                marked.set_walking(w, eligible[w] && !stale[w]);
            }
            let (mut marked_reuse, mut marked_reasons) = (vec![0; n], reasons.clone());
            reuse_walk(
                request,
                &state.cache,
                &compiled.tables,
                &mut rule,
                &mut marked,
                &mut marked_reuse,
                &mut marked_reasons,
            );
            let (mut rows_reuse, mut rows_reasons) = (vec![0; n], reasons.clone());
            reuse_walk_rows(
                request,
                &state.cache,
                &compiled.tables,
                &mut rule,
                &mut from_rows,
                &mut rows_reuse,
                &mut rows_reasons,
            );
            let case = format!("{} {eligible:?} {stale:?}", request.id);
            assert_eq!(rows_reuse, marked_reuse, "{case}");
            assert_eq!(rows_reasons, marked_reasons, "{case}");
            assert!(from_rows.walked().is_empty(), "{case}");
            // The cases walk something, and a row that is not walked gets no reuse.
            if request.id == "r-k0-k1" && stale == &[false; 4] {
                let expected = if eligible[0] { [612, 0, 0, 0] } else { [0; 4] };
                assert_eq!(rows_reuse, expected, "{case}");
            }
        }
    }
}

/// A worker holding one key under several namespaces has its entries side by side in
/// the key's holders, and the walk judges them together: the usable one counts and a
/// boundary reason is kept only when no entry of the segment is usable.
#[test]
fn a_worker_holding_a_key_under_two_tenants_reuses_its_own_and_records_no_boundary() {
    let trace = json!({
        "format": "kvroute-trace/1",
        "workers": [
            worker("w0", vec![entry("acme", "k0", 512), entry("beta", "k0", 512),
                              entry("beta", "k1", 512), entry("acme", "k1", 100)]),
            worker("w1", vec![entry("beta", "k0", 512), entry("gamma", "k0", 512)]),
        ],
        "events": [
            request(1, "r", json!([{"key": "k0", "tokens": 512}, {"key": "k1", "tokens": 512}]), 1024),
        ]
    });
    let trace = parse_trace(trace.to_string().as_bytes()).unwrap();
    let compiled = Compiled::new(&trace);
    let mut walker = Walker::new(&compiled);
    walker.walk(requests(&compiled)[0]);
    // w0: all of k0 from acme's entry, then 100 of k1 (beta's whole k1 is not usable).
    assert_eq!(walker.reuse, vec![612, 0]);
    assert!(walker.boundary[0].is_empty(), "{:?}", walker.boundary[0]);
    // w1 holds k0 only for other tenants: a boundary, and no reuse.
    assert!(walker.boundary[1].contains(Reason::TenantMismatch));
    assert_eq!(walker.walked_sorted(), vec![0, 1]);
}
