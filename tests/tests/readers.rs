//! Three readers, one contract: core's bytes reader (`parse_trace`), core's stream
//! reader (`read_trace`, here in reads of 1, 5 and all bytes) and the oracle must print
//! the same lines for every input (SPEC.md §1.1, §2). The documents are drawn from
//! JSON's own pieces, number characters above all, so that literals of every size run
//! into each other, into strings and into the end of the input, where a reader that
//! treats numbers specially is most likely to slip (a fuzzer found one such slip in 20
//! seconds: `tests/tests/fuzz_regressions.rs`).

use kvroute_core::{parse_trace, read_trace, ReadTraceError};
use proptest::prelude::*;
use std::io::{self, Read};

/// Hands out at most `step` bytes a read.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// The lines each reader prints, or `None` when it accepts the document.
fn core_lines(bytes: &[u8]) -> Option<Vec<String>> {
    parse_trace(bytes).err().map(|e| e.errors)
}

fn streamed_lines(bytes: &[u8], step: usize) -> Option<Vec<String>> {
    match read_trace(Trickle { bytes, step }) {
        Ok(_) => None,
        Err(ReadTraceError::Invalid(e)) => Some(e.errors),
        Err(ReadTraceError::Io(e)) => panic!("an in-memory source cannot fail: {e}"),
    }
}

fn oracle_lines(bytes: &[u8]) -> Option<Vec<String>> {
    kvroute_oracle::validate(bytes).err()
}

/// JSON's pieces, weighted towards number characters and the literals they make.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[-+.eE0-9]{1,6}",
        2 => Just("9".repeat(30)),
        2 => "[1-9][0-9]{0,3}[eE][+-]?[0-9]{3,5}",
        1 => "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,4})?",
        2 => prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\"a\"", "\"format\"",
            "\"kvroute-trace/1\"", "true", "null", "\\", "\"\\u00e9\"", "x", "\u{0}",
        ])
        .prop_map(str::to_owned),
    ]
}

fn document() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Loose pieces: mostly syntax errors, at every kind of position.
        prop::collection::vec(piece(), 1..12).prop_map(|pieces| pieces.concat().into_bytes()),
        // Pieces as the values of a trace-shaped object: shape errors behind the syntax.
        prop::collection::vec(piece(), 1..6).prop_map(|pieces| {
            format!(
                r#"{{"format":"kvroute-trace/1","workers":[{}],"events":[]}}"#,
                pieces.join(",")
            )
            .into_bytes()
        }),
    ]
}

proptest! {
    #[test]
    fn core_s_two_readers_and_the_oracle_print_the_same_lines(bytes in document()) {
        let core = core_lines(&bytes);
        for step in [1, 5, usize::MAX] {
            prop_assert_eq!(&streamed_lines(&bytes, step), &core, "reads of {} bytes", step);
        }
        prop_assert_eq!(oracle_lines(&bytes), core);
    }
}

/// The cap on one value (SPEC.md §1.1, §2.2) where the three readers could part: an
/// escape whose bad digit stands before the cap and whose last digit is past it, a
/// control character at the first byte past the cap, and a fraction past it. Each
/// document is 64 MiB, so there are three (a debug build masks about 10 MB/s), read by
/// core from bytes only: `core/tests/value_cap.rs` holds its stream to its bytes.
#[test]
fn the_value_cap_is_one_rule_for_the_three_readers() {
    use kvroute_core::input::VALUE_BYTES_MAX;
    let string = |content: &[u8]| [b"{\"format\": [\n \"".as_slice(), content, b"\"]}"].concat();
    let mut escape_across = vec![b'a'; VALUE_BYTES_MAX - 4];
    escape_across.extend_from_slice(br"\u1x23");
    let mut control_at = vec![b'a'; VALUE_BYTES_MAX];
    control_at.push(0x1f);
    let mut fraction = b"{\"format\": [0, -0.".to_vec();
    fraction.resize(VALUE_BYTES_MAX + 20, b'7');
    fraction.extend_from_slice(b"]}");
    let cap_line = |what: &str, line: u32, column: u32| {
        Some(vec![format!(
            "$: invalid JSON: a {what} longer than {VALUE_BYTES_MAX} bytes at line {line} column {column}"
        )])
    };
    for (doc, expected) in [
        (string(&escape_across), cap_line("string", 2, 2)),
        (string(&control_at), cap_line("string", 2, 2)),
        (fraction, cap_line("number literal", 1, 16)),
    ] {
        assert_eq!(core_lines(&doc), expected);
        assert_eq!(oracle_lines(&doc), expected);
    }
}
