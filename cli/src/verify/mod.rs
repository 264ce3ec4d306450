//! `kvroute verify`: is this receipt, byte for byte, what the trace must produce?
//!
//! The oracle replays the trace in a thread of its own and hands out its canonical
//! receipt piece by piece (the runs' structure, and each element: a log entry, a
//! decision, a metrics object) through a small bounded channel; the receipt is read
//! from a stream and compared with those pieces byte by byte as they come. Neither side
//! is ever held whole: memory is the oracle's state, a few pieces in flight and the
//! reader's buffer. The receipt's `receipt_digest` (second in canonical order, before
//! anything it hashes) is read and kept, and checked once everything else matched.
//!
//! On the first byte that differs, [`walk`] reads both from the last point they agreed
//! and names the first problem in the receipt's byte order by JSON path (SPEC.md §7): a
//! repeated member, bytes that are not RFC 8785's, a type error, a reorder, a missing
//! row, a chosen worker its own rows do not justify, or a value that differs. A receipt
//! for another trace is named as such, whatever its first difference. A JSON Lines
//! receipt (SPEC.md §6.4) is compared line by line with the same pieces ([`lines`]).

mod element;
pub mod fuzz;
mod json;
mod keyed;
mod lines;
mod walk;

use kvroute_oracle::{replay_streaming, ReceiptPiece, Streamed};
use std::io::{BufRead, Read};
use std::ops::ControlFlow;
use std::sync::mpsc;

/// A receipt that matched: its digest and how many decisions it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub receipt_digest: String,
    pub decisions: u64,
}

/// Why a receipt was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The trace itself is invalid (its validation errors).
    InvalidTrace(Vec<String>),
    /// The receipt could not be read (an I/O error): not a verdict on it.
    Unreadable(String),
    /// The receipt is wrong; the first problem found.
    Rejected(String),
}

/// One piece of the recomputation, owned, as it crosses from the oracle's thread.
enum Piece {
    Structure(Vec<u8>),
    Element { path: String, bytes: Vec<u8> },
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Structure(bytes) | Piece::Element { bytes, .. } => bytes,
        }
    }
}

/// Pieces in flight between the oracle and the comparison.
const PIECES_IN_FLIGHT: usize = 256;
const FORMAT_MEMBER: &[u8] = br#"{"format":"kvroute-receipt/1","#;
const DIGEST_MEMBER: &[u8] = br#""receipt_digest":"sha256:"#;
const DIGEST_HEX_LEN: usize = 64;

/// Verifies a receipt held in memory. `Ok` carries the receipt digest.
pub fn verify(trace_json: &[u8], receipt_json: &[u8]) -> Result<String, VerifyError> {
    verify_keyed(trace_json, receipt_json, None)
}

/// [`verify`] of a receipt written with `--id-key` (SPEC.md §6.5) when `id_key` is given.
pub fn verify_keyed(
    trace_json: &[u8],
    receipt_json: &[u8],
    id_key: Option<&[u8]>,
) -> Result<String, VerifyError> {
    let mut reader = receipt_json;
    verify_stream(trace_json, &mut reader, id_key, &|_| {}).map(|v| v.receipt_digest)
}

/// Verifies the receipt read from `receipt` (never held whole) against `trace_json`;
/// `phase` is told what is being done, for progress.
pub fn verify_stream(
    trace_json: &[u8],
    receipt: &mut dyn BufRead,
    id_key: Option<&[u8]>,
    phase: &dyn Fn(&str),
) -> Result<Verified, VerifyError> {
    let (sender, receiver) = mpsc::sync_channel::<Piece>(PIECES_IN_FLIGHT);
    std::thread::scope(|scope| {
        let oracle = scope.spawn(move || oracle_pieces(trace_json, id_key, &sender));
        let mut expected = Expected {
            receiver,
            oracle: Some(oracle),
            digest: None,
        };
        phase("replaying with the oracle and comparing the receipt");
        let verdict = compare(receipt, &mut expected, phase);
        // Stops the oracle if it is still running, then waits for it.
        let result = expected.finish();
        match result {
            Err(lines) => Err(VerifyError::InvalidTrace(lines)),
            Ok(_) => verdict,
        }
    })
}

