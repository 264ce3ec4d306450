//! TO BE REPLACED by `kvroute_oracle::replay_streaming` when the streaming oracle lands.
//!
//! This shim gives `verify` the oracle's streaming API today: it calls
//! [`kvroute_oracle::replay`], which builds the whole receipt in memory, and cuts those
//! canonical bytes into the pieces the streaming oracle will hand out as it replays.
//! Swapping it out is a change of `use` in `verify/mod.rs` and deleting this file:
//! [`ReceiptPiece`], [`Streamed`] and [`replay_streaming`] have exactly the real API's
//! shape. Until then `verify`'s memory includes the oracle's whole receipt.

use std::ops::ControlFlow;

/// One piece of the oracle's canonical receipt (without its `receipt_digest` member).
pub enum ReceiptPiece<'a> {
    /// Bytes between elements, e.g. `{"format":"kvroute-receipt/1","runs":[{"cache_log":[`, `,`, `],"decisions":[`.
    Structure(&'a [u8]),
    /// One element: a run's cache_log entry, decision, metrics object or observation_log entry;
    /// `path` as SPEC §2.1 writes paths, rooted at the receipt (`runs[2].decisions[17]`, `runs[0].metrics`).
    Element { path: &'a str, bytes: &'a [u8] },
}

/// How a streaming replay ended.
pub enum Streamed {
    /// Every piece was handed out; the digest of their concatenation.
    Complete { receipt_digest: String },
    /// The sink asked to stop.
    Stopped,
}

const FORMAT_MEMBER: &[u8] = br#"{"format":"kvroute-receipt/1","#;
const DIGEST_MEMBER: &[u8] = br#""receipt_digest":""#;

/// Concatenated piece bytes = canonical bytes of the receipt WITHOUT its receipt_digest member.
pub fn replay_streaming(
    trace_json: &[u8],
    sink: &mut dyn FnMut(ReceiptPiece<'_>) -> ControlFlow<()>,
) -> Result<Streamed, Vec<String>> {
    let receipt = kvroute_oracle::replay(trace_json)?;
    let internal = |what: &str| vec![format!("$: internal error: the oracle's receipt {what}")];
    let after_format = FORMAT_MEMBER.len();
    if !receipt.starts_with(FORMAT_MEMBER) || !receipt[after_format..].starts_with(DIGEST_MEMBER) {
        return Err(internal("does not start with format and receipt_digest"));
    }
    let digest_start = after_format + DIGEST_MEMBER.len();
    let digest_end = receipt[digest_start..]
        .iter()
        .position(|&b| b == b'"')
        .map(|i| digest_start + i)
        .ok_or_else(|| internal("has an unterminated receipt_digest"))?;
    let receipt_digest = String::from_utf8_lossy(&receipt[digest_start..digest_end]).into_owned();
    // `"sha256:…",` is cut out; the first structure piece joins the two sides.
    let rest = &receipt[digest_end + 2..];
    let mut first = FORMAT_MEMBER.to_vec();
    let mut cut = Cutter {
        bytes: rest,
        pos: 0,
        structure_start: 0,
        first: Some(&mut first),
        sink,
    };
    match cut.runs() {
        Some(ControlFlow::Continue(())) => Ok(Streamed::Complete { receipt_digest }),
        Some(ControlFlow::Break(())) => Ok(Streamed::Stopped),
        None => Err(internal("is not in the expected shape")),
    }
}

/// Walks canonical receipt bytes (after the digest member) and hands out the pieces.
struct Cutter<'b, 's> {
    bytes: &'b [u8],
    pos: usize,
    structure_start: usize,
    /// The receipt's opening bytes, to prepend to the first structure piece.
    first: Option<&'s mut Vec<u8>>,
    sink: &'s mut dyn FnMut(ReceiptPiece<'_>) -> ControlFlow<()>,
}

impl Cutter<'_, '_> {
    fn at(&self, b: u8) -> bool {
        self.bytes.get(self.pos) == Some(&b)
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        self.at(b).then(|| self.pos += 1)
    }

    /// The end of the string starting at `pos` (past its closing quote).
    fn string_end(&self, mut i: usize) -> Option<usize> {
        i += 1;
        loop {
            match self.bytes.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    }

    /// The end of the value starting at `pos`.
    fn value_end(&self) -> Option<usize> {
        let mut depth = 0usize;
        let mut i = self.pos;
        loop {
            match self.bytes.get(i)? {
                b'"' => i = self.string_end(i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    i += 1;
                }
                _ => i += 1,
            }
            if depth == 0 {
                return Some(i);
            }
        }
    }

    fn element(&mut self, path: &str) -> Option<ControlFlow<()>> {
        let end = self.value_end()?;
        let structure = &self.bytes[self.structure_start..self.pos];
        let flow = match self.first.take() {
            Some(first) => {
                first.extend_from_slice(structure);
                (self.sink)(ReceiptPiece::Structure(first))
            }
            None => (self.sink)(ReceiptPiece::Structure(structure)),
        };
        if flow.is_break() {
            return Some(flow);
        }
        let bytes = &self.bytes[self.pos..end];
        self.pos = end;
        self.structure_start = end;
        Some((self.sink)(ReceiptPiece::Element { path, bytes }))
    }

    fn runs(&mut self) -> Option<ControlFlow<()>> {
        let runs_member = br#""runs":["#;
        if !self.bytes.starts_with(runs_member) {
            return None;
        }
        self.pos = runs_member.len();
        let mut run = 0usize;
        while !self.at(b']') {
            if self.run(run)?.is_break() {
                return Some(ControlFlow::Break(()));
            }
            run += 1;
            if !self.at(b']') {
                self.eat(b',')?;
            }
        }
        let structure = &self.bytes[self.structure_start..];
        Some(match self.first.take() {
            Some(first) => {
                first.extend_from_slice(structure);
                (self.sink)(ReceiptPiece::Structure(first))
            }
            None => (self.sink)(ReceiptPiece::Structure(structure)),
        })
    }

    fn run(&mut self, run: usize) -> Option<ControlFlow<()>> {
        self.eat(b'{')?;
        loop {
            let name_end = self.string_end(self.pos)?;
            let name = std::str::from_utf8(&self.bytes[self.pos + 1..name_end - 1]).ok()?;
            let name = name.to_owned();
            self.pos = name_end;
            self.eat(b':')?;
            match name.as_str() {
                "cache_log" | "decisions" | "observation_log" => {
                    self.eat(b'[')?;
                    let mut i = 0usize;
                    while !self.at(b']') {
                        if self
                            .element(&format!("runs[{run}].{name}[{i}]"))?
                            .is_break()
                        {
                            return Some(ControlFlow::Break(()));
                        }
                        i += 1;
                        if !self.at(b']') {
                            self.eat(b',')?;
                        }
                    }
                    self.pos += 1;
                }
                "metrics" => {
                    if self.element(&format!("runs[{run}].metrics"))?.is_break() {
                        return Some(ControlFlow::Break(()));
                    }
                }
                _ => self.pos = self.value_end()?,
            }
            if self.eat(b'}').is_some() {
                return Some(ControlFlow::Continue(()));
            }
            self.eat(b',')?;
        }
    }
}
