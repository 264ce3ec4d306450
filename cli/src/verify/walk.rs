//! The explanation of a first difference: the receipt and the recomputation read side
//! by side, token by token, from the last point where their bytes agreed. Structure
//! (the receipt's members, a run's members, the arrays) is compared token by token;
//! each element (a log entry, a decision, a metrics object) is read whole into a tree
//! and explained by [`super::element`]. The first problem in the receipt's byte order is
//! reported. Nothing but the open containers and one element is held.

use super::element::{self, ElementKind, Later};
use super::json::{
    member_path, non_canonical, parse_value, quote_str, skip_value, LexError, Lexed, Lexer,
    ParseProblem, Tok,
};

/// What a container is in the receipt's schema (SPEC.md §6).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Root,
    Runs,
    Run(usize),
    Elements(usize, ElementKind),
    Other,
}

#[derive(Clone, PartialEq, Eq, Debug)]
enum Step {
    /// After `[` or `{`.
    Open,
    /// After a member name: a `:` is next.
    Colon(String),
    /// After `:`: the member's value is next.
    Value(String),
    /// After a value: `,` or the end is next.
    After,
    /// After `,`: an item or a member name is next.
    Next,
}

struct Frame {
    path: String,
    array: bool,
    kind: Kind,
    len: usize,
    seen: Vec<String>,
    step: Step,
}

const ROOT_MEMBERS: [&str; 4] = ["format", "receipt_digest", "runs", "trace_digest"];
const RUN_MEMBERS: [&str; 5] = [
    "cache_log",
    "decisions",
    "metrics",
    "observation_log",
    "policy",
];

/// The policy of run `r` (SPEC.md §6 fixes the runs' order).
pub fn policy_of_run(r: usize) -> &'static str {
    [
        "round_robin",
        "least_load",
        "longest_prefix",
        "cache_plus_load",
        "dynamo_default",
    ]
    .get(r)
    .copied()
    .unwrap_or("?")
}

/// Where the side-by-side reading starts: just after the element at `last_element`
/// (or at the receipt's start), so the open containers follow from that path.
pub struct Start<'a> {
    pub last_element: Option<&'a str>,
    /// The bytes of the decision before, in the same run, for round robin's cursor.
    pub previous_decision: Option<&'a [u8]>,
}

/// `runs[r].NAME[i]` or `runs[r].metrics` split into its parts.
fn element_parts(path: &str) -> Option<(usize, String, Option<usize>)> {
    let rest = path.strip_prefix("runs[")?;
    let (r, rest) = rest.split_once("].")?;
    let r = r.parse().ok()?;
    match rest.split_once('[') {
        Some((name, i)) => Some((r, name.to_owned(), Some(i.strip_suffix(']')?.parse().ok()?))),
        None => Some((r, rest.to_owned(), None)),
    }
}

fn frames_after(last_element: Option<&str>) -> Option<Vec<Frame>> {
    let Some(path) = last_element else {
        return Some(Vec::new());
    };
    let (r, name, index) = element_parts(path)?;
    let frame = |path: String, array, kind, len, seen: Vec<String>, step| Frame {
        path,
        array,
        kind,
        len,
        seen,
        step,
    };
    let root_seen = ["format", "receipt_digest", "runs"]
        .map(str::to_owned)
        .to_vec();
    let run_seen = RUN_MEMBERS
        .iter()
        .filter(|m| **m <= name.as_str())
        .map(|m| (*m).to_owned())
        .collect();
    let run_step = match index {
        Some(_) => Step::Value(name.clone()),
        None => Step::After,
    };
    let mut frames = vec![
        frame(
            "$".into(),
            false,
            Kind::Root,
            3,
            root_seen,
            Step::Value("runs".into()),
        ),
        frame("runs".into(), true, Kind::Runs, r, Vec::new(), Step::Open),
        frame(
            format!("runs[{r}]"),
            false,
            Kind::Run(r),
            0,
            run_seen,
            run_step,
        ),
    ];
    if let Some(i) = index {
        let kind = ElementKind::of_member(&name)?;
        frames.push(frame(
            format!("runs[{r}].{name}"),
            true,
            Kind::Elements(r, kind),
            i + 1,
            Vec::new(),
            Step::After,
        ));
    }
    Some(frames)
}

/// Whether `problem` says the receipt is not JSON (or empty) where it was read.
pub(crate) fn is_not_json(problem: &str) -> bool {
    problem.starts_with("the receipt is not JSON") || problem == "the receipt is empty"
}