type OracleResult = Result<Option<String>, Vec<String>>;

/// The oracle's side: every piece, keyed when `id_key` is given, into `sender`.
/// `Ok(Some(digest))` when all were sent, `Ok(None)` when the comparison stopped it.
fn oracle_pieces(
    trace_json: &[u8],
    id_key: Option<&[u8]>,
    sender: &mpsc::SyncSender<Piece>,
) -> OracleResult {
    let mut hasher = id_key.map(|_| keyed::Hasher::new());
    let mut sink = |piece: ReceiptPiece<'_>| {
        let owned = match piece {
            ReceiptPiece::Structure(bytes) => Piece::Structure(bytes.to_vec()),
            ReceiptPiece::Element { path, bytes } => {
                let bytes = match id_key {
                    Some(key) if path.contains(".decisions[") => keyed::key_decision(bytes, key),
                    _ => bytes.to_vec(),
                };
                Piece::Element {
                    path: path.to_owned(),
                    bytes,
                }
            }
        };
        if let Some(hasher) = &mut hasher {
            hasher.update(owned.bytes());
        }
        match sender.send(owned) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    };
    match replay_streaming(trace_json, &mut sink)? {
        Streamed::Complete { receipt_digest } => Ok(Some(match hasher {
            Some(hasher) => hasher.tag(),
            None => receipt_digest,
        })),
        Streamed::Stopped => Ok(None),
    }
}

/// The recomputation's pieces, pulled in order.
struct Expected<'scope> {
    receiver: mpsc::Receiver<Piece>,
    oracle: Option<std::thread::ScopedJoinHandle<'scope, OracleResult>>,
    digest: Option<String>,
}

impl Expected<'_> {
    fn next(&mut self) -> Option<Piece> {
        self.receiver.recv().ok()
    }

    /// Waits for the oracle (stopping it first); its digest, or the trace's errors.
    fn finish(&mut self) -> Result<Option<String>, Vec<String>> {
        let (_, dead) = mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.receiver, dead));
        match self.oracle.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(vec!["$: internal error: the oracle panicked".to_owned()]),
            None => Ok(self.digest.clone()),
        }
    }

    /// The oracle's digest once every piece was pulled.
    fn digest(&mut self) -> Result<String, VerifyError> {
        match self.finish() {
            Ok(Some(digest)) => {
                self.digest = Some(digest.clone());
                Ok(digest)
            }
            Ok(None) => Err(internal("the oracle stopped early")),
            Err(lines) => Err(VerifyError::InvalidTrace(lines)),
        }
    }
}

fn internal(what: &str) -> VerifyError {
    VerifyError::Rejected(format!("internal error: {what}"))
}

/// Reads the receipt.
struct Receipt<'r> {
    reader: &'r mut dyn BufRead,
    /// Offset of the next byte.
    offset: u64,
}

impl Receipt<'_> {
    fn unreadable(e: &std::io::Error) -> VerifyError {
        VerifyError::Unreadable(format!("cannot read receipt: {e}"))
    }

    /// Consumes the bytes that equal `expected`'s; the count that matched.
    fn matching(&mut self, expected: &[u8]) -> Result<usize, VerifyError> {
        let mut matched = 0;
        while matched < expected.len() {
            let buf = self.reader.fill_buf().map_err(|e| Self::unreadable(&e))?;
            if buf.is_empty() {
                break;
            }
            let want = &expected[matched..];
            let n = buf.len().min(want.len());
            // A slice comparison first (memcmp): the position only on a difference.
            let same = if buf[..n] == want[..n] {
                n
            } else {
                buf[..n]
                    .iter()
                    .zip(&want[..n])
                    .position(|(a, b)| a != b)
                    .unwrap_or(n)
            };
            self.reader.consume(same);
            self.offset += same as u64;
            matched += same;
            if same < n {
                break;
            }
        }
        Ok(matched)
    }

    /// Consumes up to `len` lowercase hex digits; the digits read.
    fn hex_digits(&mut self, len: usize) -> Result<Vec<u8>, VerifyError> {
        let mut digits = Vec::with_capacity(len);
        while digits.len() < len {
            let buf = self.reader.fill_buf().map_err(|e| Self::unreadable(&e))?;
            match buf.first() {
                Some(&b) if matches!(b, b'0'..=b'9' | b'a'..=b'f') => {
                    digits.push(b);
                    self.reader.consume(1);
                    self.offset += 1;
                }
                _ => break,
            }
        }
        Ok(digits)
    }
}

