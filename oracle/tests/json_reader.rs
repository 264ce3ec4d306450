//! SPEC §2 stage 1: the syntax error line is `$: invalid JSON: <parser message>`, the
//! message serde_json (version 1) gives for the document read from a byte slice, with
//! every grammatical number literal read as in range. The oracle's reader is its own;
//! these tests hold its lines to serde_json's on fixed and on generated documents, and
//! pin the one line that is SPEC's own: a string or number literal over 67,108,864
//! bytes (§1.1, §2.2).

use kvroute_oracle::validate;

/// The oracle's first error line for `bytes`.
fn first_line(bytes: &[u8]) -> String {
    match validate(bytes) {
        Ok(_) => "accepted".to_owned(),
        Err(lines) => lines[0].clone(),
    }
}

/// What serde_json says of a document.
enum Serde {
    Reads,
    /// Only a number's range: SPEC reads every grammatical literal as in range, so
    /// serde_json's answer is not SPEC's here.
    OutOfRange,
    /// The line SPEC §2 prescribes.
    Rejects(String),
}

fn serde(bytes: &[u8]) -> Serde {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(_) => Serde::Reads,
        Err(e) if e.to_string().starts_with("number out of range") => Serde::OutOfRange,
        Err(e) => Serde::Rejects(format!("$: invalid JSON: {e}")),
    }
}

fn serde_line(bytes: &[u8]) -> Option<String> {
    match serde(bytes) {
        Serde::Rejects(line) => Some(line),
        Serde::Reads | Serde::OutOfRange => None,
    }
}

#[test]
fn fixed_syntax_errors_carry_serde_json_messages() {
    let cases: &[&[u8]] = &[
        b"",
        b"   ",
        b"{",
        b"{\"a\"",
        b"{\"a\":",
        b"{\"a\":1,}",
        b"{\"a\":1 \"b\":2}",
        b"{,}",
        b"{1:2}",
        b"[1,]",
        b"[1 2]",
        b"[",
        b"[,1]",
        b"tru",
        b"nul",
        b"trux",
        b"-",
        b"-a",
        b"01",
        b"1.",
        b"1.x",
        b"1e",
        b"1e+",
        b"1ex",
        b"\"abc",
        b"\"a\\",
        b"\"a\\x\"",
        b"\"a\\u12\"",
        b"\"a\\u12g4\"",
        b"\"\\udc00\"",
        b"\"\\ud800\"",
        b"\"\\ud800\\n\"",
        b"\"\\ud800\\u0041\"",
        b"\"\\ud800",
        b"\"a\nb\"",
        b"\"\xff\"",
        b"\"ab\xc3\"",
        b"\"\\n\xe2\x82\"",
        b"{}\n\n  x",
        b"[1]]",
        b"\n\n[1,\n2,\n]",
        b"{\"a\" 1}",
        b"{\"a\":1}\x00",
        b"\x85",
    ];
    for case in cases {
        let expected = serde_line(case).unwrap_or_else(|| panic!("{case:?} is a syntax error"));
        assert_eq!(
            first_line(case),
            expected,
            "{:?}",
            String::from_utf8_lossy(case)
        );
    }
}

#[test]
fn the_fuzz_input_is_trailing_characters_after_an_in_range_number() {
    // `2E4224` is a grammatical literal, read as if in range (SPEC §1.1, §2): the
    // first syntax error is the `E` after it.
    assert_eq!(
        first_line(b"2E4224EE\x0022EEE\x854E4\x00"),
        "$: invalid JSON: trailing characters at line 1 column 7"
    );
    assert_eq!(
        first_line(b"[1e400,"),
        "$: invalid JSON: EOF while parsing a value at line 1 column 7"
    );
}

