"""kvroute's engine model beside KVCache.AI's hit-rate oracle (kvcache-simulator 0.1.3).

The oracle replays requests in file order through one cache of a given number of
blocks, each request looked up and then stored before the next, and measures the
tokens of each request's longest cached prefix over the requests after a warm-up
(the first `floor(n / 2)`). Its `lru` evicts the least recently used leaf of the prefix
trie, `optimal` (Belady) the leaf used furthest ahead, and `ceiling` is the hit rate of
a cache that never evicts.

kvroute's engine model (SPEC.md §11) is put in the same situation: one worker, the same
capacity in blocks (`--cache-blocks`; every Mooncake segment is one block), and the
requests spaced `max prompt + 1` ticks apart, so that each prefill (at least one token
a tick) completes and stores before the next request is placed. kvroute's hit over the
measured requests is then what the engine reused over the whole trace less what it
reused over the warm-up requests alone: a run is causal, so the warm-up prefix's run is
the whole run's first half.
"""

import json
import pathlib
from dataclasses import dataclass

from kvcache_sim.plan import build_execution_plan
from kvcache_sim.policies import simulate_ceiling, simulate_policy
from kvcache_sim.trace import parse_trace_lines

import kvroute_side

WARMUP_FRACTION = 0.5


@dataclass
class Row:
    """One capacity: hit tokens over the measured requests, both models."""

    cache_blocks: int
    measured_tokens: int
    kvroute_hit_tokens: int
    oracle_hit_tokens: int
    oracle_mode: str
    belady_hit_tokens: int


def compare(binary, lines, block_tokens, capacities, scratch):
    """Rows for each capacity, then the never-evicting row (`capacities` + ceiling)."""
    scratch = pathlib.Path(scratch)
    plan = build_execution_plan(parse_trace_lines(lines, block_size=block_tokens),
                                WARMUP_FRACTION)
    whole = _spaced(binary, lines, scratch / "whole")
    warmup = (_spaced(binary, lines[: plan.warmup_requests], scratch / "warmup")
              if plan.warmup_requests else None)
    rows = []
    for blocks in capacities:
        lru = simulate_policy(plan, "lru", blocks)
        belady = simulate_policy(plan, "optimal", blocks)
        rows.append(Row(blocks, plan.total_measured_tokens,
                        _measured_hit(binary, whole, warmup, blocks, scratch),
                        lru.hitTokens, lru.measurementMode, belady.hitTokens))
    ceiling = simulate_ceiling(plan)
    # Every block the trace names fits: kvroute never evicts.
    every_block = max(1, len({block for line in lines for block in json.loads(line)["hash_ids"]}))
    rows.append(Row(every_block, plan.total_measured_tokens,
                    _measured_hit(binary, whole, warmup, every_block, scratch),
                    ceiling.hitTokens, "ceiling", ceiling.hitTokens))
    return plan, rows


def _spaced(binary, lines, stem):
    """The lines with timestamps `k * (max prompt + 1)`, imported as a kvroute trace."""
    spacing = 1 + max(json.loads(line)["input_length"] for line in lines)
    mooncake = stem.with_suffix(".jsonl")
    with open(mooncake, "w") as out:
        for index, line in enumerate(lines):
            request = json.loads(line)
            request["timestamp"] = index * spacing
            out.write(json.dumps(request) + "\n")
    return kvroute_side.import_mooncake(binary, mooncake, stem.with_suffix(".json"))


def _measured_hit(binary, whole, warmup, blocks, scratch):
    def reused(trace):
        table = json.loads(kvroute_side.kvroute(
            binary, "simulate", trace, "--workers", 1, "--cache-blocks", blocks,
            "--lag", 0, "--format", "json"))
        # One worker: every policy makes the same choices; take the first.
        return kvroute_side.engine_reused_total(table["runs"][0])

    return reused(whole) - (reused(warmup) if warmup else 0)
