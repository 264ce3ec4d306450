//! kvroute's decoder of engine KV event payloads (SPEC.md §13.1) against Dynamo's own,
//! `dynamo_kv_router::zmq_wire::decode_event_batch` (1.6.1, pinned), event by event on
//! every capture fixture of `cli/tests/engine_events/`: the same events in the same
//! order, the same block hashes (signed and unsigned spellings of one block are one
//! value in both), parents, token ids, block sizes, media, adapter names and cache
//! groups, and the same data-parallel rank. Where the two cannot agree by design (an
//! event type Dynamo does not know, which it keeps as `Ignored`), the test says so.

use dynamo_kv_router::zmq_wire::{decode_event_batch, BlockHashValue, RawKvEvent};
use kvroute_core::import::capture_line;
use kvroute_core::import::{decode_batch, BlockHash, EngineEvent};

const FIXTURES: [&str; 5] = [
    "vllm",
    "sglang",
    "kthena-1535",
    "chain-replayed",
    "two-publishers",
];

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../cli/tests/engine_events/{name}.capture.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn ours_hash(hash: &BlockHash) -> Option<u64> {
    match hash {
        BlockHash::Int(v) => Some(*v),
        BlockHash::Bytes(_) => None,
    }
}

fn theirs_hash(hash: &BlockHashValue) -> u64 {
    hash.into_u64()
}

/// One event as both decoders can say it: kind, hashes, parent, tokens, block size,
/// medium, adapter name, group.
#[derive(Debug, PartialEq, Eq)]
enum Common {
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: Vec<u64>,
        block_size: u64,
        medium: Option<String>,
        lora_name: Option<String>,
        group: Option<u64>,
    },
    Removed {
        hashes: Vec<u64>,
        medium: Option<String>,
        group: Option<u64>,
    },
    Cleared,
    /// A type Dynamo does not decode.
    Other,
}

fn ours(event: &EngineEvent) -> Common {
    match event {
        EngineEvent::Stored(s) => Common::Stored {
            hashes: s.block_hashes.iter().filter_map(ours_hash).collect(),
            parent: s.parent_block_hash.as_ref().and_then(ours_hash),
            tokens: s.token_ids.clone(),
            block_size: s.block_size,
            medium: s.medium.clone(),
            lora_name: s.lora_name.clone(),
            group: s.group_idx.and_then(|g| u64::try_from(g).ok()),
        },
        EngineEvent::Removed(r) => Common::Removed {
            hashes: r.block_hashes.iter().filter_map(ours_hash).collect(),
            medium: r.medium.clone(),
            group: r.group_idx.and_then(|g| u64::try_from(g).ok()),
        },
        EngineEvent::Cleared => Common::Cleared,
        EngineEvent::Unknown(_) => Common::Other,
    }
}

fn theirs(event: &RawKvEvent) -> Common {
    match event {
        RawKvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            medium,
            lora_name,
            group_idx,
            ..
        } => Common::Stored {
            hashes: block_hashes.iter().map(theirs_hash).collect(),
            parent: parent_block_hash.as_ref().map(theirs_hash),
            tokens: token_ids.iter().map(|&t| u64::from(t)).collect(),
            block_size: *block_size as u64,
            medium: medium.clone(),
            lora_name: lora_name.clone(),
            group: group_idx.map(u64::from),
        },
        RawKvEvent::BlockRemoved {
            block_hashes,
            medium,
            group_idx,
            ..
        } => Common::Removed {
            hashes: block_hashes.iter().map(theirs_hash).collect(),
            medium: medium.clone(),
            group: group_idx.map(u64::from),
        },
        RawKvEvent::AllBlocksCleared { .. } => Common::Cleared,
        RawKvEvent::Ignored => Common::Other,
    }
}

#[test]
fn kvroute_and_dynamo_decode_every_capture_fixture_alike() {
    let mut compared_events = 0;
    let mut bytes_hash_batches = 0;
    for name in FIXTURES {
        for (index, line) in fixture(name).lines().enumerate() {
            let at = format!("{name}.capture.jsonl:{}", index + 1);
            let message = capture_line(line.as_bytes()).unwrap_or_else(|e| panic!("{at}: {e}"));
            let ours_batch = decode_batch(&message.payload).unwrap_or_else(|e| panic!("{at}: {e}"));
            let theirs_batch = match decode_event_batch(&message.payload) {
                Ok(batch) => batch,
                // The one known difference: Dynamo reads a block hash only as an
                // integer, and kvroute also as bytes (SPEC.md §13.1).
                Err(e) if has_bytes_hash(&ours_batch.events) => {
                    bytes_hash_batches += 1;
                    assert!(e.to_string().contains("BlockHashValue"), "{at}: {e}");
                    continue;
                }
                Err(e) => panic!("{at}: Dynamo cannot decode what kvroute does: {e}"),
            };
            assert_eq!(
                theirs_batch.data_parallel_rank.map_or(0, |r| r as u64),
                ours_batch.rank,
                "{at}: rank"
            );
            let ours_events: Vec<Common> = ours_batch.events.iter().map(ours).collect();
            let theirs_events: Vec<Common> = theirs_batch.events.iter().map(theirs).collect();
            assert_eq!(ours_events, theirs_events, "{at}");
            compared_events += ours_events.len();
        }
    }
    println!("{compared_events} events agree; {bytes_hash_batches} batches with bytes hashes Dynamo does not read");
    // What the five fixtures hold, so that a decoder failing quietly (fewer events
    // compared, more batches set aside) fails here.
    assert_eq!((compared_events, bytes_hash_batches), EXPECTED);
}

/// Events compared, and batches set aside for their bytes hashes, over the fixtures.
const EXPECTED: (usize, usize) = (17, 2);

fn has_bytes_hash(events: &[EngineEvent]) -> bool {
    events.iter().any(|event| match event {
        EngineEvent::Stored(s) => s
            .block_hashes
            .iter()
            .chain(&s.parent_block_hash)
            .any(|h| matches!(h, BlockHash::Bytes(_))),
        EngineEvent::Removed(r) => r
            .block_hashes
            .iter()
            .any(|h| matches!(h, BlockHash::Bytes(_))),
        _ => false,
    })
}
