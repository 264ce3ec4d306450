# kvroute tasks. Each recipe is a plain cargo command; without `just`, run it directly.

fuzz_targets := "parse_trace differential receipt_verify csv_export import_mooncake closed_loop"

# Every test of the workspace.
test:
    cargo test

# The four-policy table for the built-in lab trace.
lab:
    cargo run --release

# Performance figures as one table, each next to its target (a few minutes on 2 cores).
# `cargo bench -p kvroute-bench` gives criterion's statistics for the same workloads.
bench:
    cargo run --release -p kvroute-bench --bin bench-table

# Rewrite the golden ledgers after a reviewed change to SPEC.md.
bless:
    UPDATE_EXPECT=1 cargo test -p kvroute-harness --test fixtures

# Core against the oracle on N seeds (all cores).
swarm seeds="10000" start="0":
    cargo run --release -- swarm --seeds {{seeds}} --start {{start}}

# The long run: 100,000 seeds, then every property with 20,000 cases.
soak:
    cargo run --release -- swarm --seeds 100000
    PROPTEST_CASES=20000 cargo test --release -p kvroute-harness --test properties

# Planted bugs: every mutant must be caught by its intended killers.
mutants:
    cargo run --release -p mutants

# A second opinion: cargo-mutants over core's decision code, tested by the harness
# (needs `cargo install --locked cargo-mutants`). It copies the tree, so it runs from a
# clean clone: a live fuzz corpus changing under the copy makes it fail. The baseline is
# skipped because cargo-mutants 27 runs it in the mutated package only; `cargo test`
# is the baseline.
mutants-auto:
    #!/usr/bin/env bash
    set -euo pipefail
    scratch=$(mktemp -d)
    clone="$scratch/main"
    git clone -q . "$clone"
    # The closed-loop tests read the Mooncake trace from ../shared, beside the checkout.
    ln -s "$(cd .. && pwd)/shared" "$scratch/shared"
    cd "$clone"
    cargo mutants --package kvroute-core --test-package kvroute-core \
        --test-package kvroute-harness --baseline=skip \
        --file core/src/route/policy.rs --file core/src/route/candidate.rs \
        --file core/src/route/tenant.rs --file core/src/route/reuse.rs \
        --file core/src/route/state.rs --file core/src/route/cache_index.rs \
        --file 'core/src/simulate/*.rs' --file core/src/output/jsonl.rs \
        -E "::name" --profile mutants --timeout 180 \
        --output "$OLDPWD/target/mutants-auto" \
        -- --lib --test fixtures --test spec_example --test sweep --test verify \
        --test closed_loop --test streaming

# Rewrite the committed fuzz seeds from fixtures/ and the sweep's first seeds.
fuzz-seed:
    cargo run -p kvroute-harness --example fuzz_seeds

# One fuzz target for N seconds, on stable (needs `cargo install --locked cargo-fuzz`).
fuzz target seconds="60":
    mkdir -p fuzz/corpus/{{target}}
    cd fuzz && cargo fuzz run {{target}} --sanitizer none corpus/{{target}} seeds/{{target}} -- -max_total_time={{seconds}}

# Every fuzz target for N seconds each; prints libFuzzer's closing lines.
fuzz-all seconds="30":
    #!/usr/bin/env bash
    set -euo pipefail
    cd fuzz
    for target in {{fuzz_targets}}; do
        mkdir -p corpus/$target
        log=$(mktemp)
        cargo fuzz run $target --sanitizer none corpus/$target seeds/$target -- -max_total_time={{seconds}} > "$log" 2>&1 || { tail -40 "$log"; exit 1; }
        echo "$target: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)"
        echo "$target: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1)"
    done

# What CI runs.
ci:
    bash .ci/run
