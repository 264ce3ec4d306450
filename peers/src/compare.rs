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
use kvroute_core::route::{Compiled, Step};
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
    let mut dynamo: Vec<DynamoIndex> = DynamoKind::ALL
        .iter()
        .map(|&kind| DynamoIndex::new(kind, &compiled, chains.clone(), options.block_tokens))
        .collect();
    let mut evidence: Vec<PeerEvidence> =
        dynamo.iter().map(|_| PeerEvidence::new(workers)).collect();
    let mut tallies: Vec<Tally> = dynamo
        .iter()
        .map(|d| Tally::new(d.name()))
        .chain([Tally::new(CROSS)])
        .collect();
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
                for (peer, answer) in dynamo.iter_mut().zip(&mut answers) {
                    peer.reuse_tokens(request, &mut sparse);
                    densify(&sparse, answer);
                }
                let kvroute = reference.answer(request).to_vec();
                for (p, peer) in dynamo.iter().enumerate() {
                    for w in 0..workers {
                        let (kv, d) = (kvroute[w], answers[p][w]);
                        let cause = (kv != d).then(|| {
                            reference.cause(rules(peer.kind()), &evidence[p], request, w, kv, d)
                        });
                        record(
                            &mut tallies[p],
                            &mut first,
                            event,
                            &compiled,
                            request,
                            w,
                            kv,
                            d,
                            cause,
                        );
                    }
                }
                // Dynamo against itself: RadixTree is the reference.
                let (radix, positional) = (&answers[0], &answers[1]);
                let cross = tallies.len() - 1;
                for w in 0..workers {
                    let (r, p) = (radix[w], positional[w]);
                    let cause =
                        (r != p).then(|| reference.cross_cause(&evidence[1], request, w, r, p));
                    record(
                        &mut tallies[cross],
                        &mut first,
                        event,
                        &compiled,
                        request,
                        w,
                        r,
                        p,
                        cause,
                    );
                }
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
