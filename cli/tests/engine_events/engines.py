"""KV event publishers as vLLM and SGLang publish theirs (SPEC.md §13.1).

Live, the vLLM messages are vLLM's own: `publish`, `replay` and `two-publishers` send
every one through vLLM 0.33.0's `ZmqEventPublisher`, with its `KVEventBatch`,
`BlockStored`, `BlockRemoved` and `AllBlocksCleared`, all read from
`vllm/distributed/kv_events.py` in the pinned wheel (cli/tests/publish/vllm-wheel.txt)
and run unchanged (cli/tests/publish/vllm_kv_events.py stubs only its `vllm.*`
imports). The publisher numbers, encodes, buffers and replays; this script only
chooses the batches, and, where a test needs a fault the publisher cannot make, looks
over its socket's shoulder (`FaultyPublisher`).

The fixture captures (`capture DIR`) keep the structs declared below field for field
with the same msgspec options, so msgspec writes the bytes those engines would, and
the committed fixtures stay as they are:

- `Vllm*`: vLLM 0.26.0, whose batch is positional and whose events are tagged maps
  (the record quoted in volcano-sh/kthena#1535);
- `Sglang*`: SGLang's positional batch and events, with `attn_dp_rank` and `medium`
  (no SGLang wheel is pinned, so its messages are only ever these).

- `dynamo_lines`: NVIDIA Dynamo's `RouterEvent` as its router reads them (JSON).

Four uses, all deterministic (fixed times, hashes and tokens); WHEEL is the vLLM
0.33.0 wheel:

    python engines.py capture DIR          # every fixture capture, and the requests
    python engines.py publish WHEEL ENDPOINT N
                                           # vLLM's publisher, the vLLM script N times
    python engines.py replay WHEEL PUB REPLAY DROP ANSWER TOPIC
                                           # the chain script with a replay socket
    python engines.py two-publishers WHEEL A B
                                           # two publishers, later times sent first

The live uses print, once their publishers are shut down, one JSON line for each
message vLLM's PUB socket was handed: `{"endpoint", "seq", "payload_b64", "live"}`
(`live` false for one a fault kept off the wire), so a test can compare what it
received with what was sent, byte for byte.

Pinned: pyzmq 27.2.0, msgspec 0.22.0, and xxhash 3.6.0 for Dynamo's token hash
(cli/tests/engine_events/requirements.txt).
"""

import base64
import json
import os
import sys
import time
import types
from typing import Any, Optional, Union

import msgspec

# --- vLLM 0.26.0, for the fixture captures ----------------------------------------


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


VLLM_0_26 = types.SimpleNamespace(
    KVEventBatch=VllmEventBatch, BlockStored=BlockStored, BlockRemoved=BlockRemoved,
    AllBlocksCleared=AllBlocksCleared, BlockUpdated=BlockUpdated)


# --- vLLM 0.33.0, from the pinned wheel, for the live publishers --------------------


def vllm_0_33(wheel: str) -> types.SimpleNamespace:
    """vLLM 0.33.0's publisher and event classes, as the wheel declares them, and an
    event type of no vLLM on the same base."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "publish"))
    from vllm_kv_events import load_kv_events

    kv = load_kv_events(wheel)

    class BlockUpdated(kv.KVCacheEvent):
        """No engine's event: stands for a type a later version may add."""

        block_hashes: list[int]

    return types.SimpleNamespace(
        KVEventBatch=kv.KVEventBatch, BlockStored=kv.BlockStored,
        BlockRemoved=kv.BlockRemoved, AllBlocksCleared=kv.AllBlocksCleared,
        BlockUpdated=BlockUpdated, ZmqEventPublisher=kv.ZmqEventPublisher)


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
TOPIC = "kv-events"


def tokens(start: int, blocks: int) -> list[int]:
    return list(range(start, start + BLOCK * blocks))


