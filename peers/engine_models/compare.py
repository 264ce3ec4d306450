"""kvroute's closed-loop engine model beside two independent ones, on one Mooncake trace.

    python compare.py --kvroute target/release/kvroute --trace MOONCAKE.jsonl \\
        [--lines N] [--workers 4,8] [--cache-blocks 512,16384] \\
        [--lru-capacities 2048,8192,32768] [--dynamo-kv-runs 1] [--idle-spacing-ms S] \\
        [--only dynamo|kvcache]

1. Beside NVIDIA Dynamo's offline replay: the same trace, fleet size, block size and
   blocks per worker, round-robin and KV-aware; one table of reuse, TTFT percentiles
   and goodput. Round-robin makes no choice, so its reuse must agree within
   `--reuse-tolerance`. With `--idle-spacing-ms S` request k arrives at k * S ms
   instead, every request finds both fleets idle, the routers' load terms are zero,
   and the KV-aware policies must agree within the same tolerance too.
2. Beside KVCache.AI's kvcache-simulator: one worker, exact LRU at each capacity and
   the never-evicting ceiling; the hit tokens must be equal. Belady is printed as a
   bound kvroute does not model.

Exits 1 when an agreement target is missed, after printing every table.
docs/engine-models.md says what each figure is and why the models differ.
"""

import argparse
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import kvroute_side  # noqa: E402

# kvroute's policies beside Dynamo's two router modes: round_robin makes Dynamo's
# choices exactly; cache_plus_load, like Dynamo's KV router, prices reuse against load.
# (longest_prefix has no load term and sends the cold fleet's ties to one worker.)
POLICIES = {"round_robin": ["round_robin"], "kv_router": ["cache_plus_load"]}


