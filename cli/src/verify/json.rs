//! A small streaming JSON reader for `verify` (RFC 8259), written for diagnosis: it
//! reads tokens one at a time from a `BufRead` with their byte offsets, says whether
//! each was written as RFC 8785 writes it, and builds a tree of one bounded value (a
//! decision, a log entry) that keeps repeated members. It also holds the quoting of
//! values in messages (SPEC.md §2.2) and the path syntax (§2.1).

use std::io::BufRead;

/// One token of JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tok {
    BeginObject,
    EndObject,
    BeginArray,
    EndArray,
    Colon,
    Comma,
    Str(String),
    /// A number literal's text as written.
    Num(String),
    True,
    False,
    Null,
    /// The end of the input.
    Eof,
}

impl Tok {
    /// Whether the token starts a value.
    pub fn starts_value(&self) -> bool {
        !matches!(
            self,
            Tok::EndObject | Tok::EndArray | Tok::Colon | Tok::Comma | Tok::Eof
        )
    }
}

/// A token, where it starts, and how its bytes differ from the canonical form.
#[derive(Debug, Clone)]
pub struct Lexed {
    pub tok: Tok,
    /// Byte offset of the token's first byte.
    pub start: u64,
    /// Byte offset of the first whitespace byte before the token, if any.
    pub space_at: Option<u64>,
    /// Why the token's own bytes are not RFC 8785's, if they are not.
    pub non_canonical: Option<&'static str>,
}

/// Invalid JSON at a byte offset.
#[derive(Debug, Clone)]
pub struct LexError {
    pub offset: u64,
    pub reason: String,
}

