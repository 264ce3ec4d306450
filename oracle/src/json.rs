//! RFC 8259 JSON, read for SPEC §1–§2: a plain recursive-descent reader over the
//! document's bytes that keeps every object member in document order (repeated names
//! included, so that §1.1 can report them) and every number as its literal text exactly
//! as written (§2.2 quotes it so; §1.1: a literal of any size is well-formed).
//!
//! A syntax error is reported as SPEC §2 prescribes: `<parser message>` is serde_json's
//! (version 1, reading a byte slice) message for the first syntax error, `<what> at line
//! L column C`, with every number literal that matches the grammar read as if in range.
//! So the wordings and positions below follow serde_json's: a position is the line
//! (1 + the newlines before the line's start) and the byte column of either the last
//! byte consumed (`error`) or the next byte to be looked at (`peek_error`, capped at the
//! document's end); nesting deeper than 127 arrays and objects is "recursion limit
//! exceeded" at the 128th opening bracket. The renderings of §2.2 follow the reader.
//!
//! One syntax error is SPEC's own, not serde_json's (§1.1, §2.2): a string or number
//! literal longer than [`MAX_VALUE_LENGTH_BYTES`] is "a string (number literal) longer
//! than 67108864 bytes" at its first byte, when reading reaches the byte after the cap
//! before any other error has been reported at an earlier byte.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// One JSON value of a document `'d`. Objects are a list of `(name, value)` pairs so that
/// repeats survive. Strings without escapes and number literals borrow the document.
#[derive(Debug, Clone)]
pub enum Node<'d> {
    Null,
    Bool(bool),
    /// The number's literal text exactly as written in the document (SPEC §2.2).
    Number(&'d str),
    String(Cow<'d, str>),
    Array(Vec<Node<'d>>),
    Object(Vec<Member<'d>>),
}

/// One object member: its name and value.
pub type Member<'d> = (Cow<'d, str>, Node<'d>);

/// Containers open at once before the reader gives up (serde_json's limit).
const MAX_DEPTH: usize = 128;

/// Longest string (bytes between its quotes, escapes as written) or number literal a
/// document may hold (SPEC §1.1, 64 MiB): no valid trace needs anything near it, and
/// the cap bounds what a reader must hold of one value when a stream never ends it.
const MAX_VALUE_LENGTH_BYTES: usize = 64 * 1024 * 1024;

struct Reader<'b> {
    bytes: &'b [u8],
    /// The next byte to read.
    at: usize,
    depth: usize,
}

type Parsed<T> = Result<T, String>;

impl<'b> Reader<'b> {
    /// `(line, column)` of the byte offset `i`, from the bytes before it.
    fn position(&self, i: usize) -> (usize, usize) {
        let before = &self.bytes[..i];
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let line = 1 + before[..line_start].iter().filter(|b| **b == b'\n').count();
        (line, i - line_start)
    }

    /// `what at line L column C` for the byte offset `i`.
    fn located(&self, what: &str, i: usize) -> String {
        let (line, column) = self.position(i);
        format!("{what} at line {line} column {column}")
    }

    /// An error at the last byte consumed.
    fn error<T>(&self, what: &str) -> Parsed<T> {
        Err(self.located(what, self.at))
    }

    /// An error at the next byte (or the end).
    fn peek_error<T>(&self, what: &str) -> Parsed<T> {
        Err(self.located(what, self.bytes.len().min(self.at + 1)))
    }

    /// SPEC §2.2's error for a value of more than [`MAX_VALUE_LENGTH_BYTES`] whose first
    /// byte (a string's opening quote, a literal's first character) is at offset `first`.
    fn too_long<T>(&self, what: &str, first: usize) -> Parsed<T> {
        Err(self.located(
            &format!("a {what} longer than {MAX_VALUE_LENGTH_BYTES} bytes"),
            first + 1,
        ))
    }

    /// The number literal starting at offset `start` is too long once the bytes read
    /// for it, each still fitting the grammar, are more than the cap (SPEC §2.2).
    fn literal_within_cap(&self, start: usize) -> Parsed<()> {
        if self.at - start > MAX_VALUE_LENGTH_BYTES {
            return self.too_long("number literal", start);
        }
        Ok(())
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    /// Skips RFC 8259 whitespace; the next byte, if any.
    fn skip_whitespace(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
        self.peek()
    }

    fn value(&mut self) -> Parsed<Node<'b>> {
        let Some(first) = self.skip_whitespace() else {
            return self.peek_error("EOF while parsing a value");
        };
        match first {
            b'n' => self.literal(b"null", Node::Null),
            b't' => self.literal(b"true", Node::Bool(true)),
            b'f' => self.literal(b"false", Node::Bool(false)),
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => {
                self.at += 1;
                self.string().map(Node::String)
            }
            b'[' | b'{' => {
                self.depth += 1;
                if self.depth >= MAX_DEPTH {
                    return self.peek_error("recursion limit exceeded");
                }
                self.at += 1;
                let node = if first == b'[' {
                    self.array()
                } else {
                    self.object()
                };
                self.depth -= 1;
                node
            }
            _ => self.peek_error("expected value"),
        }
    }

    /// `null`, `true` or `false`; the first byte is known to match.
    fn literal(&mut self, word: &[u8], node: Node<'b>) -> Parsed<Node<'b>> {
        self.at += 1;
        for expected in &word[1..] {
            match self.next() {
                None => return self.error("EOF while parsing a value"),
                Some(byte) if byte != *expected => return self.error("expected ident"),
                Some(_) => {}
            }
        }
        Ok(node)
    }

    fn digits(&mut self) -> usize {
        let from = self.at;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
        self.at - from
    }

    /// RFC 8259 §6: `[-] (0 | [1-9][0-9]*) [. [0-9]+] [(e|E) [+|-] [0-9]+]`, kept as text.
    /// The length cap is checked after each part, before any error the next byte could
    /// give: every byte counted then fits the grammar, and comes before that error.
    fn number(&mut self) -> Parsed<Node<'b>> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.next() {
            None => return self.error("EOF while parsing a value"),
            Some(b'0') => {
                if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                    return self.peek_error("invalid number");
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            Some(_) => return self.error("invalid number"),
        }
        self.literal_within_cap(start)?;
        if self.peek() == Some(b'.') {
            self.at += 1;
            let fraction_digits = self.digits();
            self.literal_within_cap(start)?;
            if fraction_digits == 0 {
                return match self.peek() {
                    Some(_) => self.peek_error("invalid number"),
                    None => self.peek_error("EOF while parsing a value"),
                };
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.literal_within_cap(start)?;
            match self.next() {
                None => return self.error("EOF while parsing a value"),
                Some(b'0'..=b'9') => {
                    self.digits();
                    self.literal_within_cap(start)?;
                }
                Some(_) => return self.error("invalid number"),
            }
        }
        // The literal is ASCII, so always UTF-8.
        let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or("0");
        Ok(Node::Number(text))
    }

    /// The rest of a string after its opening quote: borrowed when it has no escape.
    ///
    /// The length cap (SPEC §2.2): a string is too long when reading reaches the byte
    /// after the cap (offset `cap_end`) and that byte is not the closing quote. Another
    /// error wins only when it is reported at an earlier byte; an escape's errors are
    /// reported at its last byte read, so an escape that fails or ends past the cap is
    /// the cap's error. UTF-8 is judged at the closing quote, which a too-long string
    /// never reaches; and no text beyond the cap is ever kept.
    fn string(&mut self) -> Parsed<Cow<'b, str>> {
        let start = self.at;
        let cap_end = start + MAX_VALUE_LENGTH_BYTES;
        let mut unescaped: Option<Vec<u8>> = None;
        loop {
            if self.at >= cap_end && self.peek().is_some_and(|b| b != b'"') {
                return self.too_long("string", start - 1);
            }
            let Some(byte) = self.next() else {
                return self.error("EOF while parsing a string");
            };
            match byte {
                b'"' => break,
                b'\\' => {
                    let bytes = self.bytes;
                    let text = unescaped.get_or_insert_with(|| bytes[start..self.at - 1].to_vec());
                    let escaped = self.escape(text);
                    // `self.at` is past the escape's last byte read, where its error is.
                    if self.at > cap_end {
                        return self.too_long("string", start - 1);
                    }
                    escaped?;
                }
                0x00..=0x1f => {
                    return self
                        .error("control character (\\u0000-\\u001F) found while parsing a string")
                }
                _ => {
                    if let Some(text) = &mut unescaped {
                        text.push(byte);
                    }
                }
            }
        }
        let raw = &self.bytes[start..self.at - 1];
        let length = unescaped.as_ref().map_or(raw.len(), Vec::len);
        // Each text is checked once, and an unescaped one becomes the string it is.
        let checked = match unescaped {
            None => std::str::from_utf8(raw).map(Cow::Borrowed),
            Some(text) => String::from_utf8(text)
                .map(Cow::Owned)
                .map_err(|e| e.utf8_error()),
        };
        match checked {
            Ok(text) => Ok(text),
            Err(e) => {
                // serde_json points back from the closing quote by the bytes of the
                // (unescaped) text after its first invalid sequence.
                let behind = length - e.valid_up_to();
                let (line, column) = self.position(self.at);
                let column = column.saturating_sub(behind);
                Err(format!(
                    "invalid unicode code point at line {line} column {column}"
                ))
            }
        }
    }

    /// One escape after its backslash.
    fn escape(&mut self, text: &mut Vec<u8>) -> Parsed<()> {
        let Some(byte) = self.next() else {
            return self.error("EOF while parsing a string");
        };
        let plain = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => return self.unicode_escape(text),
            _ => return self.error("invalid escape"),
        };
        text.push(plain);
        Ok(())
    }

    /// Four hex digits.
    fn hex4(&mut self) -> Parsed<u32> {
        if self.bytes.len() - self.at < 4 {
            self.at = self.bytes.len();
            return self.error("EOF while parsing a string");
        }
        let digits = &self.bytes[self.at..self.at + 4];
        self.at += 4;
        let mut value = 0u32;
        for digit in digits {
            match char::from(*digit).to_digit(16) {
                Some(d) => value = value * 16 + d,
                None => return self.error("invalid escape"),
            }
        }
        Ok(value)
    }

    /// `\uXXXX`, a surrogate pair being two of them.
    fn unicode_escape(&mut self, text: &mut Vec<u8>) -> Parsed<()> {
        let first = self.hex4()?;
        let code = match first {
            0xdc00..=0xdfff => return self.error("lone leading surrogate in hex escape"),
            0xd800..=0xdbff => {
                for expected in [b'\\', b'u'] {
                    match self.peek() {
                        None => return self.error("EOF while parsing a string"),
                        Some(byte) => {
                            self.at += 1;
                            if byte != expected {
                                return self.error("unexpected end of hex escape");
                            }
                        }
                    }
                }
                let second = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&second) {
                    return self.error("lone leading surrogate in hex escape");
                }
                0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
            }
            other => other,
        };
        let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
        text.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        Ok(())
    }

    /// The rest of an array after `[`.
    fn array(&mut self) -> Parsed<Node<'b>> {
        let mut items = Vec::new();
        loop {
            match self.skip_whitespace() {
                None => return self.peek_error("EOF while parsing a list"),
                Some(b']') => {
                    self.at += 1;
                    // A growing Vec keeps room to spare; the tree of a large trace is
                    // smaller without it.
                    items.shrink_to_fit();
                    return Ok(Node::Array(items));
                }
                Some(_) if items.is_empty() => {}
                Some(b',') => {
                    self.at += 1;
                    match self.skip_whitespace() {
                        Some(b']') => return self.peek_error("trailing comma"),
                        None => return self.peek_error("EOF while parsing a value"),
                        Some(_) => {}
                    }
                }
                Some(_) => return self.peek_error("expected `,` or `]`"),
            }
            items.push(self.value()?);
        }
    }

    /// The rest of an object after `{`.
    fn object(&mut self) -> Parsed<Node<'b>> {
        let mut members = Vec::new();
        loop {
            match self.skip_whitespace() {
                None => return self.peek_error("EOF while parsing an object"),
                Some(b'}') => {
                    self.at += 1;
                    members.shrink_to_fit();
                    return Ok(Node::Object(members));
                }
                Some(b'"') if members.is_empty() => {}
                Some(_) if members.is_empty() => return self.peek_error("key must be a string"),
                Some(b',') => {
                    self.at += 1;
                    match self.skip_whitespace() {
                        Some(b'"') => {}
                        Some(b'}') => return self.peek_error("trailing comma"),
                        Some(_) => return self.peek_error("key must be a string"),
                        None => return self.peek_error("EOF while parsing a value"),
                    }
                }
                Some(_) => return self.peek_error("expected `,` or `}`"),
            }
            self.at += 1;
            let name = self.string()?;
            match self.skip_whitespace() {
                Some(b':') => self.at += 1,
                Some(_) => return self.peek_error("expected `:`"),
                None => return self.peek_error("EOF while parsing an object"),
            }
            let value = self.value()?;
            members.push((name, value));
        }
    }
}

