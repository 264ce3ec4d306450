//! Keyed request ids (SPEC.md §6.5): `--id-key FILE` replaces every request id of an
//! export by a digest of it under a key the user holds, so a receipt or CSV can be
//! shared without revealing the ids (which often carry tenant names).
//!
//! Routing never reads an id's text, so the ids are replaced in the trace after its
//! digest is taken and before it is compiled: every writer then exports the keyed id
//! and nothing else changes.

use crate::input::trace::{EventKind, Trace};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How many bytes of the HMAC-SHA-256 are kept: 128 bits keep ten million ids distinct
/// (collision chance below 2^-80) and cannot be inverted without the key.
pub const KEYED_ID_BYTES: usize = 16;

/// `id` under `key`: the first [`KEYED_ID_BYTES`] bytes of HMAC-SHA-256(key, id), as
/// lowercase hex.
pub fn keyed_id(key: &[u8], id: &str) -> String {
    // HMAC accepts a key of any length (RFC 2104 hashes a long one), so this never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    let digest = mac.finalize().into_bytes();
    digest[..KEYED_ID_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Replaces every request id of `trace` by its [`keyed_id`]. Take the trace digest
/// first: it names the trace as given.
pub fn key_request_ids(trace: &mut Trace, key: &[u8]) {
    for event in &mut trace.events {
        if let EventKind::Request(request) = &mut event.kind {
            request.id = keyed_id(key, &request.id).into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_rfc_4231_test_case_2() {
        // RFC 4231 §4.3: key "Jefe", data "what do ya want for nothing?"; the full
        // HMAC-SHA-256 starts with these 16 bytes.
        assert_eq!(
            keyed_id(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c7"
        );
    }

    #[test]
    fn ids_are_32_hex_digits_and_depend_on_the_key() {
        let a = keyed_id(b"key one", "acme-01");
        assert_eq!(a.len(), 32);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(a, keyed_id(b"key two", "acme-01"));
        assert_ne!(a, keyed_id(b"key one", "acme-02"));
    }
}
