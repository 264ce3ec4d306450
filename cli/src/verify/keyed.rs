//! Keyed request ids for `verify --id-key` (SPEC.md §6.5), computed here from the RFCs
//! rather than borrowed from core: each recomputed decision's `request` becomes the
//! first 16 bytes of HMAC-SHA-256 (key = the key file's bytes, message = the id's UTF-8)
//! as 32 lowercase hex digits, and the decision is canonicalised again. The receipt
//! digest is then the SHA-256 of the keyed pieces.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The keyed form of a request id.
pub fn keyed_id(key: &[u8], id: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(id.as_bytes());
    let tag = mac.finalize().into_bytes();
    tag[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A canonical decision with its `request` keyed; the bytes unchanged if they are not
/// a decision (they always are: they come from the oracle).
pub fn key_decision(bytes: &[u8], key: &[u8]) -> Vec<u8> {
    let Ok(mut decision) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return bytes.to_vec();
    };
    let Some(id) = decision.get("request").and_then(|r| r.as_str()) else {
        return bytes.to_vec();
    };
    decision["request"] = serde_json::Value::String(keyed_id(key, id));
    serde_json_canonicalizer::to_vec(&decision).unwrap_or_else(|_| bytes.to_vec())
}

/// SHA-256 over pieces, as `sha256:<hex>`.
pub struct Hasher(Sha256);

impl Hasher {
    pub fn new() -> Hasher {
        Hasher(Sha256::new())
    }
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    pub fn tag(self) -> String {
        let digest = self.0.finalize();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    }
}
