//! `verify` of a JSON Lines receipt (`kvroute-receipt-stream/1`, SPEC.md §6.4): the
//! same pieces of the oracle's recomputation, each element compared byte for byte with
//! its line, `{"<member>":<element>,"policy":"<policy>"}`, as the lines stream in. The
//! first line's `trace_digest` and the last line's `receipt_digest` are kept and checked
//! once the pieces are done. A line that differs is read whole (one element) and
//! explained as a JSON receipt's element is (`super::element`), by the element's path.

use super::element::{self, ElementKind, Later};
use super::json::{
    non_canonical, parse_value, quote_digest, quote_str, LexError, Lexer, Node, ParseProblem, Tok,
};
use super::walk::{policy_of_run, repeated};
use super::{internal, Expected, Piece, Receipt, Verified, VerifyError};
use std::io::BufRead;

pub(super) const FIRST_LINE: &[u8] = br#"{"format":"kvroute-receipt-stream/1","receipt_format":"kvroute-receipt/1","trace_digest":"sha256:"#;
/// The longest line read to explain a difference.
const LINE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Verifies a JSON Lines receipt whose first `head` bytes were already consumed.
pub(super) fn verify_lines(
    receipt: &mut Receipt<'_>,
    expected: &mut Expected<'_>,
    head: &[u8],
) -> Result<Verified, VerifyError> {
    let mut lines = Lines {
        line: 1,
        decisions: 0,
        last_structure: Vec::new(),
        claimed_trace: String::new(),
    };
    let problem = match lines.first_line(receipt, head)? {
        Some(problem) => Some(problem),
        None => lines.elements(receipt, expected)?,
    };
    let problem = match problem {
        Some(problem) => problem,
        None => match lines.last_line(receipt, expected)? {
            Ok(verified) => return Ok(verified),
            Err(problem) => problem,
        },
    };
    // A receipt for another trace is named as such, whatever else differs.
    while let Some(piece) = expected.next() {
        if let Piece::Structure(bytes) = piece {
            lines.last_structure = bytes;
        }
    }
    let wanted = super::last_trace_digest(&mut &lines.last_structure[..]);
    match wanted {
        Some(wanted) if !lines.claimed_trace.is_empty() && wanted != lines.claimed_trace => {
            Err(VerifyError::Rejected(format!(
                "trace_digest is {}, but this trace's digest is {}",
                quote_digest(&lines.claimed_trace),
                quote_digest(&wanted)
            )))
        }
        _ => Err(VerifyError::Rejected(problem)),
    }
}

struct Lines {
    /// The number of the line being read, from 1.
    line: u64,
    decisions: u64,
    last_structure: Vec<u8>,
    claimed_trace: String,
}

type Step = Result<Option<String>, VerifyError>;

impl Lines {
    fn first_line(&mut self, receipt: &mut Receipt<'_>, head: &[u8]) -> Step {
        let start = receipt.offset - head.len() as u64;
        let matched = receipt.matching(&FIRST_LINE[head.len()..])?;
        let mut line = FIRST_LINE[..head.len() + matched].to_vec();
        if line.len() == FIRST_LINE.len() {
            let digits = receipt.hex_digits(64)?;
            line.extend_from_slice(&digits);
            let closing = receipt.matching(b"\"}\n")?;
            line.extend_from_slice(&b"\"}\n"[..closing]);
            if digits.len() == 64 && closing == 3 {
                self.claimed_trace = format!("sha256:{}", String::from_utf8_lossy(&digits));
                self.line = 2;
                return Ok(None);
            }
        }
        let rest = read_line(receipt)?;
        line.extend_from_slice(&rest);
        Ok(Some(format!(
            "line 1 (byte offset {start}): expected {{\"format\":\"kvroute-receipt-stream/1\",\
             \"receipt_format\":\"kvroute-receipt/1\",\"trace_digest\":\"sha256:<64 hex digits>\"}}, \
             found {}",
            quote_str(&String::from_utf8_lossy(&line))
        )))
    }

