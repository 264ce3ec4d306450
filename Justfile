# kvroute tasks. Each recipe is a plain cargo command; without `just`, run it directly.

# Every test of the workspace.
test:
    cargo test

# The four-policy table for the built-in lab trace.
lab:
    cargo run --release

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

# What CI runs.
ci:
    bash .ci/run
