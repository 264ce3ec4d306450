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

# What CI runs.
ci:
    bash .ci/run
