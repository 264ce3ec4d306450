"""A kvroute-peer/1 peer that misbehaves in one way, chosen by its first argument, for
cli/tests/peer.rs (SPEC.md section 15.3). It writes its own process id (and that of a
child it starts, for "hang") to the file named by its second argument, so the test
can check that nothing is left running once kvroute returns.

Modes: hang, escape, liar, dies, garbage, not_json, other_protocol, wrong_seq, choice,
error, silent_exit; for `peer sweep`: plain (no reset offered), reset (offered and
answered, the next message checked to be a fleet), reset_hang (offered, then no answer
to it), reset_dies (offered and answered, then an exit at the next trace's first
request), reset_fails_second (offered; the first reset answered, the second answered
with an error and an exit). Every process also appends its id to PIDFILE.all, so a test
can count the processes a sweep started.
"""
import json
import os
import subprocess
import sys

mode, pid_file = sys.argv[1], sys.argv[2]
pids = [os.getpid()]
if mode == "hang":
    # A grandchild in the peer's process group: kvroute must kill the group, not only
    # the peer, or this sleep outlives the run.
    pids.append(subprocess.Popen(["sleep", "600"]).pid)
if mode == "escape":
    # A child that leaves the peer's process group and keeps its stdout and stderr
    # open: kvroute cannot kill it, and must not wait for those pipes to close.
    pids.append(subprocess.Popen(["sleep", "600"], start_new_session=True).pid)
with open(pid_file + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(pid_file + ".tmp", pid_file)
with open(pid_file + ".all", "a") as f:
    f.write(f"{os.getpid()}\n")


def send(message):
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


hello = {"type": "hello", "protocol": "kvroute-peer/1", "peer": "faulty-" + mode,
         "version": "1.0.0", "answers": ["reuse"]}
if mode == "liar":
    hello["version"] = "9.9.9"
if mode == "other_protocol":
    hello["protocol"] = "kvroute-peer/2"
if mode == "choice":
    hello["answers"] = ["choice"]
if mode.startswith("reset"):
    hello["reset"] = True

resets = 0
expect_fleet = False

workers = []
for line in sys.stdin:
    m = json.loads(line)
    if m["type"] == "hello":
        print("faulty peer: hello from kvroute", file=sys.stderr, flush=True)
        send(hello)
    elif m["type"] == "fleet":
        workers = [w["id"] for w in m["workers"]]
        expect_fleet = False
        send({"type": "ready"})
    elif expect_fleet:
        send({"type": "error", "message": f"after reset: {m['type']} before the fleet"})
        sys.exit(1)
    elif m["type"] == "reset" and mode.startswith("reset"):
        print("faulty peer: reset", file=sys.stderr, flush=True)
        if mode == "reset_hang":
            subprocess.call(["sleep", "600"])
        if mode == "reset_fails_second" and resets == 1:
            send({"type": "error", "message": "cannot reset twice"})
            sys.exit(4)
        resets += 1
        workers = []
        expect_fleet = True
        send({"type": "ready"})
    elif m["type"] == "event":
        e = m["event"]
        print(f"faulty peer: event seq {e['seq']}", file=sys.stderr, flush=True)
        if e["type"] != "request":
            continue
        if mode == "reset_dies" and resets == 1:
            print("faulty peer: giving up after a reset", file=sys.stderr, flush=True)
            sys.exit(3)
        if mode in ("hang", "escape"):
            subprocess.call(["sleep", "600"])
        elif mode == "dies":
            print("faulty peer: giving up", file=sys.stderr, flush=True)
            sys.exit(3)
        elif mode == "silent_exit":
            sys.exit(0)
        elif mode == "garbage":
            send({"type": "answer", "seq": e["seq"],
                  "reuse": [{"worker": workers[0], "tokens": 1}, {"worker": "w9", "tokens": 1}]})
        elif mode == "not_json":
            sys.stdout.write("reuse: all of it\n")
            sys.stdout.flush()
        elif mode == "wrong_seq":
            send({"type": "answer", "seq": e["seq"] + 1, "reuse": []})
        elif mode == "error":
            send({"type": "error", "message": "index corrupted at " + e["id"]})
            sys.exit(1)
        elif mode == "choice":
            send({"type": "answer", "seq": e["seq"], "choice": workers[0],
                  "scores": {workers[0]: 1}})
        else:
            send({"type": "answer", "seq": e["seq"], "reuse": []})
    elif m["type"] == "end":
        send({"type": "bye"})
        break
    else:
        send({"type": "error", "message": f"unexpected message {m['type']}"})
        sys.exit(1)
