"""Subscribes to `kvroute publish` and decodes every message with vLLM's own classes.

vLLM's `vllm/distributed/kv_events.py` is read from the pinned vLLM wheel, its text
unchanged; only its four `vllm.*` imports are stubbed (a logger, three network helpers
it uses only to bind, a config class and the block hash type), since the rest of vLLM
needs a GPU build. Each message is decoded with `msgspec.msgpack.Decoder(KVEventBatch)`,
which refuses any payload that is not a `KVEventBatch`, and printed as one JSON line:
`{"endpoint", "seq", "ts", "rank", "events": [[tag, {field: value}]...]}`.

usage: vllm_subscriber.py WHEEL COUNT ENDPOINT...
"""

import json
import logging
import sys
import types
import zipfile

import msgspec
import zmq


def load_kv_events(wheel):
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("vllm/distributed/kv_events.py").decode()
    stubs = {
        "vllm": {},
        "vllm.config": {},
        "vllm.config.kv_events": {"KVEventsConfig": type("KVEventsConfig", (), {})},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.utils": {},
        "vllm.utils.network_utils": {
            name: (lambda *a, **k: None)
            for name in ("get_ip", "get_tcp_uri", "is_valid_ipv6_address", "split_zmq_path")
        },
        "vllm.v1": {},
        "vllm.v1.core": {},
        "vllm.v1.core.kv_cache_utils": {"ExternalBlockHash": bytes | int},
    }
    for name, members in stubs.items():
        module = types.ModuleType(name)
        module.__dict__.update(members)
        sys.modules[name] = module
    module = types.ModuleType("vllm_kv_events")
    exec(compile(source, "vllm/distributed/kv_events.py", "exec"), module.__dict__)
    return module


def main():
    wheel, count, endpoints = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    kv_events = load_kv_events(wheel)
    decoder = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)
    context = zmq.Context()
    poller = zmq.Poller()
    sockets = {}
    for endpoint in endpoints:
        socket = context.socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        socket.connect(endpoint)
        poller.register(socket, zmq.POLLIN)
        sockets[socket] = endpoint
    print("subscribed", flush=True)
    received = 0
    while received < count:
        ready = dict(poller.poll(20_000))
        if not ready:
            print(json.dumps({"error": f"timed out after {received} messages"}), flush=True)
            sys.exit(1)
        for socket in ready:
            topic, seq, payload = socket.recv_multipart()
            batch = decoder.decode(payload)
            events = [[type(e).__name__, msgspec.to_builtins(e)] for e in batch.events]
            line = {
                "endpoint": sockets[socket],
                "seq": int.from_bytes(seq, "big"),
                "ts": batch.ts,
                "rank": batch.data_parallel_rank,
                "events": events,
            }
            print(json.dumps(line), flush=True)
            received += 1


if __name__ == "__main__":
    main()