/// Where the comparison stopped agreeing, for [`walk`].
struct Disagreement {
    /// The path of the last element before the piece where reading starts again.
    last_element: Option<String>,
    previous_decision: Option<Vec<u8>>,
    /// Offset where reading starts again, and the receipt's bytes from there on that
    /// were consumed (they equal the recomputation's).
    start: u64,
    consumed: Vec<u8>,
    /// The recomputation's bytes from `start` to the end of the current piece.
    expected: Vec<u8>,
}

/// Compares the receipt with the recomputation; explains the first difference.
fn compare(
    reader: &mut dyn BufRead,
    expected: &mut Expected<'_>,
    phase: &dyn Fn(&str),
) -> Result<Verified, VerifyError> {
    let mut receipt = Receipt { reader, offset: 0 };
    // A JSON Lines receipt (SPEC.md §6.4) is told by its first line's first member.
    let head = receipt
        .reader
        .fill_buf()
        .map_err(|e| Receipt::unreadable(&e))?;
    if head.starts_with(&lines::FIRST_LINE[..37]) {
        return lines::verify_lines(&mut receipt, expected, &[]);
    }
    let ((claimed, decisions), disagreement) = match compare_pieces(&mut receipt, expected)? {
        Ok(claimed) => match at_end(&mut receipt)? {
            None => (claimed, None),
            Some(problem) => return Err(VerifyError::Rejected(problem)),
        },
        Err(disagreement) => ((String::new(), 0), Some(disagreement)),
    };
    if let Some(disagreement) = disagreement {
        phase("explaining the first difference");
        return Err(VerifyError::Rejected(explain(
            &mut receipt,
            expected,
            disagreement,
        )));
    }
    let actual = expected.digest()?;
    if claimed != actual {
        return Err(VerifyError::Rejected(format!(
            "receipt_digest is {claimed}, but the receipt's content hashes to {actual}"
        )));
    }
    Ok(Verified {
        receipt_digest: actual,
        decisions,
    })
}

/// After the receipt's last byte: nothing, or one `\n` and nothing.
fn at_end(receipt: &mut Receipt<'_>) -> Result<Option<String>, VerifyError> {
    let at = receipt.offset;
    let mut rest = [0u8; 2];
    let mut n = 0;
    while n < 2 {
        match receipt.reader.read(&mut rest[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Receipt::unreadable(&e)),
        }
    }
    Ok(match &rest[..n] {
        [] | [b'\n'] => None,
        _ => Some(format!(
            "$: the receipt goes on after its closing brace (byte offset {}); replay --format \
             json writes the receipt and one \\n",
            if rest[0] == b'\n' { at + 1 } else { at }
        )),
    })
}

