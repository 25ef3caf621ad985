#!/usr/bin/env bash
# Builds the C++ examples of the user's guide (README.md and the docs/ pages it links as the guide:
# launching.md, cli.md, training.md, benchmarks.md) and of include/elastra/worker.h's comment, as
# written, against the installed package (find_package(elastra) in a temporary prefix): a user
# copies them from there, so each must compile and link. Fails, showing the compiler's output, when one does
# not.
set -euo pipefail
BUILD=$1
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$HERE/consumer_flags.sh"
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
# Every ```cpp block of these pages must be an example (extract_examples.py refuses one without a
# name), so a page of the guide is listed here whether or not it has C++ today.
guide=(README.md docs/launching.md docs/cli.md docs/training.md docs/benchmarks.md)
names=$(python3 "$HERE/extract_examples.py" "$TMP/examples" "${guide[@]/#/$ROOT/}" \
  "$ROOT/include/elastra/worker.h")
if ! cmake -S "$HERE/examples" -B "$TMP/build" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" \
    -DEXAMPLES_DIR="$TMP/examples" "${CONSUMER_FLAGS[@]}" > "$TMP/configure.log" 2>&1; then
  cat "$TMP/configure.log"
  exit 1
fi
if ! cmake --build "$TMP/build" > "$TMP/build.log" 2>&1; then
  cat "$TMP/build.log"
  exit 1
fi
echo "examples ok: $names"