    /// Every element's line; the first problem.
    fn elements(&mut self, receipt: &mut Receipt<'_>, expected: &mut Expected<'_>) -> Step {
        while let Some(piece) = expected.next() {
            let (path, bytes) = match piece {
                Piece::Structure(bytes) => {
                    self.last_structure = bytes;
                    continue;
                }
                Piece::Element { path, bytes } => (path, bytes),
            };
            let Some((run, member)) = element_of(&path) else {
                return Err(internal("an element path the lines do not know"));
            };
            let policy = policy_of_run(run);
            let line = [
                format!("{{\"{member}\":").as_bytes(),
                &bytes,
                format!(",\"policy\":\"{policy}\"}}\n").as_bytes(),
            ]
            .concat();
            let start = receipt.offset;
            let matched = receipt.matching(&line)?;
            if matched < line.len() {
                let mut given = line[..matched].to_vec();
                given.extend_from_slice(&read_line(receipt)?);
                let element = LineElement {
                    path: &path,
                    member,
                    policy,
                    expected: &bytes,
                };
                return Ok(Some(self.explain(&given, start, &element, expected)));
            }
            self.decisions += u64::from(member == "decisions");
            self.line += 1;
        }
        Ok(None)
    }

    fn last_line(
        &mut self,
        receipt: &mut Receipt<'_>,
        expected: &mut Expected<'_>,
    ) -> Result<Result<Verified, String>, VerifyError> {
        let digest = expected.digest()?;
        let line = format!("{{\"receipt_digest\":\"{digest}\"}}\n");
        let start = receipt.offset;
        let matched = receipt.matching(line.as_bytes())?;
        if matched == line.len() {
            let mut rest = [0u8; 1];
            return Ok(match receipt.reader.read(&mut rest) {
                Ok(0) => Ok(Verified {
                    receipt_digest: digest,
                    decisions: self.decisions,
                }),
                Ok(_) => Err(format!(
                    "line {}: the receipt goes on after its last line (byte offset {})",
                    self.line + 1,
                    receipt.offset
                )),
                Err(e) => return Err(Receipt::unreadable(&e)),
            });
        }
        let mut given = line.as_bytes()[..matched].to_vec();
        given.extend_from_slice(&read_line(receipt)?);
        let text = String::from_utf8_lossy(&given);
        let claimed = super::json::parse_bytes(text.trim_end().as_bytes()).and_then(|node| {
            node.get("receipt_digest")
                .and_then(Node::as_str)
                .map(str::to_owned)
        });
        Ok(Err(match claimed {
            Some(claimed) if !given.is_empty() && claimed != digest => {
                format!("receipt_digest is {claimed}, but the receipt's content hashes to {digest}")
            }
            _ if given.is_empty() => format!(
                "line {}: missing: the receipt ends here, but the recomputation has its \
                 receipt_digest line",
                self.line
            ),
            _ => format!(
                "line {} (byte offset {start}): the recomputation has its receipt_digest line \
                 here, the receipt has {}",
                self.line,
                quote_str(text.trim_end())
            ),
        }))
    }

    /// Names the problem with a line that differs from the recomputation's.
    fn explain(
        &self,
        given: &[u8],
        start: u64,
        element: &LineElement<'_>,
        expected: &mut Expected<'_>,
    ) -> String {
        let line = self.line;
        let at = |what: &str| format!("line {line} ({}): {what}", element.path);
        if given.is_empty() {
            return at("missing: the receipt ends here");
        }
        let text = given.strip_suffix(b"\n").unwrap_or(given);
        let mut source = text;
        let mut lexer = Lexer::new(&mut source, start);
        let parsed = match line_element(&mut lexer, element, line) {
            Err(problem) => return problem,
            Ok(None) => {
                return at(&format!(
                    "the recomputation has a {} line here, the receipt has {}",
                    quote_str(element.member),
                    quote_str(&String::from_utf8_lossy(text))
                ))
            }
            Ok(Some(parsed)) => parsed,
        };
        let Some(expected_node) = super::json::parse_bytes(element.expected) else {
            return at("internal error: the recomputation is not JSON");
        };
        let kind = ElementKind::of_member(element.member).unwrap_or(ElementKind::Metrics);
        let mut later = LaterLines {
            expected,
            path_prefix: element.path.rsplit_once('[').map_or("", |p| p.0).to_owned(),
        };
        let explained = element::explain(
            &element::Element {
                path: element.path,
                kind,
                policy: element.policy,
                receipt: &parsed,
                expected: &expected_node,
                previous_decision: None,
            },
            &mut later,
        );
        if let Some(problem) = explained {
            return problem;
        }
        // The element is right: the line's own bytes are not.
        let after = lexer.offset;
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut source, &mut rest);
        explain_line_end(&rest, after, element, at)
    }
}