/// The byte comparison: `Ok(Ok((claimed digest, decisions)))` when every piece matched.
fn compare_pieces(
    receipt: &mut Receipt<'_>,
    expected: &mut Expected<'_>,
) -> Result<Result<(String, u64), Disagreement>, VerifyError> {
    let Some(first) = expected.next() else {
        // The oracle sent nothing: an invalid trace (reported by the caller).
        return Err(expected
            .digest()
            .err()
            .unwrap_or_else(|| internal("no receipt")));
    };
    let first = first.bytes();
    if !first.starts_with(FORMAT_MEMBER) {
        return Err(internal("the recomputation does not start with its format"));
    }
    // The header, with the claimed digest read where the recomputation cannot have one.
    let mut header = FORMAT_MEMBER.to_vec();
    header.extend_from_slice(DIGEST_MEMBER);
    let hex_at = header.len();
    header.resize(header.len() + DIGEST_HEX_LEN, b'0');
    header.extend_from_slice(b"\",");
    header.extend_from_slice(&first[FORMAT_MEMBER.len()..]);
    let mut consumed = Vec::new();
    let matched = receipt.matching(&header[..hex_at])?;
    consumed.extend_from_slice(&header[..matched]);
    let mut claimed = String::new();
    if matched == hex_at {
        let digits = receipt.hex_digits(DIGEST_HEX_LEN)?;
        consumed.extend_from_slice(&digits);
        if digits.len() == DIGEST_HEX_LEN {
            header[hex_at..hex_at + DIGEST_HEX_LEN].copy_from_slice(&digits);
            claimed = format!("sha256:{}", String::from_utf8_lossy(&digits));
            let tail = &header[hex_at + DIGEST_HEX_LEN..];
            let matched = receipt.matching(tail)?;
            consumed.extend_from_slice(&tail[..matched]);
            if matched == tail.len() {
                consumed.clear();
            }
        }
    }
    if !consumed.is_empty() || claimed.is_empty() {
        return Ok(Err(Disagreement {
            last_element: None,
            previous_decision: None,
            start: 0,
            consumed,
            expected: header,
        }));
    }
    compare_rest(receipt, expected, header).map(|r| r.map(|decisions| (claimed, decisions)))
}

/// The pieces after the header; `Ok(Ok(decisions))` when all matched.
fn compare_rest(
    receipt: &mut Receipt<'_>,
    expected: &mut Expected<'_>,
    header: Vec<u8>,
) -> Result<Result<u64, Disagreement>, VerifyError> {
    let mut decisions = 0u64;
    let mut last_element: Option<String> = None;
    let mut previous_decision: Option<Vec<u8>> = None;
    let mut structure = header;
    let mut structure_start = 0u64;
    while let Some(piece) = expected.next() {
        let start = receipt.offset;
        let matched = receipt.matching(piece.bytes())?;
        let agreed = matched == piece.bytes().len();
        match piece {
            Piece::Structure(bytes) if agreed => {
                structure = bytes;
                structure_start = start;
            }
            Piece::Element { path, bytes } if agreed => {
                previous_decision = path.contains(".decisions[").then_some(bytes);
                decisions += u64::from(previous_decision.is_some());
                last_element = Some(path);
            }
            Piece::Structure(bytes) => {
                return Ok(Err(Disagreement {
                    last_element,
                    previous_decision,
                    start,
                    consumed: bytes[..matched].to_vec(),
                    expected: bytes,
                }))
            }
            Piece::Element { bytes, .. } => {
                // Read again from the structure before this element.
                let mut consumed = structure.clone();
                consumed.extend_from_slice(&bytes[..matched]);
                let mut both = structure;
                both.extend_from_slice(&bytes);
                return Ok(Err(Disagreement {
                    last_element,
                    previous_decision,
                    start: structure_start,
                    consumed,
                    expected: both,
                }));
            }
        }
    }
    Ok(Ok(decisions))
}

/// The recomputation's bytes after the disagreement, pulled piece by piece.
struct ExpectedBytes<'x, 's> {
    current: Vec<u8>,
    pos: usize,
    expected: &'x mut Expected<'s>,
    /// The last structure piece seen (it ends with the trace digest).
    last_structure: Vec<u8>,
}

impl Read for ExpectedBytes<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let buf = self.fill_buf()?;
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ExpectedBytes<'_, '_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.pos == self.current.len() {
            match self.expected.next() {
                Some(piece) => {
                    if let Piece::Structure(bytes) = &piece {
                        self.last_structure.clone_from(bytes);
                    }
                    self.current = match piece {
                        Piece::Structure(b) | Piece::Element { bytes: b, .. } => b,
                    };
                    self.pos = 0;
                }
                None => return Ok(&[]),
            }
        }
        Ok(&self.current[self.pos..])
    }
    fn consume(&mut self, n: usize) {
        self.pos += n;
    }
}