/// Parses one JSON document (trailing bytes other than whitespace are an error). Err:
/// the `<parser message>` of SPEC §2.
pub fn parse(bytes: &[u8]) -> Result<Node<'_>, String> {
    let mut reader = Reader {
        bytes,
        at: 0,
        depth: 0,
    };
    let root = reader.value()?;
    if reader.skip_whitespace().is_some() {
        return reader.peek_error("trailing characters");
    }
    Ok(root)
}

/// Longest quotation, in Unicode scalar values, before `...` is appended (SPEC §2.2).
const QUOTE_LIMIT_CHARS: usize = 40;

/// Cuts a rendering to 40 chars (on a char boundary) and appends `...` when it was longer.
fn cut(rendered: String) -> String {
    if rendered.chars().count() > QUOTE_LIMIT_CHARS {
        let mut short: String = rendered.chars().take(QUOTE_LIMIT_CHARS).collect();
        short.push_str("...");
        short
    } else {
        rendered
    }
}

/// A string as SPEC §2.2 writes it: quoted, `"` and `\` escaped, the five short
/// control escapes, other controls as lowercase `\u00xx`, everything else as itself.
pub fn render_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Compact JSON of a node as SPEC §2.2 writes it: numbers as written, object members in
/// byte order of their names, a repeated name once with its last value.
fn render(node: &Node, out: &mut String) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(true) => out.push_str("true"),
        Node::Bool(false) => out.push_str("false"),
        Node::Number(text) => out.push_str(text),
        Node::String(text) => render_string(text, out),
        Node::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render(item, out);
            }
            out.push(']');
        }
        Node::Object(members) => {
            // A later insert replaces an earlier one, so each name keeps its last value;
            // a BTreeMap iterates in byte order of its keys (never a hash order), and
            // keeps an object of very many members from being deduplicated in
            // quadratic time.
            let mut shown: BTreeMap<&str, &Node> = BTreeMap::new();
            for (name, value) in members {
                shown.insert(name, value);
            }
            out.push('{');
            for (i, (name, value)) in shown.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                render_string(name, out);
                out.push(':');
                render(value, out);
            }
            out.push('}');
        }
    }
}

/// The offending value as quoted in a reason: compact JSON as SPEC §2.2 writes it, cut.
pub fn quote(node: &Node) -> String {
    let mut rendered = String::new();
    render(node, &mut rendered);
    cut(rendered)
}

/// A string from the trace as quoted in a reason (`"w0"`): JSON-escaped, then cut.
pub fn quote_str(text: &str) -> String {
    let mut rendered = String::new();
    render_string(text, &mut rendered);
    cut(rendered)
}

/// First occurrence of a member; later repeats are reported, never used.
pub fn member<'a, 'd>(members: &'a [Member<'d>], name: &str) -> Option<&'a Node<'d>> {
    members.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}