/// Tokens from a byte stream; `offset` is the absolute offset of the next byte.
pub struct Lexer<'r> {
    source: &'r mut dyn BufRead,
    pub offset: u64,
    peeked: Option<Lexed>,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl<'r> Lexer<'r> {
    /// A lexer over `source`, whose first byte is at `offset` of the document.
    pub fn new(source: &'r mut dyn BufRead, offset: u64) -> Lexer<'r> {
        Lexer {
            source,
            offset,
            peeked: None,
        }
    }

    fn error(&self, offset: u64, reason: impl Into<String>) -> LexError {
        LexError {
            offset,
            reason: reason.into(),
        }
    }

    fn peek_byte(&mut self) -> Result<Option<u8>, LexError> {
        match self.source.fill_buf() {
            Ok(buf) => Ok(buf.first().copied()),
            Err(e) => Err(self.error(self.offset, format!("cannot read: {e}"))),
        }
    }

    fn bump(&mut self) {
        self.source.consume(1);
        self.offset += 1;
    }

    fn next_byte(&mut self, what: &str) -> Result<u8, LexError> {
        match self.peek_byte()? {
            Some(b) => {
                self.bump();
                Ok(b)
            }
            None => Err(self.error(self.offset, format!("the input ends inside {what}"))),
        }
    }

    /// The next token, without consuming it.
    pub fn peek(&mut self) -> Result<&Lexed, LexError> {
        if self.peeked.is_none() {
            let lexed = self.lex()?;
            self.peeked = Some(lexed);
        }
        Ok(self.peeked.as_ref().expect("just filled"))
    }

    /// The next token.
    pub fn next(&mut self) -> Result<Lexed, LexError> {
        match self.peeked.take() {
            Some(lexed) => Ok(lexed),
            None => self.lex(),
        }
    }

    fn lex(&mut self) -> Result<Lexed, LexError> {
        let mut space_at = None;
        while let Some(b) = self.peek_byte()? {
            if !is_space(b) {
                break;
            }
            space_at.get_or_insert(self.offset);
            self.bump();
        }
        let start = self.offset;
        let done = |tok, non_canonical| Lexed {
            tok,
            start,
            space_at,
            non_canonical,
        };
        let Some(b) = self.peek_byte()? else {
            return Ok(done(Tok::Eof, None));
        };
        let simple = match b {
            b'{' => Some(Tok::BeginObject),
            b'}' => Some(Tok::EndObject),
            b'[' => Some(Tok::BeginArray),
            b']' => Some(Tok::EndArray),
            b':' => Some(Tok::Colon),
            b',' => Some(Tok::Comma),
            _ => None,
        };
        if let Some(tok) = simple {
            self.bump();
            return Ok(done(tok, None));
        }
        match b {
            b'"' => {
                let (text, canonical) = self.string()?;
                let why = (!canonical).then_some("a string not escaped as RFC 8785 escapes it");
                Ok(done(Tok::Str(text), why))
            }
            b'-' | b'0'..=b'9' => {
                let text = self.number()?;
                Ok(done(Tok::Num(text.clone()), number_non_canonical(&text)))
            }
            b't' => self.word("true", Tok::True).map(|t| done(t, None)),
            b'f' => self.word("false", Tok::False).map(|t| done(t, None)),
            b'n' => self.word("null", Tok::Null).map(|t| done(t, None)),
            0xEF if start == 0 => Err(self.error(
                start,
                "the receipt starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry",
            )),
            other => Err(self.error(start, format!("unexpected {}", byte_name(other)))),
        }
    }

    fn word(&mut self, word: &str, tok: Tok) -> Result<Tok, LexError> {
        let start = self.offset;
        for expected in word.bytes() {
            if self.peek_byte()? != Some(expected) {
                return Err(self.error(start, format!("expected `{word}`")));
            }
            self.bump();
        }
        Ok(tok)
    }

    fn number(&mut self) -> Result<String, LexError> {
        let start = self.offset;
        let mut text = String::new();
        while let Some(b) = self.peek_byte()? {
            if !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                break;
            }
            text.push(char::from(b));
            self.bump();
        }
        if number_grammar(&text) {
            Ok(text)
        } else {
            Err(self.error(start, format!("invalid number `{}`", cut(&text, 40))))
        }
    }

    /// A string token: its text and whether its bytes are RFC 8785's.
    fn string(&mut self) -> Result<(String, bool), LexError> {
        let start = self.offset;
        self.bump();
        let mut raw = Vec::new();
        let mut text = Vec::new();
        loop {
            let at = self.offset;
            let b = self.next_byte("a string")?;
            match b {
                b'"' => break,
                b'\\' => {
                    raw.push(b);
                    let e = self.next_byte("a string")?;
                    raw.push(e);
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape(&mut raw, at)?,
                        _ => return Err(self.error(at, "invalid escape in a string")),
                    };
                    let mut buf = [0u8; 4];
                    text.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0x00..=0x1f => {
                    return Err(self.error(at, "a control character inside a string"));
                }
                _ => {
                    raw.push(b);
                    text.push(b);
                }
            }
        }
        let text =
            String::from_utf8(text).map_err(|_| self.error(start, "a string that is not UTF-8"))?;
        let canonical = canonical_string(&text);
        let canonical_raw = &canonical.as_bytes()[1..canonical.len() - 1];
        Ok((text, canonical_raw == raw.as_slice()))
    }

    fn hex4(&mut self, raw: &mut Vec<u8>, at: u64) -> Result<u32, LexError> {
        let mut value = 0u32;
        for _ in 0..4 {
            let h = self.next_byte("a string")?;
            raw.push(h);
            let digit = char::from(h)
                .to_digit(16)
                .ok_or_else(|| self.error(at, "invalid \\u escape"))?;
            value = value * 16 + digit;
        }
        Ok(value)
    }

    fn unicode_escape(&mut self, raw: &mut Vec<u8>, at: u64) -> Result<char, LexError> {
        let first = self.hex4(raw, at)?;
        let code = if (0xD800..0xDC00).contains(&first) {
            let (b1, b2) = (self.next_byte("a string")?, self.next_byte("a string")?);
            raw.extend_from_slice(&[b1, b2]);
            if (b1, b2) != (b'\\', b'u') {
                return Err(self.error(at, "a lone surrogate escape"));
            }
            let second = self.hex4(raw, at)?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.error(at, "a lone surrogate escape"));
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| self.error(at, "a lone surrogate escape"))
    }
}

