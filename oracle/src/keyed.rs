//! Keyed request ids (SPEC §6.5): the first 16 bytes of HMAC-SHA-256 (RFC 2104) of the
//! id's UTF-8 bytes under the key file's bytes, as 32 lowercase hex digits.
//!
//! HMAC is written out here from RFC 2104 §2 over the sha2 crate's SHA-256, so that the
//! oracle shares no keyed-id code with core: `H((K' xor opad) || H((K' xor ipad) || m))`
//! with the block size B = 64 bytes of SHA-256, `K'` the key zero-padded to 64 bytes
//! (a key longer than 64 bytes is first replaced by its SHA-256), `ipad` = 64 × 0x36 and
//! `opad` = 64 × 0x5c.

use sha2::{Digest, Sha256};

/// SHA-256's block size in bytes (RFC 2104's `B`).
const BLOCK: usize = 64;

/// HMAC-SHA-256(key, message), all 32 bytes.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut padded = [0u8; BLOCK];
    if key.len() > BLOCK {
        let hashed = Sha256::digest(key);
        padded[..hashed.len()].copy_from_slice(&hashed);
    } else {
        padded[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(padded.map(|b| b ^ 0x36));
    inner.update(message);
    let inner_hash = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(padded.map(|b| b ^ 0x5c));
    outer.update(inner_hash);
    outer.finalize().into()
}

/// The keyed form of a request id (SPEC §6.5): 32 lowercase hex digits.
pub fn keyed_id(key: &[u8], id: &str) -> String {
    hmac_sha256(key, id.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
