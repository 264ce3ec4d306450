//! SPEC §2 stage 1: the syntax error line is `$: invalid JSON: <parser message>`, the
//! message serde_json (version 1) gives for the document read from a byte slice, with
//! every grammatical number literal read as in range. The oracle's reader is its own;
//! these tests hold its lines to serde_json's on fixed and on generated documents.

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
