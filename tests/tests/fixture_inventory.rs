//! Every fixture directory has its own test in `fixtures.rs`, so none is silently
//! skipped. This lives apart from `fixtures.rs` on purpose: the mutant check runs that
//! target, and deleting a fixture test there must show up as a *missed* mutant, not as
//! a failed baseline.

#[test]
fn every_fixture_directory_has_a_test() {
    let source = include_str!("fixtures.rs");
    let listed = source
        .split("fixture_tests!(")
        .nth(1)
        .expect("fixtures.rs invokes fixture_tests!")
        .split(')')
        .next()
        .unwrap_or_default();
    let mut listed: Vec<&str> = listed
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    listed.sort();
    assert_eq!(kvroute_harness::fixtures::valid_topics(), listed);
}
