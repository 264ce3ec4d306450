//! The cap on one string or number literal (SPEC.md §1.1, §2.2) at its real size, on
//! bytes (`parse_trace`) and on a stream (`read_trace`) alike: the error names the
//! value's start, an error before the cap is still the document's first, and a stream
//! whose string never ends is read no further than the cap.

use kvroute_core::input::VALUE_BYTES_MAX;
use kvroute_core::{parse_trace, read_trace, ReadTraceError, ValidationErrors};
use std::io::{self, Read};

/// The error lines of `doc`, the same on bytes and on a stream read in 4 KiB reads.
/// (A debug build masks about 10 MB/s, so each document here is read twice only;
/// the cap's every boundary is pinned at a small cap in `input::json`'s own tests.)
fn errors(doc: &[u8]) -> Vec<String> {
    let whole = parse_trace(doc).expect_err("the document is invalid");
    let streamed = match read_trace(Chunked {
        bytes: doc,
        step: 4096,
    }) {
        Err(ReadTraceError::Invalid(errors)) => errors,
        other => panic!("expected an invalid trace, got {other:?}"),
    };
    assert_eq!(streamed, whole, "a stream read 4096 bytes at a time");
    lines(&whole)
}

fn lines(errors: &ValidationErrors) -> Vec<String> {
    errors.to_string().lines().map(str::to_owned).collect()
}

struct Chunked<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

fn doc(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn string_of(len: usize) -> Vec<u8> {
    let mut s = vec![b'"'];
    s.resize(1 + len, b'a');
    s.push(b'"');
    s
}

#[test]
fn a_string_one_byte_over_the_cap_is_a_syntax_error_at_its_quote() {
    let over = doc(&[b"{\n", &string_of(VALUE_BYTES_MAX + 1), b": 1}"]);
    assert_eq!(
        errors(&over),
        [format!(
            "$: invalid JSON: a string longer than {VALUE_BYTES_MAX} bytes at line 2 column 1"
        )]
    );
}

#[test]
fn a_literal_over_the_cap_is_a_syntax_error_where_it_starts_and_one_at_it_is_not() {
    let mut digits = vec![b'1'; VALUE_BYTES_MAX + 1];
    let literal = doc(&[b"{\n  \"events\": [\n    ", &digits, b"]}"]);
    assert_eq!(
        lines(&parse_trace(&literal).unwrap_err()),
        [format!(
            "$: invalid JSON: a number literal longer than {VALUE_BYTES_MAX} bytes at line 3 column 5"
        )]
    );
    // A fraction counts its point and digits; at the cap exactly it is a literal like
    // any other, and fails the integer rule at its path.
    digits.truncate(VALUE_BYTES_MAX - 2);
    let at = doc(&[br#"{"format": 0."#, &digits, b"}"]);
    let first = lines(&parse_trace(&at).unwrap_err()).remove(0);
    assert!(
        first.starts_with("format: expected \"kvroute-trace/1\", found 0.111"),
        "{first}"
    );
}

/// `{"format": "` and then `a`s without end, counting what is read.
struct EndlessString {
    head: &'static [u8],
    served_bytes: u64,
}

impl Read for EndlessString {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if self.head.is_empty() {
            buf.fill(b'a');
            buf.len()
        } else {
            let n = self.head.len().min(buf.len());
            buf[..n].copy_from_slice(&self.head[..n]);
            self.head = &self.head[n..];
            n
        };
        self.served_bytes += n as u64;
        Ok(n)
    }
}

#[test]
fn a_stream_whose_string_never_ends_is_read_no_further_than_the_cap() {
    let mut source = EndlessString {
        head: br#"{"format": ""#,
        served_bytes: 0,
    };
    let error = match read_trace(&mut source) {
        Err(ReadTraceError::Invalid(errors)) => lines(&errors),
        other => panic!("expected an invalid trace, got {other:?}"),
    };
    assert_eq!(
        error,
        [format!(
            "$: invalid JSON: a string longer than {VALUE_BYTES_MAX} bytes at line 1 column 12"
        )]
    );
    let read_past_cap = source.served_bytes - VALUE_BYTES_MAX as u64;
    assert!(
        read_past_cap <= 1 << 20,
        "{read_past_cap} bytes read past the cap"
    );
}
