//! A strict JSON document tree for trace input.
//!
//! `serde_json::Value` silently keeps the last of two members with the same name, so a
//! trace could mean two things at once. [`Node`] keeps every member in document order,
//! which lets validation reject repeated names with a path (SPEC.md §1.1), and keeps
//! every number as the literal text the document wrote, so that `5.0`, `1e3` and `-0`
//! stay distinguishable from integers and error reasons quote them as written (§2.2).
//!
//! serde_json reads numbers as `u64`, `i64` or `f64` and fails on a literal whose value
//! overflows an `f64` (`1e400`, a 5000-digit integer), although JSON's grammar has no
//! range. So before serde_json parses, [`mask_numbers`] looks at each literal: a plain
//! integer (digits without a leading zero, at most 19 of them, so exact in a `u64`) is
//! left as written, and serde_json's `u64` is its value and, printed, its text. Every
//! other literal (`-0`, `1.0`, `1e5`, `9007199254740992000000`) has its text copied
//! aside and `-0` padded with spaces written in its place, which serde_json reports as
//! the one number a plain integer never is, `-0.0`: same length, so every later syntax
//! error keeps its line and column, and the `n`-th `-0.0` serde_json visits is the
//! `n`-th masked literal. A trace's numbers are nearly all plain integers, so nearly
//! none is copied. [`MaskingReader`] runs the same masking on a stream, so a trace read
//! from a file or stdin is never held as text (SPEC.md §2.2 is unchanged: the literals
//! reach validation exactly as written). A caller holding the text may first read it
//! unmasked with [`NodeSeed::unmasked`], which fails at any number that is not a plain
//! integer, and mask only then.

use crate::input::limits::{JSON_INTEGER_MAX, VALUE_BYTES_MAX};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{self, Read};
use std::rc::Rc;

/// The texts of masked number literals not yet visited, in document order: filled by
/// the masking (all at once for a slice, as it streams for a reader) and drained by
/// [`NodeSeed`] as serde_json visits each masked `-0`.
pub type Literals = RefCell<VecDeque<Box<str>>>;

/// One JSON value, objects as ordered member lists (repeats kept). A string borrows
/// from the text read when serde_json hands it over unescaped from a slice (`'s` is
/// that text's lifetime), so a trace in memory is checked without a `String` per
/// string value; otherwise it is owned.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOf<'s> {
    Null,
    Bool(bool),
    /// A number, its literal text exactly as written.
    Number(Number),
    String(Cow<'s, str>),
    Array(Vec<NodeOf<'s>>),
    Object(Vec<(MemberName, NodeOf<'s>)>),
}

/// A [`NodeOf`] that owns all its text, as [`parse`] and [`parse_node`] return it.
pub type Node = NodeOf<'static>;

impl NodeOf<'_> {
    /// The same value owning its strings. Arrays and objects are collected in place,
    /// so only the borrowed strings are copied.
    pub fn into_owned(self) -> Node {
        match self {
            NodeOf::Null => NodeOf::Null,
            NodeOf::Bool(b) => NodeOf::Bool(b),
            NodeOf::Number(n) => NodeOf::Number(n),
            NodeOf::String(s) => NodeOf::String(Cow::Owned(s.into_owned())),
            NodeOf::Array(items) => {
                NodeOf::Array(items.into_iter().map(NodeOf::into_owned).collect())
            }
            NodeOf::Object(members) => NodeOf::Object(
                members
                    .into_iter()
                    .map(|(name, value)| (name, value.into_owned()))
                    .collect(),
            ),
        }
    }
}

/// A number literal as read: a plain integer as its value (its text is the value
/// printed), anything else as its text. Either matches JSON's number grammar, except
/// the placeholders of a literal serde_json rejects (see [`NodeSeed`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Number {
    /// Written as `0` or 1 to 19 digits without a leading zero.
    Integer(u64),
    /// Any other literal, exactly as written.
    Literal(Box<str>),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Integer(v) => write!(f, "{v}"),
            Number::Literal(text) => f.write_str(text),
        }
    }
}

/// A member name as read: the contract's own names borrow a `'static` copy, so reading
/// an event allocates for none of its ten or so names; any other name is owned.
pub type MemberName = Cow<'static, str>;

/// `name` as a [`MemberName`]: borrowed when a member table of the trace model lists
/// it ([`crate::input::trace::members`]).
pub(crate) fn member_name(name: &str) -> MemberName {
    match crate::input::trace::members::known_member_name(name) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(name.to_owned()),
    }
}

/// Reads one member name through [`member_name`].
struct MemberNameSeed;

impl<'de> DeserializeSeed<'de> for MemberNameSeed {
    type Value = MemberName;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<MemberName, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for MemberNameSeed {
    type Value = MemberName;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_str<E>(self, v: &str) -> Result<MemberName, E> {
        Ok(member_name(v))
    }
}

/// The reason a trace starting with a byte order mark is rejected (SPEC.md §2.2).
pub const BYTE_ORDER_MARK_MESSAGE: &str =
    "the document starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry";

/// Parses a trace document into a [`Node`], or returns the reason after `invalid JSON: `
/// (the byte order mark is named, §2.2; otherwise the parser's message). Validation
/// reads the document in one pass of its own; this whole-tree form serves the tests.
#[cfg(test)]
pub(crate) fn parse(bytes: &[u8]) -> Result<Node, String> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(BYTE_ORDER_MARK_MESSAGE.to_owned());
    }
    parse_node(bytes).map_err(|e| e.to_string())
}

