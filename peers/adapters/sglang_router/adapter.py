"""The SGLang router (`sglang-router` 0.3.2, its Rust core `sglang_router_rs`) as a
`kvroute-peer/1` router: it answers `choice`, the worker the router sends each request
to.

The real router runs as a child process on loopback (`python -m
sglang_router.launch_router`), in front of one small fake worker per kvroute worker,
HTTP servers in this process that answer what the router calls (`/health`,
`/server_info`, `/model_info`, `/generate`, anything else with `{}`) at once. Each
request goes to the router's `/generate` as text; the fake worker that receives it is
the choice. Everything is stopped at `end` or on any error.

Settings, pinned here and the package's defaults unless said: `--policy cache_aware`,
`--cache-threshold 0.3`, `--balance-abs-threshold 64`, `--balance-rel-threshold 1.5`,
`--max-tree-size 67108864`, `--eviction-interval-secs 86400` (no eviction during a run:
its default of 60 s would make the tree depend on wall time), `--disable-health-check`
after start-up (a periodic check would only add wall-time traffic).

What the router sees: only requests. Its cache-aware policy keeps its own approximate
tree of the text it routed per worker and its own count of requests in flight per
worker (its load); cache events, initial caches and load observations have no way in,
so they are not sent. So that its load means something under lock-step, a request stays
in flight at the fake worker that received it (the HTTP exchange held open) for its
own service time in logical time, `ceil(prompt_tokens / prefill_rate) +
ceil(decode_tokens / decode_rate)` ticks of that worker (SPEC.md §3.1's rates, no
queueing): before each event at tick `t` the requests due by `t` are answered, and the
adapter waits until the router's `/workers` reports the loads that remain.

The text of a request is kvroute_peer.TextMap's prompt text: its prefix's keys as
characters, one a token, then its own tokens as a character of its own.

Reset (one process, and one router, for a whole `kvroute peer sweep`): every request in
flight is answered, every worker is removed through the router's own worker
management (`DELETE /workers/{id}`, a `RemoveWorker` job), and the next fleet's workers
are new fake workers on ports no earlier worker had, added with `POST /workers`. Removing
a worker is what clears the router's state of it (sglang-router 0.3.2's sdist):
- its tree: the removal job's `RemoveFromPolicyRegistryStep`
  (`src/core/steps/worker/local/remove_from_policy_registry.rs` lines 44-49) calls
  `remove_worker_from_cache_aware` (`src/policies/registry.rs` line 316), that is
  `CacheAwarePolicy::remove_worker_by_url` (`src/policies/cache_aware.rs` lines 194-199),
  `Tree::remove_tenant` on every model's tree (`src/policies/tree.rs` lines 823-893):
  the tenant leaves every node, from its leaves up, nodes left with no tenant and no
  child are dropped, and its character count goes (line 893). With every worker
  removed, every node but the root is gone;
- its policy: `on_worker_removed` (`registry.rs` lines 110-140) drops the model's
  policy with its last worker (line 136), and the next added worker gets one assigned;
- its load: the in-flight count is a field of the worker object (`load_counter`,
  `src/core/worker.rs` lines 622 and 754-760), created with each added worker, so a new
  URL starts at 0; new URLs also leave nothing keyed by an old one (circuit breakers,
  metrics) to match.
Restarting the router would also be clean, but costs its start-up (about 2 s) a trace,
which is what reset is for; the removal is the router's documented way to forget a
worker, and the adapter checks its outcome (`/workers` lists exactly the new workers,
healthy, every load 0) before it answers the fleet.
"""

import http.client
import http.server
import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kvroute_peer  # noqa: E402

SETTINGS = [
    "--policy", "cache_aware",
    "--cache-threshold", "0.3",
    "--balance-abs-threshold", "64",
    "--balance-rel-threshold", "1.5",
    "--max-tree-size", str(2**26),
    "--eviction-interval-secs", "86400",
]
STARTUP_SECONDS = 60
# Wall-time bounds of one exchange with the router; kvroute's --timeout-ms bounds the
# whole answer anyway.
EXCHANGE_SECONDS = 30