fn invalid(path: &str, e: &LexError) -> String {
    if e.offset == 0 && e.reason == "the input ends inside the receipt" {
        return "the receipt is empty".to_owned();
    }
    format!(
        "the receipt is not JSON at byte offset {} ({path}): {}",
        e.offset, e.reason
    )
}

fn type_name(tok: &Tok) -> &'static str {
    match tok {
        Tok::BeginArray => "an array",
        Tok::BeginObject => "an object",
        Tok::Str(_) => "a string",
        Tok::Num(_) => "a non-negative integer",
        Tok::True | Tok::False => "true or false",
        _ => "null",
    }
}

fn same_type(a: &Tok, b: &Tok) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
        || matches!((a, b), (Tok::True | Tok::False, Tok::True | Tok::False))
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// The two readers and what has been read.
pub struct Walk<'r, 'e> {
    receipt: Lexer<'r>,
    expected: Lexer<'e>,
    frames: Vec<Frame>,
    root_done: bool,
    previous_decision: Option<Vec<u8>>,
}

type Verdict = Option<String>;

impl<'r, 'e> Walk<'r, 'e> {
    pub fn new(receipt: Lexer<'r>, expected: Lexer<'e>, start: &Start<'_>) -> Option<Self> {
        let frames = frames_after(start.last_element)?;
        Some(Walk {
            receipt,
            expected,
            root_done: start.last_element.is_some(),
            frames,
            previous_decision: start.previous_decision.map(<[u8]>::to_vec),
        })
    }

    /// The path of the container being read (or `$`).
    fn here(&self) -> String {
        self.frames
            .last()
            .map_or("$".to_owned(), |f| f.path.clone())
    }

    fn expected_next(&mut self) -> Result<Lexed, String> {
        self.expected.next().map_err(|e| {
            format!(
                "internal error: the recomputation is not JSON: {}",
                e.reason
            )
        })
    }

    /// Reads until the first problem; `None` when both ended together without one.
    pub fn run(&mut self) -> Verdict {
        loop {
            let here = self.here();
            let g = match self.receipt.peek() {
                Ok(g) => g.clone(),
                Err(e) => return Some(invalid(&here, &e)),
            };
            if self.frames.is_empty() && self.root_done {
                return None;
            }
            let e = match self.expected.peek() {
                Ok(e) => e.clone(),
                Err(e) => return Some(format!("internal error: {}", e.reason)),
            };
            if let Some(at) = g.space_at {
                return Some(non_canonical(
                    &here,
                    at,
                    "whitespace, which RFC 8785 never writes",
                ));
            }
            if g.tok == Tok::Eof {
                return Some(invalid(
                    &here,
                    &LexError {
                        offset: g.start,
                        reason: "the input ends inside the receipt".to_owned(),
                    },
                ));
            }
            let verdict = match self.position() {
                Position::Value(path) => self.value(&path, &g, &e),
                Position::Name => self.name(&g, &e),
                Position::Colon => self.colon(&g),
                Position::After => self.after(&g, &e),
            };
            if verdict.is_some() {
                return verdict;
            }
        }
    }

    fn position(&self) -> Position {
        let Some(top) = self.frames.last() else {
            return Position::Value("$".to_owned());
        };
        match (&top.step, top.array) {
            (Step::Open | Step::Next, true) => {
                Position::Value(format!("{}[{}]", top.path, top.len))
            }
            (Step::Open | Step::Next, false) => Position::Name,
            (Step::Colon(_), _) => Position::Colon,
            (Step::Value(name), _) => Position::Value(member_path(&top.path, name)),
            (Step::After, _) => Position::After,
        }
    }

    /// The element kind at the value position, if it is one.
    fn element_here(&self) -> Option<(usize, ElementKind)> {
        let top = self.frames.last()?;
        match (&top.kind, &top.step) {
            (Kind::Elements(r, kind), _) => Some((*r, *kind)),
            (Kind::Run(r), Step::Value(name)) if name == "metrics" => {
                Some((*r, ElementKind::Metrics))
            }
            _ => None,
        }
    }

    fn value_done(&mut self) {
        if let Some(top) = self.frames.last_mut() {
            top.step = Step::After;
            if top.array {
                top.len += 1;
            }
        } else {
            self.root_done = true;
        }
    }

    fn child_kind(&self) -> Kind {
        match self.frames.last() {
            None => Kind::Root,
            Some(top) => match (&top.kind, &top.step) {
                (Kind::Root, Step::Value(n)) if n == "runs" => Kind::Runs,
                (Kind::Runs, _) => Kind::Run(top.len),
                (Kind::Run(r), Step::Value(n)) => {
                    ElementKind::of_member(n).map_or(Kind::Other, |k| Kind::Elements(*r, k))
                }
                _ => Kind::Other,
            },
        }
    }

