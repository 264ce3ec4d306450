//! The text of JSON values as RFC 8785 writes them — decimal integers, escaped strings,
//! whole microseconds as exact decimal milliseconds — and the `sha256:` digest tag: the
//! leaf every byte writer of `output` builds on.

/// `"sha256:" + lowercase hex` of a finished SHA-256 digest.
pub fn digest_tag(digest: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tag = String::with_capacity(7 + 64);
    tag.push_str("sha256:");
    for &byte in digest {
        tag.push(HEX[(byte >> 4) as usize] as char);
        tag.push(HEX[(byte & 0xf) as usize] as char);
    }
    tag
}

/// Appends `value` in decimal.
pub fn push_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(u64_text(value, &mut [0; 20]));
}

/// `value` in decimal, written into `buffer`.
pub fn u64_text(mut value: u64, buffer: &mut [u8; 20]) -> &[u8] {
    let mut start = buffer.len();
    loop {
        start -= 1;
        buffer[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buffer[start..]
}

/// Appends `text` as a JSON string escaped as RFC 8785 escapes it: `"` and `\`, the
/// short escapes `\b \t \n \f \r`, any other control character as `\u00xx` (lowercase
/// hex), and everything else, non-ASCII included, as its own UTF-8 bytes.
pub fn push_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(byte >> 4) as usize],
                HEX[(byte & 0xf) as usize],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain_from..i]);
        out.extend_from_slice(escape);
        plain_from = i + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// `micros` as milliseconds with the fewest decimals that say it exactly: `12.345`,
/// `12.3`, `12`, `0.001`. The one rule for milliseconds shown or written: the values of
/// `simulate --completions-out` records (SPEC.md §14.4), read back to the same
/// microseconds, and the `--slo` objectives of the join table and the report's
/// Completions panel (§14.3, §14.6). Integer digits only, never a binary float.
pub fn milliseconds_text(micros: u64) -> String {
    let (whole, fraction) = (micros / 1000, micros % 1000);
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:03}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::milliseconds_text;

    #[test]
    fn milliseconds_are_exact_decimals_without_trailing_zeros() {
        for (micros, text) in [
            (0, "0"),
            (1, "0.001"),
            (10, "0.01"),
            (500, "0.5"),
            (12_300, "12.3"),
            (12_345, "12.345"),
            (12_000, "12"),
            (250, "0.25"),
            (300_500, "300.5"),
            (9_007_199_254_740_991, "9007199254740.991"),
        ] {
            assert_eq!(milliseconds_text(micros), text);
        }
    }
}