fn byte_name(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("`{}`", char::from(b))
    } else {
        format!("byte 0x{b:02x}")
    }
}

/// RFC 8259's number grammar.
fn number_grammar(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            digits(&mut i);
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Why an integer literal is not as RFC 8785 writes it (`-0`, `1e2`, `10.0`); a
/// fraction is left to the type check, which names it.
fn number_non_canonical(text: &str) -> Option<&'static str> {
    if text == "-0" {
        return Some("`-0`, which RFC 8785 writes as `0`");
    }
    let exponent = text.contains(['e', 'E']);
    let zero_fraction = text
        .split_once('.')
        .is_some_and(|(_, f)| f.bytes().take_while(u8::is_ascii_digit).all(|d| d == b'0'));
    (exponent || zero_fraction)
        .then_some("an integer not written in plain digits, as RFC 8785 writes it")
}

/// A string as RFC 8785 writes it, quotes included.
pub fn canonical_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
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
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON value that keeps its members in the order written, repeats included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    /// The member `name` (its first occurrence).
    pub fn get(&self, name: &str) -> Option<&Node> {
        match self {
            Node::Object(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
    /// A non-negative integer's value.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Node::Num(text) => text.parse().ok(),
            _ => None,
        }
    }
    pub fn items(&self) -> &[Node] {
        match self {
            Node::Array(items) => items,
            _ => &[],
        }
    }

    /// Compact JSON as SPEC.md §2.2 quotes values: members in byte order of their
    /// names, a repeated name once with its last value.
    pub fn compact(&self, out: &mut String) {
        match self {
            Node::Null => out.push_str("null"),
            Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Node::Num(text) => out.push_str(text),
            Node::Str(s) => out.push_str(&canonical_string(s)),
            Node::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.compact(out);
                }
                out.push(']');
            }
            Node::Object(members) => {
                let mut sorted: std::collections::BTreeMap<&str, &Node> = Default::default();
                for (k, v) in members {
                    sorted.insert(k, v);
                }
                out.push('{');
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&canonical_string(k));
                    out.push(':');
                    v.compact(out);
                }
                out.push('}');
            }
        }
    }

    /// The value as a message quotes it (SPEC.md §2.2): compact, cut to 40 characters.
    pub fn quoted(&self) -> String {
        let mut out = String::new();
        self.compact(&mut out);
        cut(&out, 40)
    }
}

/// `text` cut to `max` characters with `...` appended when longer.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push_str("...");
    out
}

/// A string quoted for a message (SPEC.md §2.2).
pub fn quote_str(text: &str) -> String {
    Node::Str(text.to_owned()).quoted()
}

/// A digest quoted for a message: in full (71 characters for a well-formed one), cut
/// only past 80 characters.
pub fn quote_digest(text: &str) -> String {
    cut(&canonical_string(text), 80)
}

/// The path of member `name` below `path` (SPEC.md §2.1; `$` is the receipt).
pub fn member_path(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    match (path == "$", plain) {
        (true, true) => name.to_owned(),
        (false, true) => format!("{path}.{name}"),
        (_, false) => format!("{path}[{}]", canonical_string(name)),
    }
}

/// Whether member names `a` < `b` in RFC 8785 order (UTF-16 code units).
pub fn sorts_before(a: &str, b: &str) -> bool {
    a.encode_utf16().lt(b.encode_utf16())
}

/// A problem found while reading one value into a tree.
#[derive(Debug, Clone)]
pub enum ParseProblem {
    Invalid(LexError),
    /// A member name given twice in one object: the path of the second.
    Repeated {
        path: String,
        name: String,
        offset: u64,
    },
}

/// The first place a value's bytes are not RFC 8785's.
#[derive(Debug, Clone)]
pub struct NonCanonical {
    pub path: String,
    pub offset: u64,
    pub what: String,
}