    fn value(&mut self, path: &str, g: &Lexed, e: &Lexed) -> Verdict {
        let open_array = self
            .frames
            .last()
            .is_some_and(|f| f.array && f.step == Step::Open);
        if open_array && g.tok == Tok::EndArray && e.tok != Tok::EndArray {
            return Some(self.missing_item(path));
        }
        if open_array && e.tok == Tok::EndArray {
            if g.tok != Tok::EndArray {
                return Some(format!(
                    "{path}: the recomputation has no such item (it has 0)"
                ));
            }
            self.receipt.next().ok()?;
            self.expected_next().ok()?;
            self.frames.pop();
            self.value_done();
            return None;
        }
        if !g.tok.starts_value() {
            return Some(invalid(
                path,
                &LexError {
                    offset: g.start,
                    reason: "expected a value".to_owned(),
                },
            ));
        }
        if let Some((run, kind)) = self.element_here() {
            return self.element(path, run, kind);
        }
        if let Some(why) = g.non_canonical {
            return Some(non_canonical(path, g.start, why));
        }
        if !same_type(&g.tok, &e.tok) {
            return Some(self.type_error(path, type_name(&e.tok)));
        }
        let g = self.receipt.next().ok()?;
        let e = self.expected_next().ok()?;
        match &g.tok {
            Tok::BeginArray | Tok::BeginObject => {
                let kind = self.child_kind();
                self.frames.push(Frame {
                    path: path.to_owned(),
                    array: g.tok == Tok::BeginArray,
                    kind,
                    len: 0,
                    seen: Vec::new(),
                    step: Step::Open,
                });
                None
            }
            _ if g.tok == e.tok => {
                self.value_done();
                None
            }
            Tok::Str(text) if path == "receipt_digest" && is_digest(text) => {
                self.value_done();
                None
            }
            _ => Some(scalar_difference(path, &g.tok, &e.tok)),
        }
    }

    fn type_error(&mut self, path: &str, what: &str) -> String {
        let first = match self.receipt.next() {
            Ok(first) => first,
            Err(e) => return invalid(path, &e),
        };
        match parse_value(&mut self.receipt, first, path) {
            Ok(parsed) => format!("{path}: expected {what}, found {}", parsed.node.quoted()),
            Err(ParseProblem::Invalid(e)) => invalid(path, &e),
            Err(ParseProblem::Repeated { path, name, offset }) => repeated(&path, &name, offset),
        }
    }

    fn element(&mut self, path: &str, run: usize, kind: ElementKind) -> Verdict {
        let first = self.receipt.next().ok()?;
        let receipt = parse_value(&mut self.receipt, first, path);
        let e_first = self.expected_next().ok()?;
        let expected = match parse_value(&mut self.expected, e_first, path) {
            Ok(parsed) => parsed.node,
            Err(_) => {
                return Some(format!(
                    "{path}: internal error: the recomputation is not JSON"
                ))
            }
        };
        let receipt = match receipt {
            Ok(parsed) => parsed,
            Err(ParseProblem::Invalid(e)) => return Some(invalid(path, &e)),
            Err(ParseProblem::Repeated { path, name, offset }) => {
                return Some(repeated(&path, &name, offset))
            }
        };
        let previous = self.previous_decision.take();
        let mut later = LaterDecisions {
            expected: &mut self.expected,
        };
        let verdict = element::explain(
            &element::Element {
                path,
                kind,
                policy: policy_of_run(run),
                receipt: &receipt,
                expected: &expected,
                previous_decision: previous.as_deref(),
            },
            &mut later,
        );
        if verdict.is_none() {
            if kind == ElementKind::Decision {
                let mut bytes = String::new();
                expected.compact(&mut bytes);
                self.previous_decision = Some(bytes.into_bytes());
            }
            self.value_done();
        }
        verdict
    }

    fn name(&mut self, g: &Lexed, e: &Lexed) -> Verdict {
        let here = self.here();
        match (&e.tok, &g.tok) {
            (Tok::Str(x), Tok::Str(y)) if x == y => {
                if let Some(why) = g.non_canonical {
                    return Some(non_canonical(&member_path(&here, y), g.start, why));
                }
                let name = y.clone();
                self.receipt.next().ok()?;
                self.expected_next().ok()?;
                let top = self.frames.last_mut()?;
                top.seen.push(name.clone());
                top.step = Step::Colon(name);
                None
            }
            (Tok::Str(x), Tok::Str(_)) => Some(self.unexpected_name(Some(x.clone()))),
            (Tok::EndObject, Tok::EndObject) => {
                self.receipt.next().ok()?;
                self.expected_next().ok()?;
                self.frames.pop();
                self.value_done();
                None
            }
            (Tok::Str(x), Tok::EndObject) => Some(missing_member(&here, x)),
            (Tok::EndObject, Tok::Str(_)) => Some(self.unexpected_name(None)),
            _ => Some(invalid(
                &here,
                &LexError {
                    offset: g.start,
                    reason: "expected a member name".to_owned(),
                },
            )),
        }
    }