def vllm_stored(v, hashes, parent, token_ids, medium="GPU"):
    return v.BlockStored(
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


# The scripts' batches carry no rank: vLLM's publisher gives each the rank it was made
# for (0 here), and the fixture writer does the same.


def vllm_script(v):
    """(seq, batch, heard) in publication order, `v` the vLLM classes: a chain, a CPU
    copy, an unknown type, a removal, a message lost on the way (seq 3, not `heard`),
    then a restart."""
    h1, h2, h3 = 15760518052499183552, 101, b"\x01\x02\x03"
    return [
        (0, v.KVEventBatch(T0, [vllm_stored(v, [h1, h2], None, tokens(1000, 2))]), True),
        (1, v.KVEventBatch(T0 + 0.010, [
            vllm_stored(v, [h3], h2, tokens(2000, 1)),
            vllm_stored(v, [7], None, tokens(1000, 1), medium="CPU"),
            v.BlockUpdated(block_hashes=[h1]),
        ]), True),
        (2, v.KVEventBatch(T0 + 0.020, [v.BlockRemoved(block_hashes=[h3], medium="GPU")]), True),
        (3, v.KVEventBatch(T0 + 0.030, [vllm_stored(v, [6], None, tokens(4000, 1))]), False),
        (4, v.KVEventBatch(T0 + 0.040, [vllm_stored(v, [5], None, tokens(3000, 1))]), True),
        (0, v.KVEventBatch(T0 + 0.050, [v.AllBlocksCleared()]), True),
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


def fixture_payload(batch) -> bytes:
    """A vLLM 0.26.0 batch encoded as its publisher would: rank 0 given, msgspec."""
    batch.data_parallel_rank = 0
    return msgspec.msgpack.Encoder().encode(batch)


def write_captures(directory: str) -> None:
    encoder = msgspec.msgpack.Encoder()
    topic = TOPIC.encode()
    with open(os.path.join(directory, "dynamo.events.jsonl"), "w") as out:
        for line in dynamo_lines():
            out.write(json.dumps(line) + "\n")
    with open(os.path.join(directory, "kthena-1535.capture.jsonl"), "w") as out:
        out.write(capture_line("tcp://127.0.0.1:5557", topic, 0,
                               encoder.encode(KTHENA_1535)) + "\n")
    with open(os.path.join(directory, "vllm.capture.jsonl"), "w") as out:
        for seq, batch, heard in vllm_script(VLLM_0_26):
            if heard:
                out.write(capture_line("tcp://127.0.0.1:5557", topic, seq,
                                       fixture_payload(batch)) + "\n")
    with open(os.path.join(directory, "sglang.capture.jsonl"), "w") as out:
        for seq, batch in sglang_script():
            out.write(capture_line("tcp://127.0.0.1:5557", topic, seq,
                                   encoder.encode(batch)) + "\n")
    with open(os.path.join(directory, "requests.jsonl"), "w") as out:
        for request in REQUESTS:
            out.write(json.dumps(request) + "\n")
    # What `record --replay` writes when messages 2 and 3 were lost live and answered
    # by the replay socket (engine_record.rs records it from `replay`).
    with open(os.path.join(directory, "chain-replayed.capture.jsonl"), "w") as out:
        for seq, batch in chain_script(VLLM_0_26):
            out.write(capture_line("tcp://127.0.0.1:5557", topic, seq,
                                   fixture_payload(batch), replayed=seq in (2, 3)) + "\n")
    # Two publishers as `record` hears `two-publishers`: A's batches, then B's earlier ones.
    with open(os.path.join(directory, "two-publishers.capture.jsonl"), "w") as out:
        for name, seq, batch in two_publishers_script(VLLM_0_26):
            port = {"a": 5557, "b": 5567}[name]
            out.write(capture_line(f"tcp://127.0.0.1:{port}", topic, seq,
                                   fixture_payload(batch)) + "\n")
    with open(os.path.join(directory, "chain.requests.jsonl"), "w") as out:
        for request in CHAIN_REQUESTS:
            out.write(json.dumps(request) + "\n")


class WatchedSocket:
    """A pyzmq socket as vLLM's publisher uses it, each multipart send passed through
    `send` (frames, socket's send_multipart); every other member the socket's own."""

    def __init__(self, socket, send):
        self._socket, self._send = socket, send

    def send_multipart(self, frames, *args, **kwargs):
        self._send(tuple(frames), lambda f: self._socket.send_multipart(f, *args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._socket, name)


def faulty_publisher(v):
    """vLLM's `ZmqEventPublisher`, with two faults it cannot make itself.

    Its public API has no way to lose a message between its PUB socket and a
    subscriber while keeping it for replay, nor to answer a replay without the topic
    frame, as older vLLM and SGLang do (0.33.0's `_service_replay` always sends
    `[topic, seq, payload]` and `["", END_SEQ, ""]`). So its two sockets, made by its
    own `_socket_setup`, are wrapped: a PUB send of a number in `drop` is left
    out (the publisher still numbers and buffers it, as it would a message the wire
    lost), and with `replay_topic` false the topic frame of each replay answer is
    taken out. Every PUB send, left out or not, is logged in `sent` as (endpoint, seq,
    payload, live). Everything else, numbering, encoding, the replay buffer and its
    answers, is vLLM's."""

    class FaultyPublisher(v.ZmqEventPublisher):
        def __init__(self, endpoint, replay_endpoint=None, drop=(), replay_topic=True,
                     buffer_steps=10_000):
            self.drop, self.replay_topic, self.sent = set(drop), replay_topic, []
            super().__init__(0, endpoint, replay_endpoint, buffer_steps=buffer_steps,
                             topic=TOPIC)

        def _socket_setup(self):
            try:
                super()._socket_setup()
            except Exception:
                # A bind that failed leaves its socket open: closed here, so that
                # `bound` can try again.
                self._pub.close(linger=0)
                raise
            self._pub = WatchedSocket(self._pub, self._send_live)
            if self._replay is not None and not self.replay_topic:
                # Frames are (client id, "", topic, seq, payload); the end marker's
                # topic is the empty frame.
                self._replay = WatchedSocket(self._replay, lambda frames, send: send(frames[:2] + frames[3:]))

        def _send_live(self, frames, send):
            _, seq_bytes, payload = frames
            seq = int.from_bytes(seq_bytes, "big")
            live = seq not in self.drop
            self.sent.append((self._endpoint, seq, payload, live))
            if live:
                send(frames)

    return FaultyPublisher


# How long a publisher waits after binding before it publishes: a subscriber that
# connects late misses the first messages (ZeroMQ's slow joiner).
JOIN_SECONDS = 1.0
# How long a publisher stays up after its last publication: vLLM's `shutdown` closes
# its sockets with linger 0, which drops what is still queued.
DRAIN_SECONDS = 0.5


def bound(make, seconds: float = 10.0):
    """`make()`, tried again while its endpoint is still taken: ZeroMQ's I/O thread
    releases a closed socket's port a moment after `close` returns, so a publisher
    restarted on its predecessor's endpoint may find it taken at first."""
    import zmq

    deadline = time.monotonic() + seconds
    while True:
        try:
            return make()
        except zmq.ZMQError as error:
            if error.errno != zmq.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def print_sent(publishers) -> None:
    for publisher in publishers:
        for endpoint, seq, payload, live in publisher.sent:
            print(json.dumps({"endpoint": endpoint, "seq": seq, "live": live,
                              "payload_b64": base64.b64encode(payload).decode("ascii")}))


def publish(wheel: str, endpoint: str, rounds: int) -> None:
    """vLLM's publisher binds `endpoint` (it binds a wildcard such as `tcp://*:5557` and
    connects to a named host) and publishes the vLLM script `rounds` times. Each run of the script from seq 0 is one publisher: at the
    restart the engine's publisher is shut down and a new one, numbering from 0 again,
    binds the same endpoint, as a restarted engine's would."""
    v = vllm_0_33(wheel)
    publisher_class = faulty_publisher(v)
    runs = []
    for _ in range(rounds):
        for seq, batch, heard in vllm_script(v):
            if seq == 0:
                runs.append([])
            runs[-1].append((batch, heard))
    done = []
    for run in runs:
        lost = {seq for seq, (_, heard) in enumerate(run) if not heard}
        publisher = bound(lambda: publisher_class(endpoint, drop=lost))
        time.sleep(JOIN_SECONDS)
        for batch, _ in run:
            publisher.publish(batch)
        time.sleep(DRAIN_SECONDS)
        publisher.shutdown()
        done.append(publisher)
    print_sent(done)


def chain_script(v):
    """(seq, batch): six one-block stores, each block chained on the one before, so a
    lost message leaves every later store with an unknown parent."""
    return [
        (seq, v.KVEventBatch(T0 + 0.010 * seq, [
            vllm_stored(v, [100 + seq], None if seq == 0 else 99 + seq, tokens(1000 + BLOCK * seq, 1))
        ]))
        for seq in range(6)
    ]


CHAIN_REQUESTS = [
    {"arrival_ms": int(T0 * 1000) + 100, "id": "chain", "model": "Qwen/Qwen3-8B",
     "token_ids": tokens(1000, 6), "output_tokens": 4},
]


def replay(wheel: str, pub_endpoint: str, replay_endpoint: str, drop: str, answer: str,
           topic: str) -> None:
    """vLLM's publisher, with its ROUTER replay socket at `replay_endpoint`, publishes
    the chain script, except that the sequence numbers in `drop` (comma-separated) are
    not sent live: they only enter the replay buffer, as a message lost between the
    PUB socket and its subscriber would.

    `answer` is `buffer` (vLLM's `_service_replay` answers from its buffer of 10,000
    steps) or `end-only` (a buffer of 0 steps, so the answer is the end marker alone,
    as from a buffer that has moved past what is asked for). `topic` is `with`
    (vLLM's answer: `[topic, seq, payload]`, end marker `["", END_SEQ, ""]`) or
    `without` (older vLLM and SGLang: `[seq, payload]`). vLLM's publisher
    thread serves the replay socket between publications, and for a second after the
    last."""
    v = vllm_0_33(wheel)
    publisher = faulty_publisher(v)(
        pub_endpoint, replay_endpoint, drop={int(s) for s in drop.split(",") if s},
        replay_topic=topic == "with", buffer_steps={"buffer": 10_000, "end-only": 0}[answer])
    time.sleep(JOIN_SECONDS)
    for _, batch in chain_script(v):
        publisher.publish(batch)
        time.sleep(0.05)
    time.sleep(1.0)
    publisher.shutdown()
    print_sent([publisher])


def two_publishers_script(v):
    """(publisher, seq, batch) in sending order: B's batches are earlier than A's."""
    return [
        ("a", 0, v.KVEventBatch(T0 + 0.500, [vllm_stored(v, [1], None, tokens(1000, 1))])),
        ("a", 1, v.KVEventBatch(T0 + 0.625, [vllm_stored(v, [2], 1, tokens(1016, 1))])),
        ("b", 0, v.KVEventBatch(T0 + 0.000, [vllm_stored(v, [3], None, tokens(2000, 1))])),
        ("b", 1, v.KVEventBatch(T0 + 0.250, [vllm_stored(v, [4], 3, tokens(2016, 1))])),
    ]


def two_publishers(wheel: str, endpoint_a: str, endpoint_b: str) -> None:
    """Two engines' publishers. A's two batches are sent first, then B's, whose
    times are earlier than A's: a subscriber receives them out of time order."""
    v = vllm_0_33(wheel)
    publisher_class = faulty_publisher(v)
    publishers = {"a": publisher_class(endpoint_a), "b": publisher_class(endpoint_b)}
    time.sleep(JOIN_SECONDS)
    for name, _, batch in two_publishers_script(v):
        publishers[name].publish(batch)
        # Apart enough that the subscriber hears them in this order.
        time.sleep(0.2)
    time.sleep(DRAIN_SECONDS)
    for publisher in publishers.values():
        publisher.shutdown()
    print_sent(publishers.values())


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        write_captures(sys.argv[2])
    elif sys.argv[1] == "replay":
        replay(*sys.argv[2:8])
    elif sys.argv[1] == "two-publishers":
        two_publishers(*sys.argv[2:5])
    else:
        publish(sys.argv[2], sys.argv[3], int(sys.argv[4]))
