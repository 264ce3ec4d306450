"""Messages a second to one subscriber: `kvroute publish` against vLLM's own
`ZmqEventPublisher`, on the same batches, in the same run.

One worker's trace of N cache events (a store, then an eviction, of one block each) is
published by `kvroute publish`; a pyzmq SUB socket in this process receives every
message and keeps the payloads. Then vLLM 0.33.0's `ZmqEventPublisher` (its module read
from the pinned wheel, only its `vllm.*` imports stubbed, as cli/tests/publish uses it)
publishes the same batches, decoded back into its `KVEventBatch`, in a process of its
own, to the same kind of subscriber. Each rate is N over the time from the first message
received to the last; both publishers wait a second after binding so the subscriber
has joined.

With SUB_COUNT (the `sub-count` binary of the bench crate: one SUB socket in Rust that
only counts), both publishers are measured a second time against it, since the Python
subscriber's own loop takes about as long a message as a publisher does.

usage: vllm_rate.py KVROUTE WHEEL [N] [SUB_COUNT]
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import msgspec
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "cli", "tests", "publish"))
from vllm_subscriber import load_kv_events  # noqa: E402


def trace(n):
    events = []
    for i in range(n):
        key = f"k{i // 2}"
        event = {"seq": i + 1, "tick": i + 1, "type": "cache", "worker": "w0", "epoch": 1,
                 "tenant": "t", "model": "m", "adapter": "base"}
        if i % 2 == 0:
            event.update(op="store", segments=[{"key": key, "tokens": 16}])
        else:
            event.update(op="evict", keys=[key])
        events.append(event)
    worker = {"id": "w0", "model": "m", "adapters": [], "prefill_rate": 1, "decode_rate": 1,
              "queued_prefill": 0, "active_decode": 0, "observed_tick": 0, "epoch": 0, "cache": []}
    return {"format": "kvroute-trace/1", "limits": "scale", "workers": [worker], "events": events}


def receive(port, n):
    """Subscribes, returns (seconds from first to last message, payloads)."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.SUB)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.SUBSCRIBE, b"")
    socket.connect(f"tcp://127.0.0.1:{port}")
    return socket


def drain(socket, n):
    payloads = []
    socket.RCVTIMEO = 20_000
    first = None
    for i in range(n):
        try:
            _, _, payload = socket.recv_multipart()
        except zmq.Again:
            sys.exit(f"only {i} of {n} messages arrived")
        if first is None:
            first = time.perf_counter()
        payloads.append(payload)
    return time.perf_counter() - first, payloads


def vllm_publish(wheel, port, payload_file):
    kv_events = load_kv_events(wheel)
    kv_events.KVEventsConfig = lambda **kw: kw
    decoder = msgspec.msgpack.Decoder(type=kv_events.KVEventBatch)
    with open(payload_file, "rb") as f:
        batches = [decoder.decode(p) for p in msgspec.msgpack.decode(f.read())]
    # vLLM binds an endpoint whose host is `*` and connects to any other.
    publisher = kv_events.ZmqEventPublisher(0, endpoint=f"tcp://*:{port}")
    time.sleep(1.0)
    for batch in batches:
        publisher.publish(batch)
    # shutdown() closes the socket with linger 0 after at most two seconds, so it is
    # called only once the thread has sent everything and the subscriber has it.
    while publisher._event_queue.qsize() > 0:
        time.sleep(0.05)
    time.sleep(2.0)
    publisher.shutdown()


def free_port():
    s = zmq.Context.instance().socket(zmq.REP)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    s.close()
    return port


def counted(sub_count, port, n, publish):
    """Seconds `sub-count` took from the first to the last of `n` messages that
    `publish()` (which returns the publisher's process) sent to `port`."""
    counter = subprocess.Popen([sub_count, f"tcp://127.0.0.1:{port}", str(n)],
                               stdout=subprocess.PIPE, text=True)
    publisher = publish()
    out, _ = counter.communicate()
    publisher.wait()
    if counter.returncode != 0:
        sys.exit(f"sub-count failed: {out}")
    return float(out.split()[-2])


def against_sub_count(sub_count, kvroute, wheel, trace_path, payload_file, n):
    port = free_port()
    kvroute_s = counted(sub_count, port, n, lambda: subprocess.Popen(
        [kvroute, "publish", trace_path, "--port", str(port), "--wait-ms", "1000",
         "--hold-ms", "3000"], stdout=subprocess.DEVNULL))
    port = free_port()
    vllm_s = counted(sub_count, port, n, lambda: subprocess.Popen(
        [sys.executable, __file__, "--vllm-publish", wheel, str(port), payload_file]))
    print(f"against sub-count (Rust): kvroute publish {n / kvroute_s:,.0f} messages/s "
          f"({kvroute_s:.3f} s), vLLM ZmqEventPublisher {n / vllm_s:,.0f} messages/s "
          f"({vllm_s:.3f} s), ratio {vllm_s / kvroute_s:.1f}x")


def main():
    if sys.argv[1] == "--vllm-publish":
        vllm_publish(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    kvroute, wheel = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
    sub_count = sys.argv[4] if len(sys.argv) > 4 else None
    scratch = tempfile.mkdtemp()
    trace_path = os.path.join(scratch, "trace.json")
    with open(trace_path, "w") as f:
        json.dump(trace(n), f)

    port = free_port()
    socket = receive(port, n)
    # The hold is the drain vLLM's side gets too (it waits for its queue, then 2 s).
    publisher = subprocess.Popen([kvroute, "publish", trace_path, "--port", str(port),
                                  "--wait-ms", "1000", "--hold-ms", "3000"],
                                 stdout=subprocess.DEVNULL)
    kvroute_s, payloads = drain(socket, n)
    publisher.wait()
    socket.close()

    payload_file = os.path.join(scratch, "payloads.msgpack")
    with open(payload_file, "wb") as f:
        f.write(msgspec.msgpack.encode(payloads))
    port = free_port()
    socket = receive(port, n)
    vllm = subprocess.Popen([sys.executable, __file__, "--vllm-publish", wheel, str(port), payload_file])
    vllm_s, vllm_payloads = drain(socket, n)
    vllm.wait()
    same = sum(a == b for a, b in zip(payloads, vllm_payloads))
    print(f"messages: {n} (vLLM re-encoded {same} of them to the same bytes)")
    print(f"kvroute publish: {n / kvroute_s:,.0f} messages/s ({kvroute_s:.3f} s)")
    print(f"vLLM ZmqEventPublisher: {n / vllm_s:,.0f} messages/s ({vllm_s:.3f} s)")
    print(f"ratio: {vllm_s / kvroute_s:.1f}x")
    if sub_count:
        against_sub_count(sub_count, kvroute, wheel, trace_path, payload_file, n)


if __name__ == "__main__":
    main()