    fn colon(&mut self, g: &Lexed) -> Verdict {
        let here = self.here();
        if g.tok != Tok::Colon {
            return Some(invalid(
                &here,
                &LexError {
                    offset: g.start,
                    reason: "expected `:`".to_owned(),
                },
            ));
        }
        self.receipt.next().ok()?;
        self.expected_next().ok()?;
        let top = self.frames.last_mut()?;
        if let Step::Colon(name) = &top.step {
            top.step = Step::Value(name.clone());
        }
        None
    }

    fn after(&mut self, g: &Lexed, e: &Lexed) -> Verdict {
        let top = self.frames.last()?;
        let (array, path, len) = (top.array, top.path.clone(), top.len);
        let end = if array { Tok::EndArray } else { Tok::EndObject };
        match (&e.tok, &g.tok) {
            (a, b) if a == b && (*a == Tok::Comma || *a == end) => {
                self.receipt.next().ok()?;
                self.expected_next().ok()?;
                if *a == Tok::Comma {
                    self.frames.last_mut()?.step = Step::Next;
                } else {
                    self.frames.pop();
                    self.value_done();
                }
                None
            }
            (Tok::Comma, b) if *b == end => {
                self.expected_next().ok()?;
                if array {
                    Some(self.missing_item(&format!("{path}[{len}]")))
                } else {
                    match self.expected.peek() {
                        Ok(Lexed {
                            tok: Tok::Str(x), ..
                        }) => Some(missing_member(&path, &x.clone())),
                        _ => Some(format!("{path}: a member is missing")),
                    }
                }
            }
            (a, Tok::Comma) if *a == end => {
                self.receipt.next().ok()?;
                if array {
                    Some(format!(
                        "{path}[{len}]: the recomputation has no such item (it has {len})"
                    ))
                } else {
                    self.frames.last_mut()?.step = Step::Next;
                    Some(self.unexpected_name(None))
                }
            }
            _ => Some(invalid(
                &path,
                &LexError {
                    offset: g.start,
                    reason: format!("expected `,` or `{}`", if array { ']' } else { '}' }),
                },
            )),
        }
    }

    /// The recomputation has an item at `path` where the receipt's array ended.
    fn missing_item(&mut self, path: &str) -> String {
        let what = match self.expected_next() {
            Ok(first) => match parse_value(&mut self.expected, first, path) {
                Ok(parsed) => describe(&parsed.node),
                Err(_) => String::new(),
            },
            Err(_) => String::new(),
        };
        format!("{path}: missing: the receipt's array ends here, but the recomputation has {what}")
    }

    /// A member name other than the one the recomputation has next (`expected`, or the
    /// object's end): repeated, unknown, or out of order. The rest of the object is read
    /// (values skipped) to tell a repeat, which is what matters most, from a reorder.
    fn unexpected_name(&mut self, expected: Option<String>) -> String {
        let top = self.frames.last().expect("inside an object");
        let (path, kind) = (top.path.clone(), top.kind);
        let mut seen = top.seen.clone();
        let Ok(first) = self.receipt.next() else {
            return format!("{path}: unexpected member");
        };
        let Tok::Str(name) = first.tok.clone() else {
            return invalid(
                &path,
                &LexError {
                    offset: first.start,
                    reason: "expected a member name".to_owned(),
                },
            );
        };
        let at = member_path(&path, &name);
        if seen.contains(&name) {
            return repeated(&at, &name, first.start);
        }
        let listed: &[&str] = match kind {
            Kind::Root => &ROOT_MEMBERS,
            Kind::Run(_) => &RUN_MEMBERS,
            _ => &[],
        };
        if !listed.contains(&name.as_str()) {
            return format!("{at}: unknown member {}", quote_str(&name));
        }
        seen.push(name.clone());
        let out_of_order = || match &expected {
            Some(x) => non_canonical(
                &at,
                first.start,
                &format!(
                    "member {} where {} belongs, but RFC 8785 sorts members by name",
                    quote_str(&name),
                    quote_str(x)
                ),
            ),
            None => format!("{at}: unexpected member"),
        };
        match self.scan_object(&path, &mut seen) {
            Ok(Some(repeat)) => repeat,
            Ok(None) => match &expected {
                Some(x) if !seen.contains(x) => missing_member(&path, x),
                _ => out_of_order(),
            },
            Err(_) => out_of_order(),
        }
    }

