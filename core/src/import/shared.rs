//! What every input format agrees on, in one place: the fleet an import creates when
//! its input says nothing about the workers' speed, the longest JSON Lines line read,
//! the reason a line that opens with a byte order mark is refused, and how a block is
//! keyed by what it holds and the key of the block before it. A format that
//! needs one of these takes it from here rather than from another format's file, so no
//! format depends on another.

use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Prefill tokens per tick (1 tick = 1 ms) of every imported worker: 16,000 tokens/s,
/// about what one current GPU prefills for a mid-sized model.
pub const DEFAULT_PREFILL_RATE: u64 = 16;

/// Decode tokens per tick of every imported worker: 4,000 tokens/s summed over the
/// requests one GPU decodes as a batch.
pub const DEFAULT_DECODE_RATE: u64 = 4;

/// The longest line of a JSON Lines input of requests (a Mooncake line, a request-log
/// line): SPEC.md §10.2's cap, which holds the longest `scale` prompt's token ids.
pub const REQUEST_LINE_BYTES_MAX: usize = crate::input::json_lines::LINE_BYTES_MAX;

/// Why a line that starts with a byte order mark is refused.
pub const BYTE_ORDER_MARK_REASON: &str =
    "the line starts with a UTF-8 byte order mark (EF BB BF), which JSON text must not carry";

/// The key of a block of `tokens` (token ids, or whatever words stand for them) whose
/// previous block has the key `parent` (empty for the first block of a chain;
/// SPEC.md §13.4, §18): `k` and the first 8 bytes of
/// `SHA-256(parent ‖ 0x00 ‖ each token as 8 bytes big-endian)` in hex.
pub fn chained_key(parent: &str, tokens: &[u64]) -> Arc<str> {
    let mut hasher = Sha256::new();
    hasher.update(parent.as_bytes());
    hasher.update([0u8]);
    for token in tokens {
        hasher.update(token.to_be_bytes());
    }
    let digest = hasher.finalize();
    let mut key = String::with_capacity(17);
    key.push('k');
    for byte in &digest[..8] {
        key.push_str(&format!("{byte:02x}"));
    }
    key.into()
}
