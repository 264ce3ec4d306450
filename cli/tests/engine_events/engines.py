"""KV event publishers shaped as vLLM and SGLang declare theirs (SPEC.md §13.1).

The structs below are declared field for field as the engines declare them, with the
same msgspec options, so msgspec writes the bytes an engine would:

- `Vllm*`: vLLM 0.26.0, whose batch is positional and whose events are tagged maps
  (the record quoted in volcano-sh/kthena#1535);
- `Sglang*`: SGLang's positional batch and events, with `attn_dp_rank` and `medium`.

- `dynamo_lines`: NVIDIA Dynamo's `RouterEvent` as its router reads them (JSON).

Four uses, all deterministic (fixed times, hashes and tokens):

    python engines.py capture DIR          # every fixture capture, and the requests
    python engines.py publish ENDPOINT N   # bind a PUB socket, publish the vLLM script
    python engines.py replay PUB REPLAY DROP ANSWER TOPIC
                                           # the chain script with a replay socket
    python engines.py two-publishers A B   # two PUB sockets, later times sent first

Pinned: pyzmq 27.2.0, msgspec 0.22.0, and xxhash 3.6.0 for Dynamo's token hash
(cli/tests/engine_events/requirements.txt).
"""

import base64
import json
import os
import sys
import time
from typing import Any, Optional, Union

import msgspec

# --- vLLM 0.26.0 -----------------------------------------------------------------


class VllmEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: Optional[int] = None


class VllmKVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """The base of vLLM's events: tagged maps, the tag member named "type"."""


class BlockStored(VllmKVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    parent_block_hash: Optional[Union[bytes, int]]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]
    lora_name: Optional[str]
    extra_keys: Optional[list[Optional[tuple[Any, ...]]]] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None


class BlockRemoved(VllmKVCacheEvent):
    block_hashes: list[Union[bytes, int]]
    medium: Optional[str]
    group_idx: Optional[int] = None


class AllBlocksCleared(VllmKVCacheEvent):
    pass


class BlockUpdated(VllmKVCacheEvent):
    """No engine's event: stands for a type a later version may add."""

    block_hashes: list[int]


# --- SGLang ------------------------------------------------------------------------


class SglangEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    attn_dp_rank: Optional[int] = None


class SglangKVCacheEvent(
    msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True
):
    """The base of SGLang's events: positional arrays, the tag first."""