/// The element that opens a line, `{"<member>":<value>`, parsed; `None` when the line
/// does not open with the recomputation's member, an error when it is not JSON.
fn line_element(
    lexer: &mut Lexer<'_>,
    element: &LineElement<'_>,
    line: u64,
) -> Result<Option<Parsed>, String> {
    let invalid = |e: LexError| {
        format!(
            "the receipt is not JSON at byte offset {} (line {line}): {}",
            e.offset, e.reason
        )
    };
    let tokens = |lexer: &mut Lexer<'_>| lexer.next().map_err(invalid);
    let expect = |lexer: &mut Lexer<'_>, want: Tok| -> Result<bool, String> {
        let lexed = tokens(lexer)?;
        Ok(lexed.tok == want && lexed.space_at.is_none())
    };
    if !expect(lexer, Tok::BeginObject)? {
        return Ok(None);
    }
    let name = tokens(lexer)?;
    if name.tok != Tok::Str(element.member.to_owned()) || !expect(lexer, Tok::Colon)? {
        return Ok(None);
    }
    let first = tokens(lexer)?;
    match parse_value(lexer, first, element.path) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(ParseProblem::Invalid(e)) => Err(invalid(e)),
        Err(ParseProblem::Repeated { path, name, offset }) => Err(repeated(&path, &name, offset)),
    }
}

/// Names what is wrong with the end of a line whose element is right: `rest`, the bytes
/// after the element (from byte offset `after`), against the recomputation's
/// `,"policy":"<name>"}`; `at` puts the line and path in front of a reason.
fn explain_line_end(
    rest: &[u8],
    after: u64,
    element: &LineElement<'_>,
    at: impl Fn(&str) -> String,
) -> String {
    let tail = format!(",\"policy\":\"{}\"}}", element.policy);
    if rest == tail.as_bytes() {
        return at("differs from the recomputation's line");
    }
    if rest.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return non_canonical(
            element.path,
            after,
            "whitespace, which RFC 8785 never writes",
        );
    }
    at(&format!(
        "the line ends {}, but the recomputation's ends {}",
        quote_str(&String::from_utf8_lossy(rest)),
        quote_str(&tail)
    ))
}

use super::json::Parsed;

struct LineElement<'a> {
    path: &'a str,
    member: &'a str,
    policy: &'a str,
    expected: &'a [u8],
}

/// `runs[r].member[i]` or `runs[r].metrics`: the run and the member.
fn element_of(path: &str) -> Option<(usize, &'static str)> {
    let rest = path.strip_prefix("runs[")?;
    let (r, rest) = rest.split_once("].")?;
    let member = ["cache_log", "decisions", "metrics", "observation_log"]
        .into_iter()
        .find(|m| rest == *m || rest.starts_with(&format!("{m}[")))?;
    Some((r.parse().ok()?, member))
}

/// Reads the rest of the current line (without holding more than one).
fn read_line(receipt: &mut Receipt<'_>) -> Result<Vec<u8>, VerifyError> {
    let mut line = Vec::new();
    let mut limited = std::io::Read::take(&mut *receipt.reader, LINE_BYTES_MAX);
    limited
        .read_until(b'\n', &mut line)
        .map_err(|e| Receipt::unreadable(&e))?;
    receipt.offset += line.len() as u64;
    Ok(line)
}

/// The recomputation's later decisions of the same run, for a reorder.
struct LaterLines<'x, 's> {
    expected: &'x mut Expected<'s>,
    path_prefix: String,
}

impl Later for LaterLines<'_, '_> {
    fn position_of_seq(&mut self, seq: u64, from: usize) -> Option<usize> {
        let mut index = from;
        while let Some(piece) = self.expected.next() {
            let Piece::Element { path, bytes } = piece else {
                continue;
            };
            if path.rsplit_once('[').map(|p| p.0) != Some(self.path_prefix.as_str()) {
                return None;
            }
            index += 1;
            let node = super::json::parse_bytes(&bytes)?;
            if node.get("seq").and_then(Node::as_u64) == Some(seq) {
                return Some(index);
            }
        }
        None
    }
}
