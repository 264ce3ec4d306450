"""A kvroute-peer/1 indexer whose answers are given, not computed: for the tests of
the model causes (SPEC.md section 12, evict_unseen and ancestors_implied). Its one
argument is a JSON object {"<request seq>": {"<worker>": tokens, ...}, ...}; a request
it does not name is answered with nothing reused. It ignores every cache event, so the
figures are exactly the ones the test chose.
"""
import json
import sys

answers = json.loads(sys.argv[1])


def send(message):
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        send({"type": "hello", "protocol": "kvroute-peer/1", "peer": "scripted",
              "version": "1.0.0", "answers": ["reuse"]})
    elif m["type"] == "fleet":
        send({"type": "ready"})
    elif m["type"] == "event":
        e = m["event"]
        if e["type"] == "request":
            given = answers.get(str(e["seq"]), {})
            reuse = [{"worker": w, "tokens": t} for w, t in sorted(given.items())]
            send({"type": "answer", "seq": e["seq"], "reuse": reuse})
    elif m["type"] == "end":
        send({"type": "bye"})
        break