class SglangBlockStored(SglangKVCacheEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = None


class SglangBlockRemoved(SglangKVCacheEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: Optional[str] = None


class SglangAllBlocksCleared(SglangKVCacheEvent, tag="AllBlocksCleared"):
    pass


BLOCK = 16
T0 = 1789095808.0  # the kthena record's day, whole seconds so every ms is exact


def tokens(start: int, blocks: int) -> list[int]:
    return list(range(start, start + BLOCK * blocks))


def vllm_stored(hashes, parent, token_ids, medium="GPU"):
    return BlockStored(
        block_hashes=hashes,
        parent_block_hash=parent,
        token_ids=token_ids,
        block_size=BLOCK,
        lora_id=None,
        medium=medium,
        lora_name=None,
        extra_keys=[None] * len(hashes),
        group_idx=0,
        kv_cache_spec_kind="full_attention",
    )


def vllm_script():
    """(seq, batch) in publication order: a chain, a CPU copy, an unknown type, a
    removal, a lost message (seq 3), then a restart."""
    h1, h2, h3 = 15760518052499183552, 101, b"\x01\x02\x03"
    return [
        (0, VllmEventBatch(T0, [vllm_stored([h1, h2], None, tokens(1000, 2))], 0)),
        (1, VllmEventBatch(T0 + 0.010, [
            vllm_stored([h3], h2, tokens(2000, 1)),
            vllm_stored([7], None, tokens(1000, 1), medium="CPU"),
            BlockUpdated(block_hashes=[h1]),
        ], 0)),
        (2, VllmEventBatch(T0 + 0.020, [BlockRemoved(block_hashes=[h3], medium="GPU")], 0)),
        (4, VllmEventBatch(T0 + 0.040, [vllm_stored([5], None, tokens(3000, 1))], 0)),
        (0, VllmEventBatch(T0 + 0.050, [AllBlocksCleared()], 0)),
    ]


def sglang_script():
    """A store, a removal by the signed spelling of its hash, and a clear."""
    big = 2**64 - 5  # published unsigned, removed as the signed -5
    return [
        (0, SglangEventBatch(T0, [SglangBlockStored([big, 9], None, tokens(1000, 2), BLOCK, None, "GPU")], 0)),
        (1, SglangEventBatch(T0 + 0.005, [SglangBlockRemoved([-5], "GPU")], 0)),
        (2, SglangEventBatch(T0 + 0.006, [SglangAllBlocksCleared()], 0)),
    ]


REQUESTS = [
    {"arrival_ms": int(T0 * 1000) + 15, "id": "hit", "model": "Qwen/Qwen3-8B",
     "token_ids": tokens(1000, 2) + tokens(2000, 1) + [1, 2, 3], "output_tokens": 8},
    {"arrival_ms": int(T0 * 1000) + 45, "id": "gap", "model": "Qwen/Qwen3-8B",
     "tenant": "acme", "token_ids": tokens(1000, 2), "output_tokens": 4},
]


def capture_line(endpoint: str, topic: bytes, seq: int, payload: bytes, replayed=False) -> str:
    line = {"endpoint": endpoint, "seq": seq,
            "payload_b64": base64.b64encode(payload).decode("ascii")}
    if replayed:
        line["replayed"] = True
    try:
        line["topic"] = topic.decode("utf-8")
    except UnicodeDecodeError:
        line["topic_b64"] = base64.b64encode(topic).decode("ascii")
    return json.dumps(line, sort_keys=True)


# The vLLM 0.26.0 batch quoted in volcano-sh/kthena#1535, as the issue printed it
# decoded: a positional batch holding one tagged-map event.
KTHENA_1535 = [1789095808.8378847, [{
    "type": "BlockStored", "block_hashes": [15760518052499183552],
    "parent_block_hash": None,
    "token_ids": [151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198,
                  151644, 77091, 198, 151667],
    "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None,
    "extra_keys": [None], "group_idx": 0, "kv_cache_spec_kind": "full_attention"}], 0]


def dynamo_tokens_hash(token_ids: list[int]) -> int:
    """Dynamo's `tokens_hash` of one block for the base model (dynamo-kv-router 1.6.1):
    XXH3-64, seed 1337, over the ids as 32-bit little-endian integers."""
    import xxhash

    return xxhash.xxh3_64_intdigest(b"".join(t.to_bytes(4, "little") for t in token_ids), seed=1337)


def dynamo_lines() -> list[dict]:
    """RouterEvent lines as Dynamo's router hears them: a chain of two blocks, the
    removal of its tail, a lost event (id 2), a host-tier copy, then a restart."""
    def stored(event_id, parent, blocks, **extra):
        return {"worker_id": 7, **extra, "event": {"event_id": event_id, "dp_rank": 0, "data": {
            "stored": {"parent_hash": parent, "start_position": None, "blocks": [
                {"block_hash": b, "tokens_hash": dynamo_tokens_hash(t), "mm_extra_info": None}
                for b, t in blocks]}}}}
    ms = int(T0 * 1000)
    return [
        stored(0, None, [(100, tokens(1000, 1)), (101, tokens(1016, 1))], storage_tier="device",
               received_ms=ms),
        {"worker_id": 7, "received_ms": ms + 20,
         "event": {"event_id": 1, "dp_rank": 0, "data": {"removed": {"block_hashes": [101]}}}},
        stored(3, 100, [(102, tokens(2000, 1))], received_ms=ms + 30),
        stored(4, None, [(103, tokens(3000, 1))], storage_tier="host_pinned", received_ms=ms + 35),
        {"worker_id": 7, "received_ms": ms + 50, "event": {"event_id": 0, "dp_rank": 0, "data": "cleared"}},
    ]


def write_captures(directory: str) -> None:
    encoder = msgspec.msgpack.Encoder()
    with open(os.path.join(directory, "dynamo.events.jsonl"), "w") as out:
        for line in dynamo_lines():
            out.write(json.dumps(line) + "\n")
    with open(os.path.join(directory, "kthena-1535.capture.jsonl"), "w") as out:
        out.write(capture_line("tcp://127.0.0.1:5557", b"kv-events", 0,
                               encoder.encode(KTHENA_1535)) + "\n")
    for name, script in (("vllm", vllm_script()), ("sglang", sglang_script())):
        with open(os.path.join(directory, f"{name}.capture.jsonl"), "w") as out:
            for seq, batch in script:
                out.write(capture_line("tcp://127.0.0.1:5557", b"kv-events", seq,
                                       encoder.encode(batch)) + "\n")
    with open(os.path.join(directory, "requests.jsonl"), "w") as out:
        for request in REQUESTS:
            out.write(json.dumps(request) + "\n")
    # What `record --replay` writes when messages 2 and 3 were lost live and answered
    # by the replay socket (engine_record.rs records it from `replay`).
    with open(os.path.join(directory, "chain-replayed.capture.jsonl"), "w") as out:
        for seq, batch in chain_script():
            out.write(capture_line("tcp://127.0.0.1:5557", b"kv-events", seq,
                                   encoder.encode(batch), replayed=seq in (2, 3)) + "\n")
    # Two publishers as `record` hears `two-publishers`: A's batches, then B's earlier ones.
    with open(os.path.join(directory, "two-publishers.capture.jsonl"), "w") as out:
        for name, seq, batch in two_publishers_script():
            port = {"a": 5557, "b": 5567}[name]
            out.write(capture_line(f"tcp://127.0.0.1:{port}", b"kv-events", seq,
                                   encoder.encode(batch)) + "\n")
    with open(os.path.join(directory, "chain.requests.jsonl"), "w") as out:
        for request in CHAIN_REQUESTS:
            out.write(json.dumps(request) + "\n")


def publish(endpoint: str, rounds: int) -> None:
    """Binds a PUB socket as vLLM does (`tcp://*:port` binds) and publishes the vLLM
    script `rounds` times, each message as vLLM's three frames. A subscriber that
    connects late misses the first messages (ZeroMQ's slow joiner), so the script
    waits before the first and between rounds."""
    import zmq

    socket = zmq.Context.instance().socket(zmq.PUB)
    socket.bind(endpoint)
    encoder = msgspec.msgpack.Encoder()
    time.sleep(1.0)
    for _ in range(rounds):
        for seq, batch in vllm_script():
            socket.send_multipart((b"kv-events", seq.to_bytes(8, "big"), encoder.encode(batch)))
        time.sleep(0.2)
    socket.close(linger=1000)


def chain_script():
    """(seq, batch): six one-block stores, each block chained on the one before, so a
    lost message leaves every later store with an unknown parent."""
    return [
        (seq, VllmEventBatch(T0 + 0.010 * seq, [
            vllm_stored([100 + seq], None if seq == 0 else 99 + seq, tokens(1000 + BLOCK * seq, 1))
        ], 0))
        for seq in range(6)
    ]


CHAIN_REQUESTS = [
    {"arrival_ms": int(T0 * 1000) + 100, "id": "chain", "model": "Qwen/Qwen3-8B",
     "token_ids": tokens(1000, 6), "output_tokens": 4},
]

# vLLM's ZmqEventPublisher.END_SEQ: -1 as 8 bytes big-endian two's complement.
END_SEQ = (-1).to_bytes(8, "big", signed=True)


def replay(pub_endpoint: str, replay_endpoint: str, drop: str, answer: str, topic: str) -> None:
    """Publishes the chain script as vLLM's ZmqEventPublisher does, with its ROUTER
    replay socket, except that the sequence numbers in `drop` (comma-separated) are
    not sent live: they only enter the replay buffer, as a message lost between the
    PUB socket and its subscriber would.

    `answer` is `buffer` (answer from the buffer, as vLLM's `_service_replay` does)
    or `end-only` (only the end marker: the buffer no longer holds what is asked for).
    `topic` is `with` (vLLM 0.26.0, PR #45177: `[topic, seq, payload]`, end marker
    `["", END_SEQ, ""]`) or `without` (older vLLM and SGLang: `[seq, payload]`).
    The replay socket is served between publications, as vLLM's publisher thread
    polls it, and for a second after the last."""
    import zmq

    context = zmq.Context.instance()
    pub = context.socket(zmq.PUB)
    pub.bind(pub_endpoint)
    router = context.socket(zmq.ROUTER)
    router.bind(replay_endpoint)
    dropped = {int(s) for s in drop.split(",") if s}
    encoder = msgspec.msgpack.Encoder()
    topic_bytes = b"kv-events"
    buffer = []  # (seq, payload), as vLLM's deque

    def serve(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not router.poll(int(left * 1000) + 1):
                continue
            frames = router.recv_multipart()
            if len(frames) != 3:
                continue
            client_id, _, start_seq_bytes = frames
            start_seq = int.from_bytes(start_seq_bytes, "big")
            prefix = (topic_bytes,) if topic == "with" else ()
            if answer == "buffer":
                for seq, payload in buffer:
                    if seq >= start_seq:
                        router.send_multipart((client_id, b"", *prefix, seq.to_bytes(8, "big"), payload))
            end_prefix = (b"",) if topic == "with" else ()
            router.send_multipart((client_id, b"", *end_prefix, END_SEQ, b""))

    time.sleep(1.0)
    for seq, batch in chain_script():
        payload = encoder.encode(batch)
        if seq not in dropped:
            pub.send_multipart((topic_bytes, seq.to_bytes(8, "big"), payload))
        buffer.append((seq, payload))
        serve(0.05)
    serve(1.0)
    pub.close(linger=1000)
    router.close(linger=1000)


def two_publishers_script():
    """(publisher, seq, batch) in sending order: B's batches are earlier than A's."""
    return [
        ("a", 0, VllmEventBatch(T0 + 0.500, [vllm_stored([1], None, tokens(1000, 1))], 0)),
        ("a", 1, VllmEventBatch(T0 + 0.625, [vllm_stored([2], 1, tokens(1016, 1))], 0)),
        ("b", 0, VllmEventBatch(T0 + 0.000, [vllm_stored([3], None, tokens(2000, 1))], 0)),
        ("b", 1, VllmEventBatch(T0 + 0.250, [vllm_stored([4], 3, tokens(2016, 1))], 0)),
    ]


def two_publishers(endpoint_a: str, endpoint_b: str) -> None:
    """Two engines' PUB sockets. A's two batches are sent first, then B's, whose
    times are earlier than A's: a subscriber receives them out of time order."""
    import zmq

    context = zmq.Context.instance()
    sockets = {}
    for name, endpoint in (("a", endpoint_a), ("b", endpoint_b)):
        sockets[name] = context.socket(zmq.PUB)
        sockets[name].bind(endpoint)
    encoder = msgspec.msgpack.Encoder()
    time.sleep(1.0)
    for name, seq, batch in two_publishers_script():
        sockets[name].send_multipart((b"kv-events", seq.to_bytes(8, "big"), encoder.encode(batch)))
        # Apart enough that the subscriber hears them in this order.
        time.sleep(0.2)
    for socket in sockets.values():
        socket.close(linger=1000)


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        write_captures(sys.argv[2])
    elif sys.argv[1] == "replay":
        replay(*sys.argv[2:7])
    elif sys.argv[1] == "two-publishers":
        two_publishers(sys.argv[2], sys.argv[3])
    else:
        publish(sys.argv[2], int(sys.argv[3]))
