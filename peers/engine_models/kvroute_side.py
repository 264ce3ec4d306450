"""kvroute's closed loop as the comparisons read it.

`kvroute simulate` prints totals only, so the per-request figures are taken from what it
writes beside them: each routed request's TTFT from `--completions-out` (SPEC.md §14.4)
and its reuse from the receipt of `kvroute replay` on `--events-out`'s trace of that
policy (SPEC.md §11: that replay reproduces the run). The receipt holds the router's
`reuse`; the engine reused `held`, and the run's `phantom + missed` is
`sum |reuse - held|` (SPEC.md §11.1), so a run with both 0 has `reuse == held` for every
request, and `closed_loop` refuses any other run instead of reporting the router's view
as the engine's.
"""

import json
import pathlib
import subprocess
from dataclasses import dataclass


@dataclass
class Run:
    """One policy's closed-loop run, per request in trace order."""

    policy: str
    prompt_tokens: list
    engine_reused_tokens: list
    ttft_ms: list
    worker: list


def kvroute(binary, *args):
    """Runs kvroute and returns its stdout; a failure raises with its stderr."""
    done = subprocess.run([str(binary), *map(str, args)], capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"kvroute {' '.join(map(str, args))} exited {done.returncode}: "
            + done.stderr.decode(errors="replace")[-2000:]
        )
    return done.stdout


def import_mooncake(binary, mooncake, out):
    kvroute(binary, "import", "mooncake", mooncake, "-o", out)
    return out


def closed_loop(binary, trace, workers, cache_blocks, scratch, policies):
    """Simulates `trace` at lag 0 and returns the totals and a Run per asked policy."""
    scratch = pathlib.Path(scratch)
    events, completions = scratch / "events", scratch / "completions"
    table = json.loads(
        kvroute(
            binary, "simulate", trace, "--workers", workers, "--cache-blocks",
            cache_blocks, "--lag", 0, "--format", "json",
            "--events-out", events, "--completions-out", completions,
        )
    )
    runs = {}
    for row in table["runs"]:
        if row["policy"] not in policies:
            continue
        if row["phantom"] or row["missed"]:
            raise RuntimeError(
                f"{row['policy']}: phantom {row['phantom']} missed {row['missed']} at lag 0,"
                " so the receipt's reuse is not the engine's"
            )
        receipt = scratch / f"{row['policy']}.receipt.jsonl"
        kvroute(binary, "replay", events / f"{row['policy']}.trace.json",
                "--format", "jsonl", "--out", receipt)
        runs[row["policy"]] = _run(row["policy"], receipt,
                                   completions / f"{row['policy']}.completions.jsonl")
    return table, runs


def engine_reused_total(row):
    """What the engines reused over a run: `reused - phantom + missed` (SPEC.md §11.1)."""
    return row["reused"] - row["phantom"] + row["missed"]


def _run(policy, receipt, completions):
    reuse, worker = _chosen(receipt, policy)
    prompt, ttft = {}, {}
    with open(completions) as lines:
        for line in lines:
            record = json.loads(line)
            index = _request_index(record["metadata"]["x_request_id"])
            prompt[index] = record["metrics"]["input_sequence_length"]["value"]
            ttft[index] = record["metrics"]["time_to_first_token"]["value"]
    order = sorted(prompt)
    if order != sorted(reuse):
        raise RuntimeError(f"{policy}: the receipt and the completion records name different requests")
    return Run(policy, [prompt[i] for i in order], [reuse[i] for i in order],
               [ttft[i] for i in order], [worker[i] for i in order])


def _chosen(receipt, policy):
    """Request index -> the chosen row's reuse, and -> the chosen worker's index (its id
    less the `w`, SPEC.md §10.1), over the decisions of `policy`'s run."""
    reuse, worker = {}, {}
    with open(receipt) as lines:
        for line in lines:
            member = json.loads(line)
            if member.get("policy") != policy or "decisions" not in member:
                continue
            decision = member["decisions"]
            chosen = [r for r in decision["candidates"] if r["worker"] == decision["chosen"]]
            if chosen:
                index = _request_index(decision["request"])
                reuse[index] = chosen[0]["reuse"]
                worker[index] = int(decision["chosen"][1:])
    return reuse, worker


def _request_index(request_id):
    """`r<k>` (SPEC.md §10.1, k counting lines from 1) -> the 0-based line index."""
    return int(request_id[1:]) - 1
