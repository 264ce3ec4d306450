//! One trace replayed into kvroute and every Dynamo indexer at once, in-process, with
//! every differing `(request, worker)` row explained.
//!
//! kvroute is the reference ([`Reference`]): each cache event goes to kvroute first,
//! then (unless `withhold_stale` and kvroute dropped it) to each Dynamo indexer in the
//! same order. At each request every indexer answers for every worker, and a row on
//! which a peer differs from kvroute gets the first [`Cause`] that applies, by the
//! classification shared with `kvroute peer run` (`kvroute_peer_core::classify`), with
//! Dynamo's own rejections of stores and removals as the evidence.

use crate::chains::ChainMap;
use crate::dynamo::{DynamoIndex, DynamoKind};
use kvroute_core::input::Trace;
use kvroute_core::route::{CEvent, Compiled, Req, Step};
pub use kvroute_peer_core::classify::{
    full_block_count, full_blocks_view, Cause, Difference, Options, Report, Tally, CROSS,
    FIRST_DIFFERENCES,
};
use kvroute_peer_core::classify::{record, PeerEvidence, Reference, Rules};
use kvroute_peer_core::{densify, Peer};

/// The classification rules of a Dynamo indexer's rows.
pub fn rules(kind: DynamoKind) -> Rules {
    match kind {
        DynamoKind::RadixTree => Rules::RadixTree,
        DynamoKind::Positional => Rules::Positional,
    }
}

/// Replays `trace` (already validated) into kvroute and both Dynamo indexers.
pub fn compare(trace: &Trace, options: Options) -> Report {
    let view;
    let trace = if options.full_blocks_only {
        view = full_blocks_view(trace, options.block_tokens);
        &view
    } else {
        trace
    };
    let compiled = Compiled::new(trace);
    let chains = ChainMap::new(&compiled);
    let workers = compiled.worker_count();
    let mut reference = Reference::new(&compiled, chains.shape(), options);
    let mut dynamo = dynamo_indexes(&compiled, &chains, options.block_tokens);
    let mut evidence: Vec<PeerEvidence> =
        dynamo.iter().map(|_| PeerEvidence::new(workers)).collect();
    let mut tallies = peer_tallies(&dynamo);
    let mut first = Vec::new();
    let mut requests = 0;
    let mut sparse = Vec::new();
    let mut answers = vec![vec![0u64; workers]; dynamo.len()];

    for event in &compiled.events {
        match &event.step {
            Step::Cache { worker, epoch, op } => {
                if !reference.cache_event(*worker, event.tick, *epoch, op) {
                    continue;
                }
                for (peer, evidence) in dynamo.iter_mut().zip(&mut evidence) {
                    let applied = peer.apply_cache_event(*worker, event.tick, *epoch, op);
                    evidence.note(*worker, op, applied);
                }
            }
            Step::Load { .. } => {}
            Step::Request(request) => {
                requests += 1;
                dynamo_answers(&mut dynamo, request, &mut sparse, &mut answers);
                let kvroute = reference.answer(request).to_vec();
                let rows = RequestRows {
                    event,
                    compiled: &compiled,
                    request,
                };
                for (p, peer) in dynamo.iter().enumerate() {
                    let rules = rules(peer.kind());
                    record_rows(
                        &mut tallies[p],
                        &mut first,
                        &rows,
                        &kvroute,
                        &answers[p],
                        |w, kv, d| reference.cause(rules, &evidence[p], request, w, kv, d),
                    );
                }
                // Dynamo against itself: RadixTree is the reference.
                let cross = tallies.len() - 1;
                record_rows(
                    &mut tallies[cross],
                    &mut first,
                    &rows,
                    &answers[0],
                    &answers[1],
                    |w, r, p| reference.cross_cause(&evidence[1], request, w, r, p),
                );
            }
        }
    }
    Report {
        workers,
        requests,
        forked_keys: chains.shape().forked_keys(),
        tallies,
        first,
    }
}

/// Both Dynamo indexers, empty, in `DynamoKind::ALL`'s order.
fn dynamo_indexes(compiled: &Compiled, chains: &ChainMap, block_tokens: u64) -> Vec<DynamoIndex> {
    DynamoKind::ALL
        .iter()
        .map(|&kind| DynamoIndex::new(kind, compiled, chains.clone(), block_tokens))
        .collect()
}

/// One tally for each Dynamo indexer against kvroute, then one for Dynamo against
/// itself.
fn peer_tallies(dynamo: &[DynamoIndex]) -> Vec<Tally> {
    dynamo
        .iter()
        .map(|d| Tally::new(d.name()))
        .chain([Tally::new(CROSS)])
        .collect()
}

/// Each Dynamo indexer's answer to `request`, dense by worker, into `answers`.
fn dynamo_answers(
    dynamo: &mut [DynamoIndex],
    request: &Req,
    sparse: &mut Vec<(u32, u64)>,
    answers: &mut [Vec<u64>],
) {
    for (peer, answer) in dynamo.iter_mut().zip(answers) {
        peer.reuse_tokens(request, sparse);
        densify(sparse, answer);
    }
}

/// One request's place in the trace, for the rows recorded on it.
struct RequestRows<'a> {
    event: &'a CEvent<'a>,
    compiled: &'a Compiled<'a>,
    request: &'a Req<'a>,
}

/// Records one request's row for every worker, `peer_tokens` against
/// `reference_tokens`; `cause` explains a row on which they differ, and is asked for
/// nothing else.
fn record_rows(
    tally: &mut Tally,
    first: &mut Vec<Difference>,
    rows: &RequestRows,
    reference_tokens: &[u64],
    peer_tokens: &[u64],
    mut cause: impl FnMut(usize, u64, u64) -> Cause,
) {
    for w in 0..rows.compiled.worker_count() {
        let (r, p) = (reference_tokens[w], peer_tokens[w]);
        let cause = (r != p).then(|| cause(w, r, p));
        record(
            tally,
            first,
            rows.event,
            rows.compiled,
            rows.request,
            w,
            r,
            p,
            cause,
        );
    }
}
