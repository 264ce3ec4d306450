"""Ray Serve's prefix tree (`ray` 2.49.0, `PrefixTree` of
`ray/llm/_internal/serve/request_router/prefix_aware/prefix_tree.py`) as a
`kvroute-peer/1` indexer: it answers `reuse`, per worker the prompt tokens the tree
matches for it.

Ray's prefix-aware request router keeps one tree whose tenants are replicas, inserts
each routed request's text for the replica it chose, matches a new prompt character by
character per tenant, and bounds each tenant's text by evicting its least recently
used nodes. The undecorated `PrefixTree` is driven directly (the router wraps it in the
`@ray.remote` `PrefixTreeActor`); importing it starts no Ray cluster (`ray.is_initialized()`
stays false, checked at hello).

The mapping (kvroute_peer.TextMap): worker id = tenant; a segment of `t` tokens is its
key's own character `t` times, placed after its chain's ancestors; time is the tick.
- fleet: `add_tenants(all workers, 0)`, then each worker's initial cache entries as
  stores at time 0.
- store: `insert(text, worker, tick)` for each run of segments consecutive in their
  chain (the text starts at the chain's root, so the run's ancestors are inserted too:
  the tree cannot hold a node without its ancestors). A segment of 0 tokens is a removal,
  as kvroute reads it, and is handled as an evict of that key.
- evict: by default nothing. Ray's router sees no engine events and its tree forgets
  only through its own eviction loop, off by default (`do_eviction=False`,
  prefix_aware_router.py line 61). With `--evictions lru` an evict instead frees, by
  the tree's own LRU, as many characters as the evicted keys held on that worker (the
  tree has no removal of named text; `evict_tenant_by_lru(tenant, min_remove_size)` is
  its public eviction, the one its eviction loop calls).
- clear: `remove_tenants([worker])` then `add_tenants([worker], tick)`, what Ray's
  router does when a replica leaves and comes back.
- load: nothing (the tree has no load).
- request: `prefix_match(prefix text, [worker])` for every worker; the answer is the
  matched length (characters are tokens), capped at `prompt_tokens`. Matching does not
  touch the tree (in Ray the router's insert of the routed text does, and the trace's
  store for the request plays that part here).
No epoch check: the tree has no ordering rule, so every event is applied.
- reset: a new `PrefixTree` and a new `TextMap` (what a new process would have).
"""

import argparse
import importlib.metadata
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import kvroute_peer  # noqa: E402
import ray  # noqa: E402
from ray.llm._internal.serve.request_router.prefix_aware.prefix_tree import (  # noqa: E402
    PrefixTree,
)


class RayPrefixTreePeer:
    name = "ray-serve-prefix-tree"
    version = importlib.metadata.version("ray")
    answers = ["reuse"]

    def __init__(self, evictions):
        self.evictions = evictions
        self.reset()

    def reset(self):
        """A new tree and a new text map: nothing of one trace reaches the next."""
        self.tree = PrefixTree()
        self.text = kvroute_peer.TextMap()
        self.workers = []
        # (worker, namespace, key) -> tokens the stores gave it, for evicts' sizes.
        self.held = {}

    def hello(self, message):
        if ray.is_initialized():
            raise RuntimeError("importing Ray's PrefixTree started a Ray cluster")

    def fleet(self, message):
        self.workers = [w["id"] for w in message["workers"]]
        self.tree.add_tenants(list(self.workers), 0)
        for worker in message["workers"]:
            for entry in worker["cache"]:
                self._store(worker["id"], 0, self.text.namespace(entry), [entry])

    def _store(self, worker, tick, ns, segments):
        removed = [s["key"] for s in segments if s["tokens"] == 0]
        kept = [s for s in segments if s["tokens"] > 0]
        # Positions from every segment, a removal's too (SPEC.md §15.2).
        self.text.learn_store(ns, segments)
        for text in self.text.store_runs(ns, kept):
            self.tree.insert(text, worker, tick)
        for segment in kept:
            self.held[(worker, ns, segment["key"])] = segment["tokens"]
        if removed:
            self._evict(worker, ns, removed)

    def _evict(self, worker, ns, keys):
        chars = sum(self.held.pop((worker, ns, key), 0) for key in keys)
        if chars > 0 and self.evictions == "lru":
            self.tree.evict_tenant_by_lru(worker, chars)

    def event(self, event):
        kind = event["type"]
        if kind == "cache":
            worker, op = event["worker"], event["op"]
            if op == "store":
                self._store(worker, event["tick"], self.text.namespace(event), event["segments"])
            elif op == "evict":
                self._evict(worker, self.text.namespace(event), event["keys"])
            else:
                self.tree.remove_tenants([worker])
                self.tree.add_tenants([worker], event["tick"])
                self.held = {k: v for k, v in self.held.items() if k[0] != worker}
            return None
        if kind == "load":
            return None
        self.text.learn_request(event)
        text = self.text.prefix_text(event)
        reuse = []
        for worker in self.workers:
            matched, _ = self.tree.prefix_match(text, [worker])
            tokens = min(len(matched), event["prompt_tokens"])
            if tokens > 0:
                reuse.append({"worker": worker, "tokens": tokens})
        return {"reuse": reuse}

    def close(self):
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evictions", choices=["none", "lru"], default="none",
                        help="what a kvroute evict does to the tree (default: none, as Ray's router)")
    sys.exit(kvroute_peer.serve(RayPrefixTreePeer(parser.parse_args().evictions)))