#[test]
fn nesting_is_limited_as_serde_json_limits_it() {
    for depth in [126usize, 127, 128, 129, 200] {
        let mut doc = "[".repeat(depth);
        doc.push_str(&"]".repeat(depth));
        match serde_line(doc.as_bytes()) {
            Some(expected) => assert_eq!(first_line(doc.as_bytes()), expected, "depth {depth}"),
            None => assert_eq!(
                first_line(doc.as_bytes()),
                "$: expected an object, found [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[...",
                "depth {depth}"
            ),
        }
        let objects = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        if let Some(expected) = serde_line(objects.as_bytes()) {
            assert_eq!(
                first_line(objects.as_bytes()),
                expected,
                "object depth {depth}"
            );
        }
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const PIECES: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\"a\"",
    b"\"k\":",
    b"0",
    b"1",
    b"23",
    b"-",
    b".",
    b"e",
    b"E",
    b"+",
    b"5.5",
    b"1e3",
    b"-0",
    b" ",
    b"\n",
    b"\t",
    b"\r",
    b"\\",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"d834",
    b"\\n",
    b"x",
    b"true",
    b"fals",
    b"null",
    b"\x00",
    b"\x1f",
    b"\xc3\xa9",
    b"\xe2\x82",
    b"\xff",
    b"\xf0\x9f\x98\x80",
    b"\"\\u00e9\"",
    b"[1,2]",
    b"{}",
];

fn generated(rng: &mut Rng) -> Vec<u8> {
    let mut doc = Vec::new();
    let pieces = 1 + rng.below(14);
    // Most documents start like a value, so errors come after some structure.
    if rng.below(4) > 0 {
        doc.extend_from_slice(if rng.below(2) == 0 { b"{\"a\":" } else { b"[" });
    }
    for _ in 0..pieces {
        doc.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
    doc
}

#[test]
fn generated_documents_get_serde_json_lines() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut compared = 0;
    for _ in 0..60_000 {
        let doc = generated(&mut rng);
        if doc.starts_with(b"\xef\xbb\xbf") {
            continue;
        }
        let ours = first_line(&doc);
        match serde(&doc) {
            Serde::OutOfRange => {}
            Serde::Rejects(expected) => {
                compared += 1;
                assert_eq!(ours, expected, "{:?}", String::from_utf8_lossy(&doc));
            }
            Serde::Reads => assert!(
                !ours.starts_with("$: invalid JSON"),
                "{ours} for a document serde_json reads: {:?}",
                String::from_utf8_lossy(&doc)
            ),
        }
    }
    assert!(compared > 30_000, "only {compared} syntax errors compared");
}

// ---------------------------------------------------------------------------------
// SPEC §1.1, §2.2: no string or number literal is longer than 67,108,864 bytes. The
// cap's line is SPEC's own; below the cap serde_json's line is still the rule, so a
// document that stays within it is also held to serde_json where serde_json reads its
// numbers as SPEC does (`assert_serde_line`). Every expected line is counted by hand
// from the layout written next to it (lines from 1, columns in bytes from 1).

/// The cap, written out as SPEC writes it rather than taken from the oracle.
const CAP_BYTES: usize = 67_108_864;

/// `$: invalid JSON: a <what> longer than 67108864 bytes at line L column C`.
fn cap_line(what: &str, line: usize, column: usize) -> String {
    format!("$: invalid JSON: a {what} longer than 67108864 bytes at line {line} column {column}")
}

/// The document made of `parts` in order.
fn joined(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Holds the oracle's first line for a long document to `expected`; `case` names it,
/// since the document itself is too long to print.
fn assert_line(case: &str, doc: &[u8], expected: &str) {
    assert_eq!(first_line(doc), expected, "{case}");
}

/// As [`assert_line`], for a document within the cap: serde_json must say the same.
fn assert_serde_line(case: &str, doc: &[u8], expected: &str) {
    assert_line(case, doc, expected);
    assert_eq!(
        serde_line(doc).as_deref(),
        Some(expected),
        "{case}: serde_json"
    );
}

#[test]
fn a_string_of_the_cap_is_read_and_one_byte_more_is_the_cap_error() {
    // Line 3 is `    "` + the string: its quote at column 5, its bytes at columns
    // 6 ..= CAP + 5, the closing quote at CAP + 6, then `, x`: the `x` at CAP + 9.
    let exact = joined(&[
        b"{\n  \"format\": [\n    \"",
        &b"a".repeat(CAP_BYTES),
        b"\", x]}",
    ]);
    assert_serde_line(
        "exactly the cap",
        &exact,
        "$: invalid JSON: expected value at line 3 column 67108873",
    );
    drop(exact);

    // Line 2 is `  "workers": ["`: the string's quote is at column 15.
    let head: &[u8] = b"{\"format\": \"kvroute-trace/1\",\n  \"workers\": [\"";
    let mut doc = joined(&[head, &b"a".repeat(CAP_BYTES + 1)]);
    assert_line("never closed", &doc, &cap_line("string", 2, 15));
    doc.extend_from_slice(b"\"], \"events\": []}");
    assert_line("closed", &doc, &cap_line("string", 2, 15));
    // Cut back to the cap and left open, the string ends at its last byte, column
    // 15 + CAP: the reader never reached a byte past the cap.
    doc.truncate(head.len() + CAP_BYTES);
    assert_serde_line(
        "the cap, never closed",
        &doc,
        "$: invalid JSON: EOF while parsing a string at line 2 column 67108879",
    );
}

#[test]
fn a_member_name_over_the_cap() {
    // Line 3 is `   {"` + the name: its quote at column 5.
    let doc = joined(&[b"[\n\n   {\"", &b"k".repeat(CAP_BYTES + 1), b"\": 1}]"]);
    assert_line("member name", &doc, &cap_line("string", 3, 5));
}

#[test]
fn errors_inside_a_long_string_before_its_cap_come_first() {
    // Line 2 is ` "` + the string: its quote at column 2, its byte k (from 0) at
    // column 3 + k, so byte CAP - 1 (the 67,108,864th) at column 67108866.
    let head: &[u8] = b"[\n \"";
    let mut doc = joined(&[head, &b"a".repeat(CAP_BYTES + 8), b"\"]"]);
    let last_within = head.len() + CAP_BYTES - 1;
    let first_beyond = last_within + 1;
    let over = cap_line("string", 2, 2);
    assert_line("plain", &doc, &over);

    doc[last_within] = 0x1f;
    assert_serde_line(
        "control character at the cap's last byte",
        &doc,
        "$: invalid JSON: control character (\\u0000-\\u001F) found while parsing a string at line 2 column 67108866",
    );
    doc[last_within] = b'a';
    // The byte past the cap is reached before it is judged.
    doc[first_beyond] = 0x1f;
    assert_line("control character past the cap", &doc, &over);
    doc[first_beyond] = b'a';

    // A bad escape whose second byte is the cap's last is reported at that byte.
    doc[last_within - 1] = b'\\';
    doc[last_within] = b'x';
    assert_serde_line(
        "bad escape within the cap",
        &doc,
        "$: invalid JSON: invalid escape at line 2 column 67108866",
    );
    doc[last_within - 1] = b'a';
    // Escapes count as written: one whose second byte is past the cap is too long.
    doc[last_within] = b'\\';
    doc[first_beyond] = b'x';
    assert_line("bad escape across the cap", &doc, &over);
    doc[first_beyond] = b'n';
    assert_line("good escape across the cap", &doc, &over);
    doc[last_within] = b'a';
    doc[first_beyond] = b'a';

    // UTF-8 is judged at the closing quote, which a string over the cap never reaches.
    doc[head.len()] = 0xff;
    assert_line("bad UTF-8 over the cap", &doc, &over);
    // Within the cap it is serde_json's error: the bytes after the first bad one are
    // counted back from the closing quote (column 3 + CAP) to the bad byte, column 3.
    doc.truncate(head.len() + CAP_BYTES);
    doc.extend_from_slice(b"\"]");
    assert_serde_line(
        "bad UTF-8 within the cap",
        &doc,
        "$: invalid JSON: invalid unicode code point at line 2 column 3",
    );
}

#[test]
fn escapes_count_as_written() {
    // `["` + 33,554,432 `\n` escapes (the cap exactly) + `" x]`: the closing quote at
    // column 3 + CAP, the `x` at 5 + CAP.
    let newlines = b"\\n".repeat(CAP_BYTES / 2);
    let exact = joined(&[b"[\"", &newlines, b"\" x]"]);
    assert_serde_line(
        "33,554,432 escapes",
        &exact,
        "$: invalid JSON: expected `,` or `]` at line 1 column 67108869",
    );
    drop(exact);
    let one_more = joined(&[b"[\"", &newlines, b"\\n\"]"]);
    assert_line("33,554,433 escapes", &one_more, &cap_line("string", 1, 2));
    drop(one_more);
    // One byte before them, the last escape's `n` is the 67,108,865th byte.
    let shifted = joined(&[b"[\"a", &newlines, b"\"]"]);
    assert_line(
        "an escape across the cap",
        &shifted,
        &cap_line("string", 1, 2),
    );
}

#[test]
fn a_number_literal_over_the_cap() {
    // Line 2 is `0, 1` + digits: the literal's first character at column 4; with
    // CAP - 1 more digits it is the cap exactly, and the `x` after it at CAP + 4.
    let mut doc = joined(&[b"[\n0, 1", &b"2".repeat(CAP_BYTES - 1)]);
    let end = doc.len();
    doc.extend_from_slice(b"x]");
    // serde_json would call this literal out of range, which SPEC reads as in range.
    assert_line(
        "digits, the cap",
        &doc,
        "$: invalid JSON: expected `,` or `]` at line 2 column 67108868",
    );
    doc[end] = b'2';
    assert_line("digits, one more", &doc, &cap_line("number literal", 2, 4));
    drop(doc);

    // Line 1 is `{"a":\r`, line 2 `\t-0.` + digits: the `-` at column 2;
    // `-0.` and CAP - 3 digits are the cap exactly, and the `x` after it at CAP + 2.
    let mut doc = joined(&[b"{\"a\":\r\n\t-0.", &b"5".repeat(CAP_BYTES - 3)]);
    let end = doc.len();
    doc.extend_from_slice(b"x}");
    assert_line(
        "fraction, the cap",
        &doc,
        "$: invalid JSON: expected `,` or `}` at line 2 column 67108866",
    );
    doc[end] = b'5';
    assert_line(
        "fraction, one more",
        &doc,
        &cap_line("number literal", 2, 2),
    );
    drop(doc);

    // Line 3 is ` 1E+` + digits: the `1` at column 2. A literal reaching past the cap
    // is the cap error even where the document then ends.
    let doc = joined(&[b"\n\n 1E+", &b"7".repeat(CAP_BYTES)]);
    assert_line("exponent", &doc, &cap_line("number literal", 3, 2));
}

#[test]
fn a_run_that_stops_fitting_the_number_grammar_is_judged_as_before() {
    // Line 2 is `  1.` + dots: the literal is `1.`, and the second `.` (column 5) is
    // serde_json's invalid number, however many dots follow.
    let doc = joined(&[b"[\n  1.", &b".".repeat(CAP_BYTES + 10), b"]"]);
    assert_serde_line(
        "1. and dots",
        &doc,
        "$: invalid JSON: invalid number at line 2 column 5",
    );
    drop(doc);
    // A leading zero ends the literal `0`; the second zero (column 3) is the error.
    let doc = joined(&[b"[", &b"0".repeat(CAP_BYTES + 10), b"]"]);
    assert_serde_line(
        "zeros",
        &doc,
        "$: invalid JSON: invalid number at line 1 column 3",
    );
}

#[test]
fn an_earlier_syntax_error_comes_before_a_long_value() {
    // `[tru,`: the `,` (column 5) is where `true` fails.
    let doc = joined(&[b"[tru, \"", &b"a".repeat(CAP_BYTES + 1), b"\"]"]);
    assert_serde_line(
        "earlier error",
        &doc,
        "$: invalid JSON: expected ident at line 1 column 5",
    );
}
