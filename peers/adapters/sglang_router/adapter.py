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
tree of the text it routed per worker and its own count of requests in flight; cache
events, initial caches and load observations have no way in, so they are not sent.
Every fake worker answers before the next request is sent (lock-step), so the router's
in-flight counts are all 0 at each decision: the load-balancing branch never fires and
every choice is the cache-aware one (the worker with the longest match if the match
rate exceeds the threshold, else the worker with the smallest tree).

The text of a request is kvroute_peer.TextMap's prompt text: its prefix's keys as
characters, one a token, then its own tokens as a character of its own.
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


class FakeWorker(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, worker_id, received):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.worker_id = worker_id
        self.received = received


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
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/generate"):
            self.server.received.append((self.server.worker_id, body))
            self._reply({"text": "", "meta_info": {"id": "0", "finish_reason": {"type": "length"}}})
        else:
            self._reply({})


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SglangRouterPeer:
    name = "sglang-router"
    version = importlib.metadata.version("sglang-router")
    answers = ["choice"]

    def __init__(self):
        self.text = kvroute_peer.TextMap()
        self.received = []
        self.servers = []
        self.router = None
        self.log = None
        self.connection = None

    def hello(self, message):
        pass

    def fleet(self, message):
        for worker in message["workers"]:
            server = FakeWorker(worker["id"], self.received)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
        port = _free_port()
        urls = [f"http://127.0.0.1:{s.server_port}" for s in self.servers]
        self.log = tempfile.TemporaryFile()
        self.router = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
             "--port", str(port), "--worker-urls", *urls, *SETTINGS, "--log-level", "warn"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self._wait_ready(len(urls))

    def _router_log(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def _wait_ready(self, count):
        """Until the router lists every worker as healthy (bounded)."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.router.poll() is not None:
                raise RuntimeError(f"the router exited with {self.router.returncode}: {self._router_log()}")
            try:
                self.connection.request("GET", "/workers")
                response = self.connection.getresponse()
                body = json.loads(response.read() or b"{}")
                healthy = [w for w in body.get("workers", []) if w.get("is_healthy", True)]
                if response.status == 200 and len(healthy) == count:
                    return
            except (OSError, http.client.HTTPException, ValueError):
                self.connection.close()
            time.sleep(0.2)
        raise RuntimeError(f"the router did not list {count} healthy workers in {STARTUP_SECONDS} s: {self._router_log()}")

    def event(self, event):
        if event["type"] != "request":
            return None
        self.text.learn_request(event)
        # Bytes, so that http.client sends headers and body in one write.
        body = json.dumps({
            "text": self.text.prompt_text(event),
            "sampling_params": {"max_new_tokens": event["decode_tokens"]},
        }).encode()
        self.received.clear()
        self.connection.request("POST", "/generate", body, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"the router answered {response.status} to request {event['id']}")
        if len(self.received) != 1:
            raise RuntimeError(f"request {event['id']} reached {len(self.received)} fake workers")
        return {"choice": self.received[0][0]}

    def close(self):
        if self.connection is not None:
            self.connection.close()
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
