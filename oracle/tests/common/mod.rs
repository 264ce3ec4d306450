//! Helpers shared by the oracle's test files (each file under `tests/` is its own
//! crate, so they include this module with `mod common;`).

/// `"sha256:" + lowercase hex(SHA-256(bytes))`, the digest form of SPEC §6.1, computed
/// with the sha2 crate rather than the oracle's own code.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