/// One value read into a tree, with the first non-canonical byte noted.
pub struct Parsed {
    pub node: Node,
    pub non_canonical: Option<NonCanonical>,
}

/// Reads one value whose first token is `first`; `path` names it. Nesting is bounded,
/// so no input can exhaust the stack.
pub fn parse_value(
    lexer: &mut Lexer<'_>,
    first: Lexed,
    path: &str,
) -> Result<Parsed, ParseProblem> {
    let mut non_canonical = None;
    let node = parse_inner(lexer, first, path, &mut non_canonical, 0)?;
    Ok(Parsed {
        node,
        non_canonical,
    })
}

const MAX_DEPTH: usize = 64;

fn note_token(lexed: &Lexed, path: &str, slot: &mut Option<NonCanonical>) {
    if slot.is_some() {
        return;
    }
    if let Some(offset) = lexed.space_at {
        *slot = Some(NonCanonical {
            path: path.to_owned(),
            offset,
            what: "whitespace, which RFC 8785 never writes".to_owned(),
        });
    } else if let Some(why) = lexed.non_canonical {
        *slot = Some(NonCanonical {
            path: path.to_owned(),
            offset: lexed.start,
            what: why.to_owned(),
        });
    }
}

fn expect(
    lexer: &mut Lexer<'_>,
    want: &Tok,
    what: &str,
    path: &str,
    slot: &mut Option<NonCanonical>,
) -> Result<(), ParseProblem> {
    let lexed = lexer.next().map_err(ParseProblem::Invalid)?;
    if &lexed.tok != want {
        return Err(ParseProblem::Invalid(LexError {
            offset: lexed.start,
            reason: format!("expected {what}"),
        }));
    }
    note_token(&lexed, path, slot);
    Ok(())
}

/// Records, as the first non-canonical byte when none was found yet, a member named
/// `name` (at `path`, byte `offset`) after `previous` where RFC 8785 sorts it before.
fn note_member_order(
    previous: &str,
    name: &str,
    path: &str,
    offset: u64,
    slot: &mut Option<NonCanonical>,
) {
    if slot.is_none() && !sorts_before(previous, name) {
        *slot = Some(NonCanonical {
            path: path.to_owned(),
            offset,
            what: format!(
                "member {} after {}, but RFC 8785 sorts members by name",
                quote_str(name),
                quote_str(previous)
            ),
        });
    }
}

fn parse_inner(
    lexer: &mut Lexer<'_>,
    first: Lexed,
    path: &str,
    slot: &mut Option<NonCanonical>,
    depth: usize,
) -> Result<Node, ParseProblem> {
    if depth > MAX_DEPTH {
        return Err(invalid(first.start, "nested too deeply"));
    }
    note_token(&first, path, slot);
    Ok(match first.tok {
        Tok::Null => Node::Null,
        Tok::True => Node::Bool(true),
        Tok::False => Node::Bool(false),
        Tok::Num(text) => Node::Num(text),
        Tok::Str(text) => Node::Str(text),
        Tok::BeginArray => parse_array(lexer, path, slot, depth)?,
        Tok::BeginObject => parse_object(lexer, path, slot, depth)?,
        _ => return Err(invalid(first.start, "expected a value")),
    })
}

/// A problem of the input that is not JSON, at byte `offset`.
fn invalid(offset: u64, reason: &str) -> ParseProblem {
    ParseProblem::Invalid(LexError {
        offset,
        reason: reason.to_owned(),
    })
}

