#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then configures, builds and runs a tiny outside
# project that does find_package(elastra) and links elastra::worker.
set -euo pipefail
BUILD=$1
SRC=$(cd "$(dirname "$0")" && pwd)/consumer
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "$0")/consumer_flags.sh"
cmake --install "$BUILD" --prefix "$TMP/prefix" > "$TMP/install.log"
cmake -S "$SRC" -B "$TMP/build" -G Ninja -DCMAKE_PREFIX_PATH="$TMP/prefix" "${CONSUMER_FLAGS[@]}" \
  > "$TMP/configure.log"
cmake --build "$TMP/build" > "$TMP/build.log"
env -u ELASTRA_COORDINATOR -u ELASTRA_STATE_DIR "$TMP/build/consumer"