/// Names the first problem after a disagreement; a receipt for another trace is named
/// as such (its `trace_digest`, the receipt's last member, is read on to).
fn explain(receipt: &mut Receipt<'_>, expected: &mut Expected<'_>, d: Disagreement) -> String {
    let mut expected_bytes = ExpectedBytes {
        current: d.expected,
        pos: 0,
        expected,
        last_structure: Vec::new(),
    };
    let mut receipt_bytes = (&d.consumed[..]).chain(&mut *receipt.reader);
    let problem = {
        let receipt_lexer = json::Lexer::new(&mut receipt_bytes, d.start);
        let expected_lexer = json::Lexer::new(&mut expected_bytes, d.start);
        let start = walk::Start {
            last_element: d.last_element.as_deref(),
            previous_decision: d.previous_decision.as_deref(),
        };
        match walk::Walk::new(receipt_lexer, expected_lexer, &start) {
            Some(mut walk) => walk.run(),
            None => Some("internal error: cannot resume reading".to_owned()),
        }
    };
    let problem = problem
        .unwrap_or_else(|| format!("differs from the recomputation at byte offset {}", d.start));
    // A receipt that is not JSON has no last member to name another trace by, so
    // nothing after the problem is read (an endless input ends here too).
    if problem.starts_with("trace_digest is") || walk::is_not_json(&problem) {
        return problem;
    }
    // Read both to their ends for the trace digests; the receipt only while it is JSON.
    let given = last_trace_digest_while_json(&mut json::Lexer::new(&mut receipt_bytes, 0));
    let mut sink = std::io::sink();
    let _ = std::io::copy(&mut expected_bytes, &mut sink);
    let wanted = last_trace_digest(&mut &expected_bytes.last_structure[..]);
    match (given, wanted) {
        (Some(given), Some(wanted)) if given != wanted => format!(
            "trace_digest is {}, but this trace's digest is {}",
            json::quote_digest(&given),
            json::quote_digest(&wanted)
        ),
        _ => problem,
    }
}

/// The value of the last `"trace_digest":"…"` member in a stream of JSON tokens, read
/// up to the first byte that cannot continue JSON text: past it there are no members.
fn last_trace_digest_while_json(lexer: &mut json::Lexer<'_>) -> Option<String> {
    let mut found = None;
    // The last two tokens: a member name and its colon, when they are.
    let mut name_then_colon = (false, false);
    loop {
        let tok = match lexer.next() {
            Ok(lexed) if lexed.tok != json::Tok::Eof => lexed.tok,
            _ => return found,
        };
        if let (true, json::Tok::Str(value)) = (name_then_colon.1, &tok) {
            found = Some(value.clone());
        }
        let is_name = matches!(&tok, json::Tok::Str(name) if name == "trace_digest");
        name_then_colon = (is_name, name_then_colon.0 && tok == json::Tok::Colon);
    }
}

/// The value of the last `"trace_digest":"…"` in a stream. Outside a string, those bytes
/// can only be that member (a quote inside a string is escaped).
fn last_trace_digest(reader: &mut dyn Read) -> Option<String> {
    const NEEDLE: &[u8] = br#""trace_digest":""#;
    let mut found: Option<Vec<u8>> = None;
    let mut capture: Option<Vec<u8>> = None;
    let mut matched = 0usize;
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if let Some(value) = &mut capture {
                if b == b'"' || value.len() > 100 {
                    found = capture.take();
                } else {
                    value.push(b);
                }
                continue;
            }
            matched = if b == NEEDLE[matched] {
                matched + 1
            } else {
                usize::from(b == NEEDLE[0])
            };
            if matched == NEEDLE.len() {
                capture = Some(Vec::new());
                matched = 0;
            }
        }
    }
    found.map(|v| String::from_utf8_lossy(&v).into_owned())
}
