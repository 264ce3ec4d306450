"""Subscribes to `kvroute publish` and decodes every message with vLLM's own classes.

vLLM's `vllm/distributed/kv_events.py` is read from the pinned vLLM wheel, its text
unchanged, with only its `vllm.*` imports stubbed (vllm_kv_events.py, which the test
publisher of `kvroute record` shares). Each message is decoded with
`msgspec.msgpack.Decoder(KVEventBatch)`, which refuses any payload that is not a
`KVEventBatch`, and printed as one JSON line:
`{"endpoint", "seq", "ts", "rank", "events": [[tag, {field: value}]...]}`.

usage: vllm_subscriber.py WHEEL COUNT ENDPOINT...
"""

import json
import sys

import msgspec
import zmq

from vllm_kv_events import load_kv_events


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