def whole_block_reuse(reused, prompt, block_tokens):
    """What Dynamo's mocker would count of `reused` tokens: whole blocks only, and never
    the prompt's last token (a vLLM prefix-cache hit leaves one token to compute)."""
    return block_tokens * (min(reused, prompt - 1) // block_tokens) if prompt else 0


def percentile(values, quantile):
    """Nearest rank, the rule Dynamo's summary uses for its TTFT percentiles."""
    ordered = sorted(values)
    rank = max(1, -(-round(quantile * 1000) * len(ordered) // 1000))
    return ordered[rank - 1]


def row(model, policy, reuse, ttft_ms, good):
    p50, p90, p99 = (percentile(ttft_ms, q) for q in (0.5, 0.9, 0.99))
    return (f"{model:<8} {policy:<16} {reuse:>7.4f} {p50:>9.1f} {p90:>9.1f} {p99:>9.1f}"
            f" {100 * good / len(ttft_ms):>7.1f}")


def dynamo_cell(args, trace, kvroute_trace, workers, blocks, scratch):
    """Prints one (workers, blocks) cell of table 1; returns its checks, each (passed, what)."""
    import dynamo_side

    print(f"\n{workers} workers, {blocks} blocks of {args.block_tokens} tokens a worker,"
          f" goodput = TTFT <= {args.sla_ttft_ms:g} ms")
    print(f"{'model':<8} {'policy':<16} {'reuse':>7} {'ttft_p50':>9} {'ttft_p90':>9}"
          f" {'ttft_p99':>9} {'good_%':>7}")
    wanted = [p for ps in POLICIES.values() for p in ps]
    _, kv_runs = kvroute_side.closed_loop(args.kvroute, kvroute_trace, workers, blocks,
                                          scratch, wanted)
    checks = []
    for mode, policies in POLICIES.items():
        # The KV router breaks cost ties at random, so each of its replays may differ.
        dyn_reuses = []
        for _ in range(1 if mode == "round_robin" else args.dynamo_kv_runs):
            dyn = dynamo_side.replay(trace, workers, blocks, args.block_tokens, mode,
                                     args.sla_ttft_ms)
            dyn_reuse = dyn.summary["first_admission_prefix_cache_reused_ratio"]
            dyn_reuses.append(dyn_reuse)
            print(row("dynamo", mode, dyn_reuse, dyn.ttft_ms,
                      dyn.summary["goodput_completed_requests"]))
        prompt = sum(kv_runs[policies[0]].prompt_tokens)
        for policy in policies:
            run = kv_runs[policy]
            reused = sum(whole_block_reuse(r, p, args.block_tokens)
                         for r, p in zip(run.engine_reused_tokens, run.prompt_tokens))
            good = sum(1 for t in run.ttft_ms if t <= args.sla_ttft_ms)
            print(row("kvroute", policy, reused / prompt, run.ttft_ms, good))
            if mode == "round_robin":
                checks += _round_robin_check(args, trace, run, dyn, reused / prompt, dyn_reuse)
            elif args.idle_spacing_ms:
                checks.append(_idle_check(args, run, dyn, reused / prompt, dyn_reuses))
    return checks


def _idle_check(args, run, dyn, reuse, dyn_reuses):
    """With idle fleets both KV-aware routers pick the longest cached prefix, so their
    reuse may differ only by ties and the engines' own differences. (On the Mooncake
    trace every prompt starts with the same block, so both then send every request to
    the worker that holds it: the line says how many workers each used.)"""
    gap = abs(reuse - sum(dyn_reuses) / len(dyn_reuses))
    verdict = "ok" if gap <= args.reuse_tolerance else "MISSED"
    print(f"{run.policy} on idle fleets: |reuse gap| to Dynamo's mean {gap:.4f}"
          f" (target <= {args.reuse_tolerance}) {verdict}; workers used: kvroute"
          f" {len(set(run.worker))}, Dynamo {len(set(dyn.worker))}")
    return gap <= args.reuse_tolerance, f"{run.policy} reuse gap {gap:.4f} on idle fleets"


def _round_robin_check(args, trace, run, dyn, reuse, dyn_reuse):
    import differences
    import dynamo_side

    same_worker = dynamo_side.same_in_groups(dyn.key, run.worker, dyn.worker)
    whole = [whole_block_reuse(r, p, args.block_tokens)
             for r, p in zip(run.engine_reused_tokens, run.prompt_tokens)]
    same_reuse = dynamo_side.same_in_groups(dyn.key, whole, dyn.first_admission_reused_tokens)
    gap = abs(reuse - dyn_reuse)
    verdict = "ok" if gap <= args.reuse_tolerance else "MISSED"
    print(f"round_robin: |reuse gap| {gap:.4f} (target <= {args.reuse_tolerance}) {verdict};"
          f" same worker for {same_worker} of {len(run.worker)} requests,"
          f" same reuse for {same_reuse}")
    if same_reuse != len(whole):
        differences.explain(trace, run, dyn, whole, args.block_tokens)
    return [(gap <= args.reuse_tolerance, f"round_robin reuse gap {gap:.4f}"),
            (same_worker == len(run.worker), "round_robin places each request where Dynamo does")]


def kvcache_table(args, lines, scratch):
    """Prints table 2; returns its checks, each (passed, what)."""
    import kvcache_side

    plan, rows = kvcache_side.compare(args.kvroute, lines, args.block_tokens,
                                      args.lru_capacities, scratch)
    print(f"\nOne worker, {plan.request_count} requests, the first {plan.warmup_requests}"
          f" warm up; {plan.total_measured_tokens} measured prompt tokens,"
          f" {plan.unique_blocks} distinct blocks")
    print(f"{'blocks':>8} {'kvroute_lru':>12} {'oracle_lru':>12} {'equal':>6} {'belady':>8}")
    checks = []
    for r in rows:
        label = "ceiling" if r.oracle_mode == "ceiling" else "lru"
        equal = r.kvroute_hit_tokens == r.oracle_hit_tokens
        print(f"{r.cache_blocks:>8} {r.kvroute_hit_tokens / r.measured_tokens:>12.6f}"
              f" {r.oracle_hit_tokens / r.measured_tokens:>12.6f} {'yes' if equal else 'NO':>6}"
              f" {r.belady_hit_tokens / r.measured_tokens:>8.4f}  ({label}: kvroute"
              f" {r.kvroute_hit_tokens}, oracle {r.oracle_hit_tokens} hit tokens)")
        if r.oracle_mode not in ("fixed_window", "ceiling"):
            checks.append((False, f"{r.cache_blocks} blocks: the oracle's cache is not full"
                           f" before the measured requests ({r.oracle_mode}); choose fewer"))
        else:
            checks.append((equal, f"{r.cache_blocks} blocks: kvroute {r.kvroute_hit_tokens}"
                           f" hit tokens, the oracle {r.oracle_hit_tokens}"))
    return checks


def _arriving(line, timestamp):
    request = json.loads(line)
    request["timestamp"] = timestamp
    return json.dumps(request) + "\n"


def arguments():
    numbers = lambda text: [int(n) for n in text.split(",")]  # noqa: E731
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kvroute", required=True, type=pathlib.Path)
    parser.add_argument("--trace", required=True, type=pathlib.Path, help="Mooncake JSONL")
    parser.add_argument("--lines", type=int, default=0, help="only the first N lines (0: all)")
    parser.add_argument("--workers", type=numbers, default=[4, 8])
    parser.add_argument("--cache-blocks", type=numbers, default=[512, 16384])
    parser.add_argument("--lru-capacities", type=numbers, default=[2048, 8192, 32768])
    parser.add_argument("--block-tokens", type=int, default=512)
    parser.add_argument("--sla-ttft-ms", type=float, default=2000.0)
    parser.add_argument("--reuse-tolerance", type=float, default=0.005,
                        help="the largest reuse gap round-robin (and, with"
                        " --idle-spacing-ms, the KV-aware policies) may show")
    parser.add_argument("--idle-spacing-ms", type=int, default=0,
                        help="table 1 with request k arriving at k * this many ms, so that"
                        " every request finds both fleets idle (0: the trace's own times)")
    parser.add_argument("--dynamo-kv-runs", type=int, default=1,
                        help="replays of Dynamo's KV router a cell (its ties are random)")
    parser.add_argument("--only", choices=["dynamo", "kvcache"])
    return parser.parse_args()


def main():
    args = arguments()
    with open(args.trace) as source:
        lines = [line for line in source if line.strip()]
    if args.lines:
        lines = lines[: args.lines]
    timed = [_arriving(line, k * args.idle_spacing_ms) for k, line in enumerate(lines)] \
        if args.idle_spacing_ms else lines
    checks = []
    with tempfile.TemporaryDirectory(prefix="engine-models-") as scratch:
        scratch = pathlib.Path(scratch)
        trace = scratch / "mooncake.jsonl"
        trace.write_text("".join(timed))
        if args.only != "kvcache":
            kvroute_trace = kvroute_side.import_mooncake(args.kvroute, trace, scratch / "m.json")
            print(f"Table 1: kvroute simulate --lag 0 beside Dynamo's replay, {len(lines)} requests"
                  + (f" {args.idle_spacing_ms} ms apart" if args.idle_spacing_ms else ""))
            for workers in args.workers:
                for blocks in args.cache_blocks:
                    cell = scratch / f"w{workers}-b{blocks}"
                    cell.mkdir()
                    checks += dynamo_cell(args, trace, kvroute_trace, workers, blocks, cell)
        if args.only != "dynamo":
            print("\nTable 2: kvroute's engine model beside kvcache-simulator (hit rates)")
            (scratch / "kvcache").mkdir()
            checks += kvcache_table(args, [line.rstrip("\n") for line in lines], scratch / "kvcache")
    failed = [what for passed, what in checks if not passed]
    for what in failed:
        print(f"missed: {what}")
    print(f"\nengine_models: {len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, RuntimeError, ValueError) as error:
        # A missing trace, a kvroute that fails, a line the replay cannot place.
        print(f"compare.py: {error}", file=sys.stderr)
        sys.exit(2)