class Arrivals:
    """What the fake workers received, and the gates that hold their answers."""

    def __init__(self):
        self.condition = threading.Condition()
        self.arrived = []  # worker ids, in order of arrival
        self.gates = []  # one threading.Event per arrival, set to answer it

    def arrive(self, worker_id):
        gate = threading.Event()
        with self.condition:
            self.arrived.append(worker_id)
            self.gates.append(gate)
            self.condition.notify_all()
        return gate

    def wait_for(self, count):
        with self.condition:
            if not self.condition.wait_for(lambda: len(self.arrived) >= count, EXCHANGE_SECONDS):
                raise RuntimeError("the router forwarded no request within "
                                   f"{EXCHANGE_SECONDS} s")
            return self.arrived[count - 1], self.gates[count - 1]


class FakeWorker(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, worker_id, arrivals):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.worker_id = worker_id
        self.arrivals = arrivals
        self.closing = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out as two writes: without this, Nagle's algorithm and
        # the router's delayed ACK hold each answer for tens of milliseconds.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def _reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith(("/server_info", "/model_info", "/get_server_info", "/get_model_info")):
            # An empty model path: the router's tokenizer lookup then has nothing to fetch.
            self._reply({"model_path": "", "tokenizer_path": "", "is_generation": True})
        else:
            self._reply({})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/generate"):
            gate = self.server.arrivals.arrive(self.server.worker_id)
            gate.wait()
            self._reply({"text": "", "meta_info": {"id": "0", "finish_reason": {"type": "length"}}})
        else:
            self._reply({})


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ceil_div(a, b):
    return -(-a // b)


class SglangRouterPeer:
    name = "sglang-router"
    version = importlib.metadata.version("sglang-router")
    answers = ["choice"]

    def __init__(self):
        self.router = None
        self.port = None
        self.log = None
        self.servers = []
        # Every fake worker port used so far: a new trace's workers never reuse one, so
        # nothing the router keyed by an earlier URL can apply to them.
        self.used_ports = set()
        self._fresh_trace()

    def _fresh_trace(self):
        self.text = kvroute_peer.TextMap()
        self.arrivals = Arrivals()
        self.rates = {}
        self.urls = {}
        # In flight: (due tick, worker id, gate, client thread), in arrival order.
        self.in_flight = []
        self.errors = []

    def hello(self, message):
        pass

    def _fake_worker(self, worker_id):
        """A fake worker on a port no earlier one had."""
        refused = []
        while True:
            server = FakeWorker(worker_id, self.arrivals)
            if server.server_port not in self.used_ports:
                break
            refused.append(server)
        for r in refused:
            r.server_close()
        self.used_ports.add(server.server_port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def fleet(self, message):
        for worker in message["workers"]:
            server = self._fake_worker(worker["id"])
            self.servers.append(server)
            self.rates[worker["id"]] = (worker["prefill_rate"], worker["decode_rate"])
        self.urls = {s.worker_id: f"http://127.0.0.1:{s.server_port}" for s in self.servers}
        if self.router is None:
            self.port = _free_port()
            self.log = tempfile.TemporaryFile()
            self.router = subprocess.Popen(
                [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                 "--port", str(self.port), "--worker-urls", *self.urls.values(), *SETTINGS,
                 # Its metrics exporter binds 0.0.0.0:29000 by default and the router
                 # panics when that is taken ("failed to install Prometheus metrics
                 # exporter: ... Address already in use"), so two adapters at once (the
                 # test harness runs tests in parallel) failed; each gets its own port.
                 "--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port()),
                 "--log-level", "warn"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            )
            self._wait_loads({}, STARTUP_SECONDS)
            return
        # After a reset: the router is up with no workers; add this trace's.
        for url in self.urls.values():
            status, body = self._exchange("POST", "/workers", {"url": url})
            if status not in (200, 201, 202):
                raise RuntimeError(f"the router answered {status} to adding {url}: {body!r}")
        self._wait_loads({}, STARTUP_SECONDS)

    def _exchange(self, method, path, obj=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=EXCHANGE_SECONDS)
        try:
            body = None if obj is None else json.dumps(obj).encode()
            headers = {} if obj is None else {"Content-Type": "application/json"}
            connection.request(method, path, body, headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def reset(self):
        """Answers what is in flight, removes every worker from the router (which
        clears its tree and loads of them, see the module's docstring), stops the fake
        workers, and starts the next trace's state afresh."""
        self._release_due(float("inf"))
        if self.router is not None:
            for worker in self._workers() or []:
                status, body = self._exchange("DELETE", f"/workers/{worker['id']}")
                if status not in (200, 202, 204):
                    raise RuntimeError(f"the router answered {status} to removing "
                                       f"{worker['url']}: {body!r}")
            self.urls = {}
            self._wait_loads({}, EXCHANGE_SECONDS)
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers = []
        self._fresh_trace()

    def _router_log(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def _workers(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=EXCHANGE_SECONDS)
        try:
            connection.request("GET", "/workers")
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                return None
            return json.loads(body).get("workers", [])
        finally:
            connection.close()

    def _wait_loads(self, expected, seconds):
        """Until the router lists exactly this trace's workers, each healthy, with the
        load `expected` says (worker id -> requests in flight; absent is 0). Bounded."""
        want = {self.urls[w]: expected.get(w, 0) for w in self.urls}
        deadline = time.monotonic() + seconds
        seen = None
        while True:
            if self.router.poll() is not None:
                raise RuntimeError(f"the router exited with {self.router.returncode}: {self._router_log()}")
            try:
                workers = self._workers()
            except (OSError, http.client.HTTPException, ValueError):
                workers = None
            if workers is not None:
                # Every worker listed counts: one not yet healthy, or one being
                # removed, is not the state waited for.
                seen = {w["url"]: w.get("load", 0) if w.get("is_healthy") else "unhealthy"
                        for w in workers}
                if seen == want:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the router did not report loads {want} within {seconds} s "
                                   f"(last seen {seen}): {self._router_log()}")
            time.sleep(0.005 if seen is not None else 0.2)

    def _send(self, body, request_id):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=None)
            connection.request("POST", "/generate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            connection.close()
            if response.status != 200:
                self.errors.append(f"the router answered {response.status} to request {request_id}")
        except (OSError, http.client.HTTPException) as error:
            self.errors.append(f"request {request_id}: {error}")

    def _release_due(self, tick):
        due = [f for f in self.in_flight if f[0] <= tick]
        if not due:
            return
        self.in_flight = [f for f in self.in_flight if f[0] > tick]
        for _, _, gate, thread in due:
            gate.set()
        for _, _, _, thread in due:
            thread.join(EXCHANGE_SECONDS)
        if self.errors:
            raise RuntimeError(self.errors[0])
        expected = {}
        for _, worker, _, _ in self.in_flight:
            expected[worker] = expected.get(worker, 0) + 1
        self._wait_loads(expected, EXCHANGE_SECONDS)

    def event(self, event):
        self._release_due(event["tick"])
        if event["type"] != "request":
            return None
        self.text.learn_request(event)
        # Bytes, so that http.client sends headers and body in one write.
        body = json.dumps({
            "text": self.text.prompt_text(event),
            "sampling_params": {"max_new_tokens": event["decode_tokens"]},
        }).encode()
        count = len(self.arrivals.arrived) + 1
        thread = threading.Thread(target=self._send, args=(body, event["id"]), daemon=True)
        thread.start()
        worker, gate = self.arrivals.wait_for(count)
        if self.errors:
            raise RuntimeError(self.errors[0])
        prefill_rate, decode_rate = self.rates[worker]
        service = _ceil_div(event["prompt_tokens"], prefill_rate) + _ceil_div(event["decode_tokens"], decode_rate)
        self.in_flight.append((event["tick"] + service, worker, gate, thread))
        return {"choice": worker}

    def close(self):
        for _, _, gate, _ in self.in_flight:
            gate.set()
        self.in_flight = []
        if self.router is not None and self.router.poll() is None:
            self.router.terminate()
            try:
                self.router.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.router.kill()
                self.router.wait()
        for server in self.servers:
            server.shutdown()
            server.server_close()
        self.servers = []


if __name__ == "__main__":
    sys.exit(kvroute_peer.serve(SglangRouterPeer()))