    /// Reads the rest of an object after a member name, collecting names; a repeated
    /// one is returned as the problem.
    fn scan_object(
        &mut self,
        path: &str,
        seen: &mut Vec<String>,
    ) -> Result<Option<String>, LexError> {
        loop {
            if self.receipt.next()?.tok != Tok::Colon {
                return Err(LexError {
                    offset: self.receipt.offset,
                    reason: String::new(),
                });
            }
            let value = self.receipt.next()?;
            skip_value(&mut self.receipt, &value)?;
            match self.receipt.next()?.tok {
                Tok::Comma => {}
                Tok::EndObject => return Ok(None),
                _ => {
                    return Err(LexError {
                        offset: self.receipt.offset,
                        reason: String::new(),
                    })
                }
            }
            let lexed = self.receipt.next()?;
            let Tok::Str(name) = lexed.tok else {
                return Err(LexError {
                    offset: self.receipt.offset,
                    reason: String::new(),
                });
            };
            if seen.contains(&name) {
                return Ok(Some(repeated(
                    &member_path(path, &name),
                    &name,
                    lexed.start,
                )));
            }
            seen.push(name);
        }
    }
}

enum Position {
    Value(String),
    Name,
    Colon,
    After,
}

/// `PATH: repeated member "NAME" (byte offset N)`.
pub(crate) fn repeated(path: &str, name: &str, offset: u64) -> String {
    format!(
        "{path}: repeated member {} (byte offset {offset})",
        quote_str(name)
    )
}

fn missing_member(path: &str, name: &str) -> String {
    format!(
        "{}: missing required member {}",
        member_path(path, name),
        quote_str(name)
    )
}

fn tok_quoted(tok: &Tok) -> String {
    match tok {
        Tok::Str(s) => quote_str(s),
        Tok::Num(n) => super::json::cut(n, 40),
        Tok::True => "true".into(),
        Tok::False => "false".into(),
        Tok::Null => "null".into(),
        _ => "?".into(),
    }
}

fn scalar_difference(path: &str, receipt: &Tok, expected: &Tok) -> String {
    let (r, e) = (tok_quoted(receipt), tok_quoted(expected));
    match path {
        "format" => format!("format is {r}, expected {e}"),
        "trace_digest" => match (receipt, expected) {
            (Tok::Str(r), Tok::Str(e)) => format!(
                "trace_digest is {}, but this trace's digest is {}",
                super::json::quote_digest(r),
                super::json::quote_digest(e)
            ),
            _ => format!("trace_digest is {r}, but this trace's digest is {e}"),
        },
        "receipt_digest" => {
            format!("receipt_digest: expected \"sha256:\" and 64 lowercase hex digits, found {r}")
        }
        _ => format!("{path}: the receipt has {r}, the recomputation has {e}"),
    }
}

/// What an element of the recomputation is, for a message.
fn describe(node: &super::json::Node) -> String {
    let seq = node.get("seq").and_then(|s| s.as_u64());
    match (node.get("request").and_then(|r| r.as_str()), seq) {
        (Some(request), Some(seq)) => format!(
            "a decision for seq {seq} (request {}) here",
            quote_str(request)
        ),
        (None, Some(seq)) => format!("an entry for seq {seq} here"),
        _ if node.get("policy").is_some() => format!(
            "a run here ({})",
            node.get("policy")
                .and_then(|p| p.as_str())
                .map_or("?".to_owned(), quote_str)
        ),
        _ => "an item here".to_owned(),
    }
}

/// The recomputation's later decisions of the same run, for a reorder.
struct LaterDecisions<'l, 'e> {
    expected: &'l mut Lexer<'e>,
}

impl Later for LaterDecisions<'_, '_> {
    fn position_of_seq(&mut self, seq: u64, from: usize) -> Option<usize> {
        let mut index = from;
        loop {
            if self.expected.next().ok()?.tok != Tok::Comma {
                return None;
            }
            index += 1;
            let first = self.expected.next().ok()?;
            let node = parse_value(self.expected, first, "$").ok()?.node;
            if node.get("seq").and_then(|s| s.as_u64()) == Some(seq) {
                return Some(index);
            }
        }
    }
}
