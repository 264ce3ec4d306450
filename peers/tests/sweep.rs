//! The seed sweep over chain-structured traces: every difference has a documented
//! cause, and the one Dynamo defect known so far is found without being told about it.

use kvroute_core::output::canonical_trace_bytes;
use kvroute_peers::compare::{compare, Cause, CROSS};
use kvroute_peers::sweep::{minimal_reproduction, sweep};

const FIXTURE: &str = include_str!("../fixtures/positional_removed_abort/trace.json");

#[test]
fn documented_causes_explain_every_difference_over_600_seeds() {
    let report = sweep(0..600, true);
    let unexplained: Vec<_> = report
        .findings
        .iter()
        .map(|f| (f.seed, f.options.withhold_stale, &f.difference))
        .collect();
    assert!(unexplained.is_empty(), "new findings: {unexplained:#?}");
    // The generator reaches every cause a chain trace can show, so the classification
    // is exercised, not vacuous.
    for cause in [
        Cause::PartialBlock,
        Cause::StaleEpoch,
        Cause::OrphanStore,
        Cause::HoleEvicted,
        Cause::RemovedAbort,
    ] {
        assert!(report.count(cause) > 0, "no {} in the sweep", cause.name());
    }
    assert!(report.rows_compared > 40_000);
}

#[test]
fn the_sweep_finds_the_positional_removed_abort_on_its_own_and_shrinks_it_to_the_fixture() {
    // Without the known defect in its classification, the sweep reports it as new,
    // and only for PositionalIndexer: kvroute and RadixTree agree on every such row.
    let report = sweep(0..200, false);
    assert!(!report.findings.is_empty());
    for f in &report.findings {
        assert!(
            matches!(f.difference.comparison.as_str(), "positional" | CROSS),
            "{f:?}"
        );
        assert!(
            f.difference.peer_tokens > f.difference.reference_tokens,
            "{f:?}"
        );
    }
    let minimal = minimal_reproduction(&report.findings[0]);
    assert!(minimal.events.len() <= 3, "{minimal:#?}");
    let mut bytes = canonical_trace_bytes(&minimal);
    bytes.push(b'\n');
    assert_eq!(String::from_utf8(bytes).unwrap(), FIXTURE);
}

#[test]
fn the_fixture_shows_positional_keeping_blocks_after_an_unknown_hash() {
    let trace = kvroute_core::parse_trace(FIXTURE.as_bytes()).expect("the fixture is valid");
    let options = kvroute_peers::sweep::modes(false)[0];
    let report = compare(&trace, options);
    // One store of the chain k0 → k2, one evict of {k10, k2} (k10 was never stored,
    // and byte order lists it first), one request for k0, k2.
    assert_eq!(report.tally("radix_tree").rows_differing, 0);
    let positional = report.tally("positional");
    assert_eq!(
        (
            positional.rows_compared,
            positional.count(Cause::NewFinding)
        ),
        (1, 1)
    );
    let d = &report.first[0];
    assert_eq!((d.reference_tokens, d.peer_tokens), (16, 32));
    // With the defect known, the same row is classified as it.
    let known = compare(&trace, kvroute_peers::sweep::modes(true)[0]);
    assert_eq!(known.tally("positional").count(Cause::RemovedAbort), 1);
    assert_eq!(known.tally(CROSS).count(Cause::RemovedAbort), 1);
}
