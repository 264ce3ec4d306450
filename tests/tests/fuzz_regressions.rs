//! Inputs the fuzzers found, replayed as ordinary tests. Each says what broke and why.

use kvroute_harness::oracles;
use std::path::PathBuf;

fn regression(target: &str, name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Found by `parse_trace` in its first seconds (a 10.9 KB mutation of a fixture, cut
/// down by hand to 101 unknown members). The bug was in the harness's own check, not in
/// either implementation: both correctly print 100 errors and then
/// `... and 1 more errors` (SPEC.md §2.3), but the oracle demanded that every line,
/// the count included, start with a JSON path.
#[test]
fn more_than_a_hundred_errors_end_with_a_count_line() {
    let data = regression("parse_trace", "more-than-100-errors.json");
    let core = kvroute_core::parse_trace(&data).unwrap_err().lines();
    assert_eq!(core.len(), 101);
    assert_eq!(core[100], "... and 1 more errors");
    oracles::parse_trace(&data);
}

/// Found by `parse_trace` after about four minutes and 1.5 million executions: the
/// 7-byte input `{"":5}`. A top-level member named `""` has an empty path. Core printed
/// it as `: unknown member ""` while the oracle printed `$: ...`; SPEC.md did not say
/// which. Together with the next case this led to SPEC.md §2.1's bracket rule.
#[test]
fn an_empty_top_level_member_name_has_a_bracketed_path() {
    let data = regression("parse_trace", "empty-top-level-member.json");
    let core = kvroute_core::parse_trace(&data).unwrap_err().lines();
    assert_eq!(core.last().unwrap(), "$[\"\"]: unknown member \"\"");
    oracles::parse_trace(&data);
}

/// Found by `parse_trace` in the restarted campaign: a member named `": ks"`. Names
/// were written into paths unescaped, so the line `: ks: unknown member ": ks"` could
/// not be split into a path and a reason (and `a.b` could be one member or two).
/// SPEC.md §2.1 now writes any name that is not a plain identifier as a bracketed JSON
/// string; both implementations changed with it.
#[test]
fn a_member_name_with_a_colon_has_a_readable_path() {
    let data = regression("parse_trace", "colon-in-member-name.json");
    let core = kvroute_core::parse_trace(&data).unwrap_err().lines();
    assert_eq!(core.last().unwrap(), "$[\": ks\"]: unknown member \": ks\"");
    assert_eq!(
        kvroute_harness::generators::parse_error_path(core.last().unwrap()),
        Some("$[\": ks\"]")
    );
    oracles::parse_trace(&data);
}

/// Found by `parse_trace` in 20 seconds: the 19-byte input `2E4224EE\0...`, a huge
/// literal running straight into more number characters. Three readers gave three
/// lines: core's bytes reader `number out of range at line 1 column 6`, its stream
/// reader `... column 7`, the oracle `trailing characters at line 1 column 7`. No
/// literal is out of range (SPEC.md §1.1): the literal `2E4224` is read and the `E`
/// after it is the error. Core's masking left the whole run to serde_json and now masks
/// the literal the run starts with.
#[test]
fn a_huge_literal_before_more_number_characters_is_a_trailing_character() {
    let data = regression("parse_trace", "huge-literal-before-number-characters.json");
    let expected = ["$: invalid JSON: trailing characters at line 1 column 7"];
    assert_eq!(
        kvroute_core::parse_trace(&data).unwrap_err().errors,
        expected
    );
    match kvroute_core::read_trace(data.as_slice()) {
        Err(kvroute_core::ReadTraceError::Invalid(errors)) => assert_eq!(errors.errors, expected),
        other => panic!("the stream reader said {other:?}"),
    }
    assert_eq!(kvroute_oracle::validate(&data).unwrap_err(), expected);
    oracles::parse_trace(&data);
}