/// Parses one JSON text into a [`Node`], with serde_json's error (and its position) for
/// a syntax error. Number literals are never the error, whatever their size.
pub fn parse_node(bytes: &[u8]) -> Result<Node, serde_json::Error> {
    let (masked, literals) = mask_numbers(bytes);
    let mut de = serde_json::Deserializer::from_slice(&masked);
    let node = NodeSeed::masked(&literals).deserialize(&mut de)?;
    de.end()?;
    Ok(node.into_owned())
}

/// Copies `bytes` with every number literal outside strings that matches JSON's number
/// grammar and is not a plain integer ([`passes_unmasked`]) replaced by `-0` and
/// spaces, and returns those literals' texts in document order. A run of number
/// characters that does not match the grammar (`01`, `1.`, `1e5e5`) is left as
/// written, so serde_json reports it where it stands. The masking itself is
/// [`MaskingReader`]'s: one state machine for bytes in memory and for streams.
///
/// No value is cut: a Mooncake line, the one caller that masks text of its own, is
/// capped at [`VALUE_BYTES_MAX`] as a whole already.
pub fn mask_numbers(bytes: &[u8]) -> (Vec<u8>, Literals) {
    let (masked, literals, _) = mask_with_cap(bytes, usize::MAX);
    (masked, literals)
}

/// [`mask_numbers`] for a trace document: the masked bytes end where a string or a
/// number literal passes [`VALUE_BYTES_MAX`], and that value is returned with them.
pub fn mask_trace_numbers(bytes: &[u8]) -> (Vec<u8>, Literals, Option<ValueCut>) {
    mask_with_cap(bytes, VALUE_BYTES_MAX)
}

fn mask_with_cap(bytes: &[u8], value_bytes_max: usize) -> (Vec<u8>, Literals, Option<ValueCut>) {
    let literals = Rc::new(Literals::default());
    let mut masked = Vec::with_capacity(bytes.len());
    // A chunk no larger than the bytes: Mooncake import masks every line on its own,
    // and zeroing a whole 64 KiB chunk per line was a sixth of the import's time.
    let chunk_bytes = bytes.len().clamp(1, MASK_CHUNK_BYTES);
    let mut reader = MaskingReader::with_chunk_bytes(bytes, Rc::clone(&literals), chunk_bytes);
    reader.value_bytes_max = value_bytes_max;
    let cut = reader.value_cut();
    reader
        .read_to_end(&mut masked)
        .expect("reading from a byte slice cannot fail");
    drop(reader);
    let literals = Rc::try_unwrap(literals).expect("the reader, and its clone, are dropped");
    (masked, literals, cut.get())
}

/// A string or number literal longer than [`VALUE_BYTES_MAX`] (SPEC.md §1.1, §2.2):
/// where it starts, counted as serde_json counts positions (lines from 1 after each
/// `\n`, columns in bytes from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueCut {
    pub is_string: bool,
    pub line: u64,
    pub column: u64,
}

impl ValueCut {
    /// The reason after `invalid JSON: `.
    pub fn message(&self) -> String {
        let what = if self.is_string {
            "a string"
        } else {
            "a number literal"
        };
        format!(
            "{what} longer than {VALUE_BYTES_MAX} bytes at line {} column {}",
            self.line, self.column
        )
    }

    /// Whether the parse of bytes cut here has to be reported as this cut: serde_json
    /// read to the cut (it reported the end of its input) or, for a literal cut at the
    /// document's end, read no error at all. Any other error stood before the cut and
    /// is the document's first (SPEC.md §2.2).
    pub fn explains(&self, error: Option<&serde_json::Error>) -> bool {
        error.is_none_or(serde_json::Error::is_eof)
    }
}

