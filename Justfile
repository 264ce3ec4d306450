# kvroute tasks. Each recipe is a plain cargo command; without `just`, run it directly.
# Needs just 1.27 or later (`cargo install --locked just`) for the [doc] attributes that
# `just --list` shows, one sentence per recipe (.ci/run checks that).

fuzz_targets := "parse_trace differential receipt_verify csv_export import_mooncake import_bailian import_weka import_engine_events closed_loop cli_options"

[doc("Every test of the workspace.")]
test:
    cargo test

[doc("The four-policy table for the built-in lab trace.")]
lab:
    cargo run --release

# `cargo bench -p kvroute-bench` gives criterion's statistics for the same workloads.
# The second table builds the peers crate (Dynamo: about 3 minutes the first time).
[doc("Performance figures as one table, each next to its target, then kvroute's index against Dynamo's (minutes on 2 cores).")]
bench:
    cargo run --release -p kvroute-bench --bin bench-table
    cargo run --release -p kvroute-peers --bin peers-bench

[doc("Rewrite the golden ledgers after a reviewed change to SPEC.md.")]
bless:
    UPDATE_EXPECT=1 cargo test -p kvroute-harness --test fixtures

[doc("Core against the oracle on N seeds (all cores).")]
swarm seeds="10000" start="0":
    cargo run --release -- swarm --seeds {{seeds}} --start {{start}}

[doc("The long run: 100,000 seeds of receipts and of the closed loop, then every property with 20,000 cases.")]
soak:
    cargo run --release -- swarm --seeds 100000
    cargo run --release -- swarm --closed-loop --seeds 100000
    PROPTEST_CASES=20000 cargo test --release -p kvroute-harness --test properties

# One build, then the killer tests' executables run directly, `--jobs` at a time (default:
# every core; `cargo run --release -p mutants -- --jobs 1` runs them one by one). The
# runner prints the time of the build, the baseline and the mutant runs.
[doc("Planted bugs: every mutant must be caught by its intended killers.")]
mutants:
    cargo run --release -p mutants

# Needs `cargo install --locked cargo-mutants`. It copies the tree, so it runs from a
# clean clone: a live fuzz corpus changing under the copy makes it fail. The baseline is
# skipped because cargo-mutants 27 runs it in the mutated package only; `cargo test`
# is the baseline.
[doc("A second opinion: cargo-mutants over core's decision code, tested by the harness.")]
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
        --file core/src/route/policy.rs --file core/src/route/candidate/mod.rs \
        --file core/src/route/candidate/dominance.rs \
        --file core/src/route/tenant.rs --file core/src/route/reuse.rs \
        --file core/src/route/state.rs --file core/src/route/cache_index.rs \
        --file 'core/src/simulate/*.rs' --file core/src/output/jsonl.rs \
        -E "::name" --profile mutants --timeout 180 \
        --output "$OLDPWD/target/mutants-auto" \
        -- --lib --test fixtures --test spec_example --test sweep \
        --test closed_loop --test streaming

[doc("Rewrite the committed fuzz seeds from fixtures/ and the sweep's first seeds.")]
fuzz-seed:
    cargo run -p kvroute-harness --example fuzz_seeds

# cargo-fuzz has no --locked of its own: `cargo metadata --locked` refuses a build that
# would rewrite fuzz/Cargo.lock, so a stale lockfile fails here rather than drifting.
[doc("Build every fuzz target on stable, with fuzz/Cargo.lock as committed.")]
fuzz-build:
    cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml > /dev/null
    cd fuzz && cargo fuzz build --sanitizer none

# Needs `cargo install --locked cargo-fuzz`.
[doc("One fuzz target for N seconds, on stable.")]
fuzz target seconds="60": fuzz-build
    mkdir -p fuzz/corpus/{{target}}
    cd fuzz && cargo fuzz run {{target}} --sanitizer none corpus/{{target}} seeds/{{target}} -- -max_total_time={{seconds}}

[doc("Every fuzz target for N seconds each; prints libFuzzer's closing lines.")]
fuzz-all seconds="30": fuzz-build
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

# peers/fuzz is its own workspace (it can link Dynamo); without `--features in-process`
# its `peer_protocol` target drives the `kvroute-peer-dynamo` adapter
# ($KVROUTE_PEER_DYNAMO, else target/release or target/debug) through the protocol only.
[doc("Fuzz Dynamo's adapter through the peer protocol for N seconds, building no Dynamo under the fuzz flags.")]
fuzz-peer seconds="60":
    #!/usr/bin/env bash
    set -euo pipefail
    cargo metadata --locked --format-version 1 --manifest-path peers/fuzz/Cargo.toml > /dev/null
    cd peers/fuzz
    mkdir -p corpus/peer_protocol
    log=$(mktemp)
    cargo fuzz run peer_protocol --sanitizer none corpus/peer_protocol -- -max_total_time={{seconds}} > "$log" 2>&1 || { tail -40 "$log"; exit 1; }
    echo "peer_protocol: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)"
    echo "peer_protocol: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1)"
    rm -f "$log"

[doc("What CI runs (`just ci lint tests` runs only those stages).")]
ci *stages:
    bash .ci/run {{stages}}
