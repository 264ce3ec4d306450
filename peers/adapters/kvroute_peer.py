"""The peer side of `kvroute-peer/1` (SPEC.md §15), shared by the Python adapters.

`serve(peer)` runs the lock-step loop: one compact JSON object a line on stdin, one
answer a line on stdout for each message that needs one, logs on stderr. A peer object
gives `name`, `version`, `answers` and the methods `fleet(message)`, `event(event)`
(returning the answer's members for a request, `None` otherwise) and `close()`; a peer
with a `reset()` method offers `reset` in its hello (SPEC.md §15.2, message 4), and
`reset()` must drop everything of the trace so far (a fresh `TextMap` too), so that
one process serves a whole `kvroute peer sweep`. Any
exception becomes an `error` message, then exit status 1, so kvroute reports it with
the last event it sent instead of waiting for an answer that will not come.

`TextMap` is the mapping from kvroute's keyed segments to text, for routers that match
prompts by characters (Ray Serve's `PrefixTree`, the SGLang router's tree): every
`(tenant, model, adapter, key)` gets its own character, in order of first appearance,
and a segment of `t` tokens is that character `t` times. One character a token keeps
token counts (a block stored with fewer tokens than a request names matches those
tokens and stops, as kvroute's walk does); distinct keys never share a first
character, so two blocks match only if they are the same key, and namespaces are
disjoint. A key's place in a text is its chain (SPEC.md §12), fixed at its first occurrence
as SPEC.md §15.2 states: after the key before it in a request prefix or in a store's
segments (0-token segments included), at the root when it comes first there or in an
initial cache. An eviction places nothing: a key it is the first to name is held by no
worker, so its place waits for its next occurrence.
"""

import json
import sys
import traceback

PROTOCOL = "kvroute-peer/1"

# The supplementary planes, U+10000 to U+10FFFF: every character there is 4 bytes of
# UTF-8, so a router that measures text in bytes (the SGLang router's match rate)
# measures tokens times 4, whatever order keys appear in. 1,048,576 distinct keys and
# requests before `TextMap` runs out and says so.
_FIRST_CODEPOINT = 0x10000
_LAST_CODEPOINT = 0x10FFFF


class TextMap:
    """Characters for keys and requests, and key chains learned from the events."""

    def __init__(self):
        self._chars = {}
        self._next = _FIRST_CODEPOINT
        # (namespace, key) -> (namespace, parent key), or None at the root; fixed at
        # the key's first occurrence.
        self._parent = {}
        # (namespace, key) -> tokens at its first appearance: the length of its text
        # when it is an ancestor in another key's chain.
        self._tokens = {}

    def char(self, name):
        """The character of `name` (a hashable), allocated on first use."""
        found = self._chars.get(name)
        if found is None:
            if self._next > _LAST_CODEPOINT:
                raise ValueError("more than 1,048,576 distinct keys and requests")
            found = chr(self._next)
            self._chars[name] = found
            self._next += 1
        return found

    @staticmethod
    def namespace(obj):
        return (obj["tenant"], obj["model"], obj["adapter"])

    def learn_request(self, request):
        """Learns the parents a request prefix states (first appearance wins)."""
        ns = self.namespace(request)
        parent = None
        for segment in request["prefix"]:
            name = (ns, segment["key"])
            self._parent.setdefault(name, parent)
            self._tokens.setdefault(name, segment["tokens"])
            parent = name

    def learn_store(self, ns, segments):
        """Learns from a store (or an initial cache entry, a store of one segment): each
        segment not seen before follows the one before it, the first is at the root. A
        0-token segment (a removal) takes its place too, but gives no token count."""
        previous = None
        for segment in segments:
            name = (ns, segment["key"])
            self._parent.setdefault(name, previous)
            if segment["tokens"] > 0:
                self._tokens.setdefault(name, segment["tokens"])
            previous = name

    def parent(self, name):
        return self._parent.get(name)

    def ancestors_text(self, name):
        """The text before `name` in its chain (root first), ancestors at the tokens
        of their first appearance with tokens (none yet: left out, as SPEC.md §12's
        ancestor model leaves it). Stops at a cycle (keys that name each other as
        parents across namespaces cannot, but a trace may state one within one)."""
        parts = []
        seen = {name}
        current = self._parent.get(name)
        while current is not None and current not in seen:
            seen.add(current)
            parts.append(self.char(current) * self._tokens.get(current, 0))
            current = self._parent.get(current)
        parts.reverse()
        return "".join(parts)

    def prefix_text(self, request):
        ns = self.namespace(request)
        return "".join(
            self.char((ns, s["key"])) * s["tokens"] for s in request["prefix"]
        )

    def prompt_text(self, request):
        """The whole prompt: the prefix, then the request's own tokens as its own
        character (no other request or key shares them)."""
        prefix = self.prefix_text(request)
        tail = max(0, request["prompt_tokens"] - len(prefix))
        return prefix + self.char(("request", request["id"])) * tail

    def store_runs(self, ns, segments):
        """The texts to insert for a store: one per run of segments that follow each
        other in their chain, each run's text starting with its first key's ancestors."""
        runs = []
        current = None
        previous = None
        for segment in segments:
            name = (ns, segment["key"])
            own = self.char(name) * segment["tokens"]
            if current is not None and self._parent.get(name) == previous:
                current.append(own)
            else:
                if current is not None:
                    runs.append("".join(current))
                current = [self.ancestors_text(name), own]
            previous = name
        if current is not None:
            runs.append("".join(current))
        return runs


def _write(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def serve(peer):
    """Runs the protocol on stdin/stdout until `end`; returns the exit status."""
    try:
        for line in sys.stdin:
            message = json.loads(line)
            kind = message.get("type")
            if kind == "hello":
                if message.get("protocol") != PROTOCOL:
                    raise ValueError(f"protocol {message.get('protocol')!r}, not {PROTOCOL}")
                peer.hello(message)
                _write(
                    {
                        "type": "hello",
                        "protocol": PROTOCOL,
                        "peer": peer.name,
                        "version": peer.version,
                        "answers": peer.answers,
                        "reset": hasattr(peer, "reset"),
                    }
                )
            elif kind == "fleet":
                peer.fleet(message)
                _write({"type": "ready"})
            elif kind == "event":
                answer = peer.event(message["event"])
                if answer is not None:
                    _write(dict({"type": "answer", "seq": message["event"]["seq"]}, **answer))
            elif kind == "reset" and hasattr(peer, "reset"):
                peer.reset()
                _write({"type": "ready"})
            elif kind == "end":
                peer.close()
                _write({"type": "bye"})
                return 0
            else:
                raise ValueError(f"unknown message type {kind!r}")
        raise ValueError("stdin closed before end")
    except Exception as error:  # every failure is reported, none is a hang
        traceback.print_exc(file=sys.stderr)
        try:
            peer.close()
        except Exception:
            traceback.print_exc(file=sys.stderr)
        try:
            _write({"type": "error", "message": f"{type(error).__name__}: {error}"})
        except OSError:
            pass
        return 1