/// Whether `text` is one JSON number (RFC 8259 §6):
/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_number_literal(text: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    let mut rest = text.strip_prefix(b"-").unwrap_or(text);
    match rest.first() {
        Some(b'0') => rest = &rest[1..],
        Some(b'1'..=b'9') => rest = &rest[digits(rest)..],
        _ => return false,
    }
    if let Some(fraction) = rest.strip_prefix(b".") {
        let n = digits(fraction);
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    if let Some(exponent) = rest.strip_prefix(b"e").or_else(|| rest.strip_prefix(b"E")) {
        let exponent = exponent
            .strip_prefix(b"+")
            .or_else(|| exponent.strip_prefix(b"-"))
            .unwrap_or(exponent);
        let n = digits(exponent);
        if n == 0 {
            return false;
        }
        rest = &exponent[n..];
    }
    rest.is_empty()
}

/// Whether a literal reaches serde_json as written: a plain integer, `0` or up to 19
/// digits without a leading zero, is exact in a `u64` (`u64::MAX` has 20 digits), so
/// its value alone gives back its text. Any other literal is masked.
fn passes_unmasked(text: &[u8]) -> bool {
    match text {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.len() < 19 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

/// What a masked literal becomes: `-0`, which serde_json visits as `-0.0`, a value no
/// unmasked literal has (a plain integer is visited as a `u64`).
const MASK_MARKER: &[u8] = b"-0";

/// How many bytes [`MaskingReader`] reads from its source at a time.
const MASK_CHUNK_BYTES: usize = 64 * 1024;

/// A [`Read`] adapter that does what [`mask_numbers`] does, as the bytes stream by: the
/// bytes it yields are the source's with each well-formed number literal outside
/// strings that is not a plain integer replaced by `-0` and spaces, and each such
/// literal's text is queued on `literals` before its `-0` is yielded. It holds one
/// chunk and the number run in progress (a literal has to end before it is known to be
/// well formed), never the document.
pub struct MaskingReader<R> {
    source: R,
    literals: Rc<Literals>,
    /// Masked bytes ready to yield, from `out_start`.
    out: Vec<u8>,
    out_start: usize,
    chunk: Vec<u8>,
    /// The number-character run not yet ended (it may span chunks).
    run: Vec<u8>,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
    at_end: bool,
    /// The longest string or number literal passed on whole; at the first longer one
    /// the output ends (see [`MaskingReader::value_cut`]).
    value_bytes_max: usize,
    /// Bytes of the open string read so far, as written.
    string_bytes: usize,
    /// The line (from 1) of the next byte, and the offset where that line starts.
    line: u64,
    line_start: u64,
    /// The offset of the current chunk's first byte in the source.
    chunk_start: u64,
    /// The offset in the source of `out`'s first byte.
    out_origin: u64,
    /// The offset in the source where the open string or number run starts: its line
    /// is `line` still, since no line feed outside a string can stand inside either.
    value_start: u64,
    cut: Rc<Cell<Option<ValueCut>>>,
}

impl<R: Read> MaskingReader<R> {
    pub fn new(source: R, literals: Rc<Literals>) -> Self {
        Self::with_chunk_bytes(source, literals, MASK_CHUNK_BYTES)
    }

    /// A reader that reads `chunk_bytes` (at least 1) from its source at a time.
    fn with_chunk_bytes(source: R, literals: Rc<Literals>, chunk_bytes: usize) -> Self {
        MaskingReader {
            source,
            literals,
            out: Vec::with_capacity(chunk_bytes),
            out_start: 0,
            chunk: vec![0; chunk_bytes.max(1)],
            run: Vec::new(),
            in_string: false,
            escaped: false,
            at_end: false,
            value_bytes_max: VALUE_BYTES_MAX,
            string_bytes: 0,
            line: 1,
            line_start: 0,
            chunk_start: 0,
            out_origin: 0,
            value_start: 0,
            cut: Rc::new(Cell::new(None)),
        }
    }

    /// Where the output was cut, once the reader has met a string or a number literal
    /// longer than [`VALUE_BYTES_MAX`] (SPEC.md §1.1). The output then ends inside
    /// that string, or at a `-0` standing for that literal, so serde_json reports
    /// either an error placed before it (the document's first) or the end of its
    /// input, which [`ValueCut::explains`] turns into this cut. Nothing after the cut
    /// is read from the source.
    pub fn value_cut(&self) -> Rc<Cell<Option<ValueCut>>> {
        Rc::clone(&self.cut)
    }

    /// Ends the output at the open value: nothing more is read or yielded.
    fn cut_here(&mut self, is_string: bool) {
        let (line, column) = (self.line, self.value_start - self.line_start + 1);
        self.cut.set(Some(ValueCut {
            is_string,
            line,
            column,
        }));
        self.run.clear();
        self.in_string = false;
        self.at_end = true;
    }

    /// Whether `run` is a number literal longer than the cap: its first
    /// `value_bytes_max + 1` bytes still fit the number grammar.
    fn run_over_cap(&self, run: &[u8]) -> bool {
        run.len() > self.value_bytes_max
            && grammar_prefix_len(&run[..=self.value_bytes_max]) > self.value_bytes_max
    }

    /// Cuts at an over-long literal: the marker stands for it, so that an error at
    /// its first byte (trailing characters, a missing `,`) is still serde_json's, and
    /// a queued text keeps the marker count and the queue in step.
    fn cut_literal(&mut self) {
        self.literals.borrow_mut().push_back(Box::from(""));
        self.out.extend_from_slice(MASK_MARKER);
        self.cut_here(false);
    }

    /// Ends the number run in progress (see [`mask_run`]).
    fn end_run(&mut self) {
        mask_run(&mut self.run, &self.literals);
        self.out.append(&mut self.run);
    }

    /// Reads and masks the next chunk; at the source's end, ends the last run.
    fn fill(&mut self) -> io::Result<()> {
        self.out.clear();
        self.out_start = 0;
        while self.out.is_empty() && !self.at_end {
            let n = loop {
                match self.source.read(&mut self.chunk) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            if n == 0 {
                self.at_end = true;
                self.end_run();
                break;
            }
            self.mask_chunk(n);
            self.chunk_start += n as u64;
        }
        Ok(())
    }

    /// Masks `chunk[..n]` onto `out`: the chunk is appended whole (after the end of a
    /// number run begun in an earlier chunk) and masked where it lies, so a trace's
    /// many short strings and numbers cost a scan and no copy each. A run still open at
    /// the chunk's end is taken back into `run` to be ended by a later chunk.
    fn mask_chunk(&mut self, n: usize) {
        let Some(resume) = self.end_carried_run(n) else {
            return;
        };
        // `out` holds the carried run's end (masked) so far, then the rest of the chunk.
        let emitted = self.out.len();
        self.out_origin = self.chunk_start + resume as u64 - emitted as u64;
        self.out.extend_from_slice(&self.chunk[resume..n]);
        let mut i = emitted;
        while i < self.out.len() {
            if self.in_string {
                match self.scan_string(i) {
                    Some(next) => i = next,
                    None => return,
                }
                continue;
            }
            // Outside strings only a quote, a line feed and a run's first byte matter.
            let stop = self.out[i..]
                .iter()
                .position(|&b| STOPS_OUTSIDE_STRINGS[usize::from(b)]);
            let Some(skipped) = stop else {
                return;
            };
            i += skipped;
            if self.out[i] == b'"' {
                self.in_string = true;
                self.string_bytes = 0;
                self.value_start = self.out_origin + i as u64;
                i += 1;
            } else if self.out[i] == b'\n' {
                // Outside strings only: a raw line feed inside one is serde_json's error
                // where it stands, and nothing after an error is placed.
                self.line += 1;
                self.line_start = self.out_origin + i as u64 + 1;
                i += 1;
            } else {
                match self.scan_run(i) {
                    Some(next) => i = next,
                    None => return,
                }
            }
        }
    }

    /// Goes on with a number run begun in an earlier chunk through the first bytes of
    /// `chunk[..n]`: where in the chunk the scan resumes, its bytes before that (the
    /// run's end, masked) already on `out`; or `None` when nothing more of this chunk
    /// is read (the run is still open, or the output is cut). The run is gathered
    /// apart and only its new bytes are scanned, so a long literal costs its length
    /// once, not once a chunk.
    fn end_carried_run(&mut self, n: usize) -> Option<usize> {
        if self.run.is_empty() {
            return Some(0);
        }
        let chunk = &self.chunk[..n];
        let end = chunk.iter().take_while(|&&b| is_number_char(b)).count();
        self.run.extend_from_slice(&chunk[..end]);
        if self.run.len() > self.value_bytes_max {
            if self.run_over_cap(&self.run) {
                self.cut_literal();
                return None;
            }
            // The run stopped fitting the grammar before the cap, so serde_json fails
            // inside it or right after its literal, and what follows cannot change
            // that: it is passed on, never gathered further.
        } else if end == n {
            return None;
        }
        self.end_run();
        Some(end)
    }

    /// Goes on through the open string from `out[i]`, up to the next quote or backslash
    /// or the escaped byte: where to go on from, or `None` once the output is cut.
    #[inline]
    fn scan_string(&mut self, i: usize) -> Option<usize> {
        if self.escaped {
            if self.string_bytes == self.value_bytes_max {
                self.out.truncate(i);
                self.cut_here(true);
                return None;
            }
            self.string_bytes += 1;
            self.escaped = false;
            return Some(i + 1);
        }
        // A trace's strings are names and keys of a few bytes: a plain scan beats a
        // SIMD search's setup on them.
        let stop = self.out[i..].iter().position(|&b| b == b'"' || b == b'\\');
        let span_end = stop.map_or(self.out.len(), |k| i + k);
        // The string's bytes in this step: the span, and a backslash ending it.
        let backslash = stop.is_some() && self.out[span_end] == b'\\';
        let content = span_end - i + usize::from(backslash);
        let room = self.value_bytes_max - self.string_bytes;
        if content > room {
            self.out.truncate(i + room);
            self.cut_here(true);
            return None;
        }
        self.string_bytes += content;
        if stop.is_none() {
            return Some(span_end);
        }
        if backslash {
            self.escaped = true;
        } else {
            self.in_string = false;
        }
        Some(span_end + 1)
    }

    /// Masks the number run starting at `out[start]`: where to go on from, or `None`
    /// once the output is cut or the run is taken back to wait for the next chunk.
    fn scan_run(&mut self, start: usize) -> Option<usize> {
        self.value_start = self.out_origin + start as u64;
        let len = self.out.len();
        let end = start
            + self.out[start..]
                .iter()
                .take_while(|&&b| is_number_char(b))
                .count();
        let run_bytes = end - start;
        if run_bytes > self.value_bytes_max && self.run_over_cap(&self.out[start..end]) {
            self.out.truncate(start);
            self.cut_literal();
            return None;
        }
        if end == len {
            self.run.extend_from_slice(&self.out[start..]);
            self.out.truncate(start);
            return None;
        }
        mask_run(&mut self.out[start..end], &self.literals);
        Some(end)
    }
}

/// How many bytes at the start of `run` still fit JSON's number grammar (RFC 8259 §6),
/// as a prefix of some literal: `1.5e` fits whole, `01` up to its `0`, `1..` up to
/// its first `.`. A literal's length for the cap of SPEC.md §1.1 counts these bytes.
fn grammar_prefix_len(run: &[u8]) -> usize {
    let digits = |from: usize| {
        run[from.min(run.len())..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(run.first() == Some(&b'-'));
    match run.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i += digits(i),
        _ => return i,
    }
    if run.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        i += 1 + n;
        if n == 0 {
            return i;
        }
    }
    if matches!(run.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(run.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i += digits(i);
    }
    i
}

/// The bytes the masking stops at outside strings: a quote, a line feed, and the first
/// byte of a number run (`-` or a digit).
static STOPS_OUTSIDE_STRINGS: [bool; 256] = {
    let mut stops = [false; 256];
    stops[b'"' as usize] = true;
    stops[b'\n' as usize] = true;
    stops[b'-' as usize] = true;
    let mut digit = b'0';
    while digit <= b'9' {
        stops[digit as usize] = true;
        digit += 1;
    }
    stops
};

/// Whether `b` can be part of a number run: what JSON's number grammar is written in.
fn is_number_char(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// How many bytes at the start of `run` serde_json's number scan takes as one literal,
/// or `None` when the scan itself fails inside the run (`01`, `1.x`, `1e`, `-`). The
/// scan is greedy and stops at the first byte that cannot continue the grammar, so in
/// `2E4224EE` it takes `2E4224` and the `E` after it is the next token.
fn scanned_literal_len(run: &[u8]) -> Option<usize> {
    let digits = |from: usize| {
        run[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let mut i = usize::from(run.first() == Some(&b'-'));
    match run.get(i) {
        // serde_json rejects a digit after a leading zero as an invalid number.
        Some(b'0') if run.get(i + 1).is_some_and(u8::is_ascii_digit) => return None,
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i += digits(i),
        _ => return None,
    }
    if run.get(i) == Some(&b'.') {
        let n = digits(i + 1);
        if n == 0 {
            return None;
        }
        i += 1 + n;
    }
    if matches!(run.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(run.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let n = digits(i);
        if n == 0 {
            return None;
        }
        i += n;
    }
    Some(i)
}

/// Masks one ended number run where it lies: a plain integer stays as written, any
/// other literal becomes the marker and spaces with its text queued. A run that is no
/// literal but starts with one (`2E4224EE`, `1-2`) is that literal, masked by the same
/// rule, and then the rest as written: serde_json would read the literal and stop at
/// the rest, so it must see the literal masked, or a huge one would be reported as out
/// of range instead of the syntax error after it (SPEC.md §1.1: no literal is out of
/// range). A run whose scan fails inside it is left as written, for serde_json to
/// reject where it stands.
fn mask_run(run: &mut [u8], literals: &Literals) {
    if passes_unmasked(run) {
        return;
    }
    if !is_number_literal(run) {
        if let Some(len) = scanned_literal_len(run).filter(|&len| len < run.len()) {
            mask_run(&mut run[..len], literals);
        }
        return;
    }
    // A one-byte literal is a digit, which passes unmasked: the marker fits.
    debug_assert!(run.len() >= MASK_MARKER.len());
    literals
        .borrow_mut()
        .push_back(String::from_utf8_lossy(run).into());
    let (marker, rest) = run.split_at_mut(MASK_MARKER.len().min(run.len()));
    marker.copy_from_slice(&MASK_MARKER[..marker.len()]);
    rest.fill(b' ');
}

impl<R: Read> Read for MaskingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.out_start == self.out.len() {
            self.fill()?;
        }
        let n = buf.len().min(self.out.len() - self.out_start);
        buf[..n].copy_from_slice(&self.out[self.out_start..self.out_start + n]);
        self.out_start += n;
        Ok(n)
    }
}

impl NodeOf<'_> {
    /// The node's value when it is an integer literal a trace may carry (SPEC.md §1.1):
    /// written as `0` or digits without a leading zero, no sign, fraction or exponent,
    /// at most 2^53 - 1. Else `None`.
    pub fn integer(&self) -> Option<u64> {
        match self {
            // At most 2^53 - 1: a plain integer of 17 to 19 digits is out of range.
            NodeOf::Number(Number::Integer(v)) => Some(*v).filter(|&v| v <= JSON_INTEGER_MAX),
            // Every plain integer of up to 19 digits was read as its value
            // ([`passes_unmasked`]), so a literal kept as text has a sign, a fraction, an
            // exponent or 20 digits and more: none is an integer a trace may carry.
            _ => None,
        }
    }

    /// Compact JSON of the value cut to 40 characters, as error reasons quote it.
    pub fn quoted(&self) -> String {
        let mut quote = Quote::default();
        quote.node(self);
        quote.finish()
    }
}

/// A string quoted as error reasons quote it: JSON, cut to 40 characters.
pub fn quote_str(s: &str) -> String {
    let mut quote = Quote::default();
    quote.string(s);
    quote.finish()
}

/// How many characters of a quoted value are kept before `...` (SPEC.md §2.2).
const QUOTE_CHARS_MAX: usize = 40;

/// Compact JSON written only as far as the cut: quoting a 50 MB value costs 41
/// characters, not 50 MB.
#[derive(Default)]
struct Quote {
    text: String,
    chars: usize,
}

impl Quote {
    fn full(&self) -> bool {
        self.chars > QUOTE_CHARS_MAX
    }

    fn push(&mut self, c: char) {
        if !self.full() {
            self.text.push(c);
            self.chars += 1;
        }
    }

    fn push_str(&mut self, s: &str) {
        for c in s.chars() {
            if self.full() {
                return;
            }
            self.push(c);
        }
    }

    /// A JSON string with serde_json's escapes (SPEC.md §2.2).
    fn string(&mut self, s: &str) {
        self.push('"');
        for c in s.chars() {
            if self.full() {
                return;
            }
            match c {
                '"' => self.push_str("\\\""),
                '\\' => self.push_str("\\\\"),
                '\u{8}' => self.push_str("\\b"),
                '\u{c}' => self.push_str("\\f"),
                '\n' => self.push_str("\\n"),
                '\r' => self.push_str("\\r"),
                '\t' => self.push_str("\\t"),
                c if (c as u32) < 0x20 => self.push_str(&format!("\\u{:04x}", c as u32)),
                c => self.push(c),
            }
        }
        self.push('"');
    }

    fn node(&mut self, node: &NodeOf) {
        if self.full() {
            return;
        }
        match node {
            NodeOf::Null => self.push_str("null"),
            NodeOf::Bool(b) => self.push_str(if *b { "true" } else { "false" }),
            NodeOf::Number(Number::Integer(v)) => self.push_str(&v.to_string()),
            NodeOf::Number(Number::Literal(text)) => self.push_str(text),
            NodeOf::String(s) => self.string(s),
            NodeOf::Array(items) => {
                self.push('[');
                for (i, item) in items.iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    if i > 0 {
                        self.push(',');
                    }
                    self.node(item);
                }
                self.push(']');
            }
            NodeOf::Object(members) => {
                // Byte order of names, a repeated name once with its last value: what
                // serde_json's map printed before numbers were kept as written.
                let sorted: BTreeMap<&str, &NodeOf> =
                    members.iter().map(|(k, v)| (&**k, v)).collect();
                self.push('{');
                for (i, (name, value)) in sorted.into_iter().enumerate() {
                    if self.full() {
                        return;
                    }
                    if i > 0 {
                        self.push(',');
                    }
                    self.string(name);
                    self.push(':');
                    self.node(value);
                }
                self.push('}');
            }
        }
    }

    fn finish(self) -> String {
        if self.full() {
            let mut cut: String = self.text.chars().take(QUOTE_CHARS_MAX).collect();
            cut.push_str("...");
            cut
        } else {
            self.text
        }
    }
}

/// Deserializes one [`Node`], taking each number's text from the masked literals.
#[derive(Clone, Copy)]
pub struct NodeSeed<'l> {
    pub literals: &'l Literals,
    /// The text was not masked (see [`NodeSeed::unmasked`]).
    pub unmasked: bool,
}

impl<'l> NodeSeed<'l> {
    /// Reads text masked by [`mask_numbers`] or [`MaskingReader`], whose literals
    /// `literals` holds.
    pub fn masked(literals: &'l Literals) -> Self {
        NodeSeed {
            literals,
            unmasked: false,
        }
    }

    /// Reads text as written, for a caller that reads it again masked when this read
    /// fails: a number that is not a plain integer has lost its text in serde_json
    /// (`1.0` is visited as `1`, `1e400` is an error), so it fails the read.
    pub fn unmasked(literals: &'l Literals) -> Self {
        NodeSeed {
            literals,
            unmasked: true,
        }
    }

    fn number_as_written<E: serde::de::Error>(
        &self,
        node: NodeOf<'static>,
    ) -> Result<NodeOf<'static>, E> {
        if self.unmasked {
            Err(E::custom("a number literal that is not a plain integer"))
        } else {
            Ok(node)
        }
    }
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_> {
    type Value = NodeOf<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<NodeOf<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl NodeSeed<'_> {
    /// The next masked literal's text, or `placeholder` past the last one.
    fn literal_or<'de>(&self, placeholder: String) -> NodeOf<'de> {
        NodeOf::Number(Number::Literal(
            self.literals
                .borrow_mut()
                .pop_front()
                .unwrap_or_else(|| placeholder.into_boxed_str()),
        ))
    }
}

/// Whether serde_json visited the mask marker: `-0.0` is what `-0` parses to, and no
/// unmasked literal that serde_json accepts is `-0.0` (`-0` itself is masked).
pub fn is_mask_marker(v: f64) -> bool {
    v == 0.0 && v.is_sign_negative()
}

impl<'de> Visitor<'de> for NodeSeed<'_> {
    type Value = NodeOf<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::Null)
    }
    fn visit_none<E>(self) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::Bool(v))
    }
    // A plain integer reaches serde_json as written, and its `u64` is its text; every
    // other well-formed literal was masked to `-0`, visited as `-0.0`, its text next in
    // the queue. Anything else comes from a run the scan left alone because it is
    // malformed (`1-2`, `-0-`), and serde_json reports its own syntax error right after
    // visiting its first part; the placeholder only lets it get there, so its message
    // is the one reported.
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::Number(Number::Integer(v)))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<NodeOf<'de>, E> {
        self.number_as_written(NodeOf::Number(Number::Literal(v.to_string().into())))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<NodeOf<'de>, E> {
        if self.unmasked {
            self.number_as_written(NodeOf::Null)
        } else if is_mask_marker(v) {
            Ok(self.literal_or("-0".to_owned()))
        } else {
            Ok(NodeOf::Number(Number::Literal(v.to_string().into())))
        }
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::String(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::String(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<NodeOf<'de>, E> {
        Ok(NodeOf::String(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NodeOf<'de>, A::Error> {
        // Most arrays and objects of a trace are short; starting at 4 skips the first
        // two regrowths of every one.
        let mut items = Vec::with_capacity(4);
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(NodeOf::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NodeOf<'de>, A::Error> {
        let mut members = Vec::with_capacity(4);
        while let Some(key) = map.next_key_seed(MemberNameSeed)? {
            let value = map.next_value_seed(self)?;
            members.push((key, value));
        }
        Ok(NodeOf::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_member_names_are_borrowed_and_others_owned() {
        let node = parse(br#"{"seq":1,"hash_ids":[],"se\u0071":2,"zzz":3}"#).unwrap();
        let Node::Object(members) = node else {
            panic!("expected an object")
        };
        let names: Vec<(&str, bool)> = members
            .iter()
            .map(|(name, _)| (&**name, matches!(name, Cow::Borrowed(_))))
            .collect();
        assert_eq!(
            names,
            [
                ("seq", true),
                ("hash_ids", true),
                ("seq", true),
                ("zzz", false)
            ]
        );
    }

    #[test]
    fn strings_borrow_from_a_slice_unless_escaped() {
        let (masked, literals) = mask_numbers(br#"["plain", "esc\u0061ped", 1.5]"#);
        let mut de = serde_json::Deserializer::from_slice(&masked);
        let node = NodeSeed::masked(&literals).deserialize(&mut de).unwrap();
        let NodeOf::Array(items) = &node else {
            panic!("expected an array")
        };
        assert!(matches!(&items[0], NodeOf::String(Cow::Borrowed("plain"))));
        assert!(matches!(&items[1], NodeOf::String(Cow::Owned(s)) if s == "escaped"));
        assert_eq!(node.clone().into_owned(), node);
        assert_eq!(node.quoted(), r#"["plain","escaped",1.5]"#);
    }

    #[test]
    fn repeated_members_are_kept() {
        let node = parse(br#"{"a":1,"a":2}"#).unwrap();
        let Node::Object(members) = node else {
            panic!("expected an object")
        };
        assert_eq!(members.len(), 2);
    }

    #[test]
    fn floats_stay_floats() {
        for literal in ["5.0", "1e3", "-0", "01x"] {
            let node = parse(literal.as_bytes()).ok();
            assert_eq!(node.as_ref().and_then(Node::integer), None, "{literal}");
        }
        assert_eq!(parse(b"[0, 17]").unwrap().quoted(), "[0,17]");
    }

    #[test]
    fn literals_keep_their_text() {
        let node = parse(br#"[1e400, "1e3 inside a string", -0.5E+2, 10]"#).unwrap();
        assert_eq!(node.quoted(), r#"[1e400,"1e3 inside a string",-0.5E+2,10]"#);
    }

    /// Every kind of literal the masking treats differently, each with its text as
    /// validation must see it and whether it is a trace integer (SPEC.md §1.1).
    const LITERAL_EDGES: [(&str, Option<u64>); 14] = [
        ("0", Some(0)),
        ("-0", None),
        ("7", Some(7)),
        ("1.0", None),
        ("1e5", None),
        ("-12", None),
        ("9007199254740991", Some(9_007_199_254_740_991)),
        ("9007199254740992", None),
        ("1234567890123456789", None),
        ("9999999999999999999", None),
        ("18446744073709551615", None),
        ("18446744073709551616", None),
        ("123456789012345678901234567890", None),
        ("0.5E-3", None),
    ];

    #[test]
    fn plain_integers_pass_unmasked_and_the_rest_keep_their_text() {
        for (literal, integer) in LITERAL_EDGES {
            let doc = format!("[{literal}, {literal}]");
            let node = parse(doc.as_bytes()).unwrap();
            let Node::Array(items) = &node else {
                panic!("expected an array")
            };
            for item in items {
                assert_eq!(item.quoted(), literal);
                assert_eq!(item.integer(), integer, "{literal}");
            }
            let unmasked = passes_unmasked(literal.as_bytes());
            let (masked, literals) = mask_numbers(doc.as_bytes());
            assert_eq!(masked.len(), doc.len(), "{literal}: lengths are kept");
            let queued: Vec<Box<str>> = literals.into_inner().into();
            if unmasked {
                assert_eq!(masked, doc.as_bytes(), "{literal}");
                assert!(queued.is_empty(), "{literal}");
            } else {
                let marker = format!("[-0{}", " ".repeat(literal.len() - 2));
                assert!(masked.starts_with(marker.as_bytes()), "{literal}");
                assert_eq!(queued, [literal.into(), literal.into()], "{literal}");
            }
        }
    }

    /// A source handing out `step` bytes per read, so runs, strings and escapes are
    /// split across chunks at every offset.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn masking_is_the_same_however_the_source_is_cut() {
        let doc =
            br#"{"a\\":"1.5 \"-0\" \\","b":[-0,12,1.0e+5,-7,00,1-2,"x\\\\"],"c":184467440737095516160}"#;
        let masked =
            br#"{"a\\":"1.5 \"-0\" \\","b":[-0,12,-0    ,-0,00,1-2,"x\\\\"],"c":-0                   }"#;
        let queued = ["-0", "1.0e+5", "-7", "184467440737095516160"];
        for step in 1..=doc.len() {
            let literals = Rc::new(Literals::default());
            let mut out = Vec::new();
            MaskingReader::new(Trickle(doc, step), Rc::clone(&literals))
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(masked),
                "{step}"
            );
            let texts: Vec<Box<str>> = literals.borrow().iter().cloned().collect();
            assert_eq!(texts, queued.map(Box::from), "{step}");
        }
    }

    /// The masked bytes and the cut of `doc` with a cap of `cap` bytes, read `step`
    /// bytes at a time.
    fn capped(doc: &[u8], cap: usize, step: usize) -> (String, Option<ValueCut>) {
        let literals = Rc::new(Literals::default());
        let mut reader = MaskingReader::with_chunk_bytes(doc, Rc::clone(&literals), step);
        reader.value_bytes_max = cap;
        let cut = reader.value_cut();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        (String::from_utf8_lossy(&out).into_owned(), cut.get())
    }

    fn masked_bytes(doc: &[u8], cap: usize) -> Vec<u8> {
        let mut reader = MaskingReader::new(doc, Rc::new(Literals::default()));
        reader.value_bytes_max = cap;
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn a_value_over_the_cap_ends_the_output_at_its_cap() {
        let at = |is_string, line, column| {
            Some(ValueCut {
                is_string,
                line,
                column,
            })
        };
        // (document, masked output, cut) with a cap of 8 bytes.
        let cases: [(&[u8], &str, Option<ValueCut>); 10] = [
            (br#"["12345678"]"#, r#"["12345678"]"#, None),
            (br#"["123456789"]"#, r#"["12345678"#, at(true, 1, 2)),
            // Escapes count as written: four `\n` are 8 bytes, five pass the cap at
            // the fifth backslash, which is not passed on.
            (br#"["\n\n\n\n"]"#, r#"["\n\n\n\n"]"#, None),
            (br#"["\n\n\n\n\n"]"#, r#"["\n\n\n\n"#, at(true, 1, 2)),
            (
                b"{\n\n  \"k\": 1,\n   \"123456789\": 2}",
                "{\n\n  \"k\": 1,\n   \"12345678",
                at(true, 4, 4),
            ),
            (b"[12345678]", "[12345678]", None),
            (b"[1234567.]", "[1234567.]", None),
            (b"[0, -123456789]", "[0, -0", at(false, 1, 5)),
            // `1.` then dots stops fitting the grammar at its second byte past `1`:
            // passed on whole for serde_json to reject where it stands.
            (b"[1.........]", "[1.........]", None),
            (b"[1.5e+123456]", "[-0", at(false, 1, 2)),
        ];
        for (doc, masked, cut) in cases {
            for step in 1..=doc.len() {
                let what = String::from_utf8_lossy(doc);
                assert_eq!(
                    capped(doc, 8, step),
                    (masked.to_owned(), cut),
                    "{what} by {step}"
                );
            }
        }
    }

    #[test]
    fn a_cut_value_is_the_error_only_when_serde_json_reads_up_to_it() {
        for (doc, explained) in [
            (&br#"["123456789"]"#[..], true),
            (br#"{"123456789": 1}"#, true),
            (b"123456789", true),
            (b"[0, 123456789]", true),
            // UTF-8 is judged at a string's end, which the cut comes before.
            (b"[\"\xFF23456789\"]", true),
            // An error at or before the value's first byte is the document's first.
            (b"{} 123456789", false),
            (br#"{} "123456789""#, false),
            (b"[1 123456789]", false),
            (b"[\"\x01123456789\"]", false),
            (br#"["\x123456789"]"#, false),
        ] {
            let (_, cut) = capped(doc, 8, doc.len());
            let cut = cut.unwrap_or_else(|| panic!("{doc:?} is cut"));
            let masked = masked_bytes(doc, 8);
            // The marker of a cut literal has its (empty) text queued.
            let literals = Literals::new(VecDeque::from([Box::from("")]));
            let mut de = serde_json::Deserializer::from_slice(&masked);
            let parsed = NodeSeed::masked(&literals)
                .deserialize(&mut de)
                .and_then(|_| de.end());
            assert_eq!(
                cut.explains(parsed.as_ref().err()),
                explained,
                "{doc:?}: {parsed:?}"
            );
        }
    }

    #[test]
    fn malformed_runs_are_still_syntax_errors_where_they_stand() {
        for (doc, column) in [
            ("[00]", 3),
            ("[-00]", 4),
            ("[01, 1.5]", 3),
            ("[1.5, -0-]", 9),
            ("[1e5, 1.]", 9),
            ("[2, 1-2]", 6),
        ] {
            let error = parse_node(doc.as_bytes()).unwrap_err();
            assert_eq!(
                (error.line(), error.column()),
                (1, column),
                "{doc}: {error}"
            );
        }
    }

    #[test]
    fn the_number_grammar_is_exact() {
        for ok in ["0", "-0", "1.5", "1e5", "1E-5", "-12.5e+30"] {
            assert!(is_number_literal(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "01", "1.", ".5", "-", "1e", "1e+", "+1", "1-2", "1.5.3", "--1",
        ] {
            assert!(!is_number_literal(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn quotes_are_cut_at_forty_characters() {
        let quoted = quote_str(&"x".repeat(60));
        assert_eq!(quoted, format!("\"{}...", "x".repeat(39)));
        assert_eq!(quote_str("a\u{1}\"b"), r#""a\u0001\"b""#);
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        assert!(parse(b"{} x").is_err());
    }
}
