//! RFC 8785 (JSON Canonicalization Scheme), the canonical bytes of SPEC §6.1: a small
//! JSON tree ([`Json`]) and the one writer that turns it into bytes. Object members are
//! written in the order of their names' UTF-16 code units (RFC 8785 §3.2.3), strings
//! with the escapes of RFC 8785 §3.2.2.2 (`\"`, `\\`, `\b \f \n \r \t`, every other
//! character below U+0020 as lowercase `\u00xx`, everything else as itself), integers
//! in plain decimal (every number the oracle writes is an integer of at most 2^53 - 1,
//! which ECMAScript prints as its decimal digits), no whitespace anywhere.
//!
//! The receipt's elements, the metrics, the canonical trace and the simulate document
//! are all built as such trees and written here; nothing writes JSON by hand.

use sha2::{Digest, Sha256};

/// One JSON value to be written canonically. Member names and strings borrow.
#[derive(Debug, Clone)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Int(u64),
    Str(&'a str),
    Array(Vec<Json<'a>>),
    /// Members in any order; the writer sorts them. Names must be distinct.
    Object(Vec<(&'a str, Json<'a>)>),
    /// A value already written by [`write`], copied as it is: for arrays sorted by
    /// their items' canonical bytes (SPEC §6.1), whose items are written first.
    Written(Vec<u8>),
}

impl<'a> Json<'a> {
    /// A string, or `null` for `None`.
    pub fn opt_str(text: Option<&'a str>) -> Json<'a> {
        text.map_or(Json::Null, Json::Str)
    }

    /// An integer, or `null` for `None`.
    pub fn opt_int(value: Option<u64>) -> Json<'a> {
        value.map_or(Json::Null, Json::Int)
    }

    /// An array of `items` in the byte order of their canonical bytes.
    pub fn sorted_by_bytes(items: Vec<Json<'a>>) -> Json<'a> {
        let mut written: Vec<Vec<u8>> = items.iter().map(to_bytes).collect();
        written.sort();
        Json::Array(written.into_iter().map(Json::Written).collect())
    }

    /// An array of strings in byte order.
    pub fn sorted_strs(items: &'a [String]) -> Json<'a> {
        let mut items: Vec<&str> = items.iter().map(String::as_str).collect();
        items.sort();
        Json::Array(items.into_iter().map(Json::Str).collect())
    }
}

/// Writes `value` canonically at the end of `out`.
pub fn write(value: &Json, out: &mut Vec<u8>) {
    match value {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(true) => out.extend_from_slice(b"true"),
        Json::Bool(false) => out.extend_from_slice(b"false"),
        Json::Int(n) => write_integer(*n, out),
        Json::Str(text) => write_string(text, out),
        Json::Written(bytes) => out.extend_from_slice(bytes),
        Json::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Json::Object(members) => {
            // For ASCII names UTF-16 order is byte order (each byte one code unit).
            let ascii = members.iter().all(|(name, _)| name.is_ascii());
            let before = |a: &str, b: &str| {
                if ascii {
                    a < b
                } else {
                    a.encode_utf16().lt(b.encode_utf16())
                }
            };
            // Names are distinct, so there is one sorted order: members built in it are
            // written as they are, which is what sorting them would give.
            if members.windows(2).all(|pair| before(pair[0].0, pair[1].0)) {
                write_members(members.iter(), out);
            } else {
                let mut order: Vec<&(&str, Json)> = members.iter().collect();
                if ascii {
                    order.sort_by(|a, b| a.0.cmp(b.0));
                } else {
                    order.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                }
                write_members(order.into_iter(), out);
            }
        }
    }
}

/// `{`, the members in the order given, `}`.
fn write_members<'m, 'a: 'm>(
    members: impl Iterator<Item = &'m (&'a str, Json<'a>)>,
    out: &mut Vec<u8>,
) {
    out.push(b'{');
    for (i, (name, item)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(name, out);
        out.push(b':');
        write(item, out);
    }
    out.push(b'}');
}

/// The canonical bytes of `value`.
pub fn to_bytes(value: &Json) -> Vec<u8> {
    let mut out = Vec::new();
    write(value, &mut out);
    out
}

/// An integer in plain decimal, the digits built right to left in a small buffer.
fn write_integer(mut n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// A JSON string as RFC 8785 §3.2.2.2 writes it. The runs between characters that
/// need an escape are copied whole: most strings (ids, names) have none at all.
pub fn write_string(text: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let needs_escape = |byte: &u8| *byte < 0x20 || *byte == b'"' || *byte == b'\\';
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut rest = bytes;
    while let Some(at) = rest.iter().position(needs_escape) {
        out.extend_from_slice(&rest[..at]);
        let byte = rest[at];
        rest = &rest[at + 1..];
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(byte >> 4)]);
                out.push(HEX[usize::from(byte & 0xf)]);
                continue;
            }
        };
        out.extend_from_slice(escape);
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

/// `"sha256:" + lowercase hex(SHA-256(bytes))` (SPEC §6.1).
pub fn digest(bytes: &[u8]) -> String {
    hex_digest(Sha256::digest(bytes).as_slice())
}

/// `"sha256:"` and the lowercase hex of a finished SHA-256.
pub fn hex_digest(hash: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(7 + 2 * hash.len());
    text.push_str("sha256:");
    for byte in hash {
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests {
    //! The writer's own rules, on the examples of RFC 8785; no receipt member name
    //! leaves ASCII, so the UTF-16 ordering is checked here rather than through a receipt.
    use super::{to_bytes, Json};

    #[test]
    fn members_sort_by_utf16_code_units_as_rfc_8785_section_3_2_3_shows() {
        // RFC 8785 §3.2.3's sorting example: its names, given in another order.
        let names = [
            "\u{20ac}",
            "\r",
            "\u{fb33}",
            "1",
            "\u{1F600}",
            "\u{80}",
            "\u{f6}",
        ];
        let tree = Json::Object(names.iter().map(|n| (*n, Json::Null)).collect());
        let expected = "{\"\\r\":null,\"1\":null,\"\u{80}\":null,\"\u{f6}\":null,\
                        \"\u{20ac}\":null,\"\u{1F600}\":null,\"\u{fb33}\":null}";
        assert_eq!(String::from_utf8(to_bytes(&tree)).unwrap(), expected);
        let ascii = Json::Object(vec![
            ("b", Json::Int(2)),
            ("a", Json::Int(1)),
            ("B", Json::Null),
        ]);
        assert_eq!(to_bytes(&ascii), b"{\"B\":null,\"a\":1,\"b\":2}");
    }

    #[test]
    fn strings_escape_as_rfc_8785_section_3_2_2_2_says() {
        let text = "\u{0}\u{8}\t\n\u{b}\u{c}\r\u{1f}\"\\/\u{7f}\u{2028}\u{1F600}";
        let expected = "\"\\u0000\\b\\t\\n\\u000b\\f\\r\\u001f\\\"\\\\/\u{7f}\u{2028}\u{1F600}\"";
        assert_eq!(
            String::from_utf8(to_bytes(&Json::Str(text))).unwrap(),
            expected
        );
        assert_eq!(
            to_bytes(&Json::Int(9_007_199_254_740_991)),
            b"9007199254740991"
        );
    }
}
