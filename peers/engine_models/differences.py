"""Why a round-robin request's reuse differs between kvroute and Dynamo.

Both fleets place request `k` on worker `k mod N`, so each difference is one of the
engines'. Three classes are told apart here, from the trace and kvroute's own records
(docs/engine-models.md has a reproducer of each cause, in `repro/`):

- `in flight`: Dynamo reused more, and an earlier request on the same worker shares
  more of this prompt's blocks than kvroute reused but had not finished its prefill in
  kvroute's model when this one was placed. kvroute's engine reuses what completed
  prefills stored, looked up at placement (SPEC.md §11 *Prefill*); Dynamo's block
  manager looks up at admission and shares a block another running request holds.
- `dynamo less`: Dynamo reused less. Its `num_gpu_blocks` holds the running requests'
  blocks and the blocks their decoded tokens fill (cached like prompt blocks), where
  kvroute's `--cache-blocks` holds only stored prompt segments, so at the same
  capacity Dynamo evicts sooner; or the two LRUs ordered the blocks differently.
- `dynamo more`: Dynamo reused more with no such request in flight: the two LRUs
  ordered the blocks differently. kvroute stamps a prompt's blocks when its prefill
  completes; Dynamo's block manager, as vLLM's, when the request finishes decoding and
  frees them, so a long decode keeps its blocks newer there.
"""

import collections
import json


def explain(trace, run, dyn, whole, block_tokens, examples=3):
    """Prints the count of each cause and a few requests of each."""
    requests = [json.loads(line) for line in open(trace)]
    duplicated = {k for k, n in collections.Counter(dyn.key).items() if n > 1}
    causes = collections.defaultdict(list)
    for index, (ours, theirs) in enumerate(zip(whole, dyn.first_admission_reused_tokens)):
        if ours == theirs or dyn.key[index] in duplicated:
            continue
        if theirs < ours:
            cause = "dynamo less"
        elif _in_flight(requests, run, index, ours // block_tokens):
            cause = "in flight"
        else:
            cause = "dynamo more"
        causes[cause].append((index + 1, requests[index]["input_length"], ours, theirs))
    for cause, rows in sorted(causes.items()):
        shown = ", ".join(f"line {n} ({p} tokens: kvroute {a}, dynamo {b})"
                          for n, p, a, b in rows[:examples])
        print(f"  {cause}: {len(rows)} requests; e.g. {shown}")


def _in_flight(requests, run, index, reused_blocks):
    """An earlier request on this worker shares more blocks than were reused and its
    prefill completed after this request was placed (kvroute's TTFT is queue + prefill)."""
    placed = requests[index]["timestamp"]
    blocks = requests[index]["hash_ids"]
    for earlier in range(index - 1, -1, -1):
        if run.worker[earlier] != run.worker[index]:
            continue
        done = requests[earlier]["timestamp"] + run.ttft_ms[earlier]
        if done > placed and _shared(blocks, requests[earlier]["hash_ids"]) > reused_blocks:
            return True
    return False


def _shared(a, b):
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count
