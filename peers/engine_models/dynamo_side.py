"""NVIDIA Dynamo's offline trace replay (`dynamo.replay`, ai-dynamo 1.6.1) as the
comparison reads it.

The replay runs Dynamo's mocker engine (a vLLM-like scheduler and block manager with a
timing model) behind its round-robin or KV router over a Mooncake trace. Its per-request
rows come back in an order of their own, without the trace line, so `replay` puts them
back in trace order by (arrival, input length, output length). Requests alike in all
three cannot be told apart (the Mooncake conversation trace has one such pair): their
rows are taken in the order the replay lists them, and a figure compared request by
request is compared within each such group as a multiset (`same_in_groups`).
"""

import collections
import json
import os
from dataclasses import dataclass

# The native core logs each routing decision at INFO; a run of the Mooncake trace would
# put thousands of lines on stderr.
os.environ.setdefault("DYN_LOG", "warn")

from dynamo.replay import run_trace_replay  # noqa: E402  (after DYN_LOG)


@dataclass
class Run:
    """One replay, per request in trace order, and Dynamo's own summary."""

    router_mode: str
    summary: dict
    first_admission_reused_tokens: list
    ttft_ms: list
    worker: list
    key: list


def replay(trace, workers, cache_blocks, block_tokens, router_mode, sla_ttft_ms):
    """Replays `trace` on `workers` mocker engines of `cache_blocks` blocks each."""
    report = run_trace_replay(
        str(trace),
        extra_engine_args={"engine": {"block_size": block_tokens, "num_gpu_blocks": cache_blocks}},
        num_workers=workers,
        router_mode=router_mode,
        trace_block_size=block_tokens,
        capture_per_request=True,
        sla_ttft_ms=sla_ttft_ms,
    )
    keys, rows = _in_trace_order(trace, report.per_request)
    return Run(
        router_mode,
        dict(report.summary),
        [row["admission_history"][0]["reused_input_tokens"] for row in rows],
        [row["ttft_ms"] for row in rows],
        [row["routing_history"][0]["logical_worker_id"] for row in rows],
        keys,
    )


def same_in_groups(keys, ours, theirs):
    """How many requests have the same figure in `ours` as in `theirs`, per request, where
    requests of one key count as one multiset (the replay cannot tell them apart)."""
    groups = collections.defaultdict(lambda: (collections.Counter(), collections.Counter()))
    for key, a, b in zip(keys, ours, theirs):
        groups[key][0][a] += 1
        groups[key][1][b] += 1
    return sum(sum((a & b).values()) for a, b in groups.values())


def _in_trace_order(trace, per_request):
    by_key = collections.defaultdict(collections.deque)
    for row in per_request:
        key = (round(row["arrival_time_ms"]), row["input_length"], row["requested_output_length"])
        by_key[key].append(row)
    keys, rows = [], []
    with open(trace) as lines:
        for number, line in enumerate(lines, 1):
            request = json.loads(line)
            key = (request["timestamp"], request["input_length"], request["output_length"])
            if not by_key[key]:
                raise RuntimeError(f"{trace}:{number}: the replay reported no request {key}")
            keys.append(key)
            rows.append(by_key[key].popleft())
    return keys, rows
