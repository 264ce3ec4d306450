#!/bin/bash -eu
# ClusterFuzzLite's build step: builds the cargo-fuzz targets of fuzz/ and copies each
# into $OUT with its committed inputs (fuzz/seeds/<target>, fuzz/regressions/<target>)
# as <target>_seed_corpus.zip, the starting corpus ClusterFuzzLite fuzzes from.
#
# In the OSS-Fuzz image (see Dockerfile) $SRC, $OUT and the toolchain come from the image
# (nightly Rust, where cargo fuzz builds with AddressSanitizer, the only sanitizer
# ClusterFuzzLite supports for Rust). .ci/run runs this same script on stable with
# CFLITE_SANITIZER=none and KVROUTE_ROOT set, so it cannot rot unnoticed.
cd "${KVROUTE_ROOT:-$SRC/kvroute}/fuzz"

# The committed lockfile as it is: cargo-fuzz has no --locked of its own, so refuse to
# start a build that would have to rewrite it.
cargo metadata --locked --format-version 1 > /dev/null

sanitizer_args=()
if [ -n "${CFLITE_SANITIZER:-}" ]; then
    sanitizer_args=(--sanitizer "$CFLITE_SANITIZER")
fi
cargo fuzz build "${sanitizer_args[@]}"

built=target/x86_64-unknown-linux-gnu/release
for target in $(cargo fuzz list); do
    cp "$built/$target" "$OUT/"
    corpus=$(mktemp -d)
    for dir in seeds regressions; do
        if [ -d "$dir/$target" ]; then
            cp "$dir/$target"/* "$corpus/"
        fi
    done
    rm -f "$OUT/${target}_seed_corpus.zip"
    (cd "$corpus" && zip -q -r "$OUT/${target}_seed_corpus.zip" .)
    rm -rf "$corpus"
done