/// The rest of an array whose `[` has been read, at `depth`.
fn parse_array(
    lexer: &mut Lexer<'_>,
    path: &str,
    slot: &mut Option<NonCanonical>,
    depth: usize,
) -> Result<Node, ParseProblem> {
    let mut items = Vec::new();
    loop {
        let lexed = lexer.next().map_err(ParseProblem::Invalid)?;
        if items.is_empty() && lexed.tok == Tok::EndArray {
            note_token(&lexed, path, slot);
            break;
        }
        let item_path = format!("{path}[{}]", items.len());
        if !lexed.tok.starts_value() {
            return Err(invalid(lexed.start, "expected a value"));
        }
        items.push(parse_inner(lexer, lexed, &item_path, slot, depth + 1)?);
        let sep = lexer.next().map_err(ParseProblem::Invalid)?;
        note_token(&sep, path, slot);
        match sep.tok {
            Tok::Comma => {}
            Tok::EndArray => break,
            _ => return Err(invalid(sep.start, "expected `,` or `]`")),
        }
    }
    Ok(Node::Array(items))
}

/// The rest of an object whose `{` has been read, at `depth`: a repeated member is a
/// problem, members out of RFC 8785's order are noted in `slot`.
fn parse_object(
    lexer: &mut Lexer<'_>,
    path: &str,
    slot: &mut Option<NonCanonical>,
    depth: usize,
) -> Result<Node, ParseProblem> {
    let mut members: Vec<(String, Node)> = Vec::new();
    loop {
        let lexed = lexer.next().map_err(ParseProblem::Invalid)?;
        if members.is_empty() && lexed.tok == Tok::EndObject {
            note_token(&lexed, path, slot);
            break;
        }
        let Tok::Str(name) = &lexed.tok else {
            return Err(invalid(lexed.start, "expected a member name"));
        };
        let name = name.clone();
        let at = member_path(path, &name);
        if members.iter().any(|(k, _)| *k == name) {
            return Err(ParseProblem::Repeated {
                path: at,
                name,
                offset: lexed.start,
            });
        }
        note_token(&lexed, &at, slot);
        if let Some((previous, _)) = members.last() {
            note_member_order(previous, &name, &at, lexed.start, slot);
        }
        expect(lexer, &Tok::Colon, "`:`", &at, slot)?;
        let value = lexer.next().map_err(ParseProblem::Invalid)?;
        if !value.tok.starts_value() {
            return Err(invalid(value.start, "expected a value"));
        }
        let node = parse_inner(lexer, value, &at, slot, depth + 1)?;
        members.push((name, node));
        let sep = lexer.next().map_err(ParseProblem::Invalid)?;
        note_token(&sep, path, slot);
        match sep.tok {
            Tok::Comma => {}
            Tok::EndObject => break,
            _ => return Err(invalid(sep.start, "expected `,` or `}`")),
        }
    }
    Ok(Node::Object(members))
}

/// Parses one complete canonical value held in memory (the oracle's pieces).
pub fn parse_bytes(bytes: &[u8]) -> Option<Node> {
    let mut source = bytes;
    let mut lexer = Lexer::new(&mut source, 0);
    let first = lexer.next().ok()?;
    let parsed = parse_value(&mut lexer, first, "$").ok()?;
    (lexer.next().ok()?.tok == Tok::Eof).then_some(parsed.node)
}

/// Skips one value whose first token is `first`, without building it.
pub fn skip_value(lexer: &mut Lexer<'_>, first: &Lexed) -> Result<(), LexError> {
    let mut depth = 0usize;
    let mut tok = first.tok.clone();
    loop {
        match tok {
            Tok::BeginArray | Tok::BeginObject => depth += 1,
            Tok::EndArray | Tok::EndObject => depth = depth.saturating_sub(1),
            Tok::Eof => {
                return Err(LexError {
                    offset: lexer.offset,
                    reason: "the input ends inside a value".to_owned(),
                })
            }
            _ => {}
        }
        if depth == 0 {
            return Ok(());
        }
        tok = lexer.next()?.tok;
    }
}

/// The message for bytes that parse but are not the canonical form: the receipt's walk
/// and an element's explanation both report it, so it lives beside [`NonCanonical`].
pub(crate) fn non_canonical(path: &str, offset: u64, what: &str) -> String {
    format!(
        "{path}: non-canonical bytes at byte offset {offset}: {what}; verify compares bytes, \
         and replay --format json writes the canonical form (RFC 8785)"
    )
}
