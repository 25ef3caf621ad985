#!/usr/bin/env bash
# Keeps the layers of docs/architecture.md: each folder is one library that may include only the
# folders (and the public headers of the folders) below it. Prints every include that crosses a
# layer the wrong way and exits 1; exits 0 when there is none.
#
#   check_layers.sh SOURCE_ROOT      check the tree
#   check_layers.sh --self-test      check that the check fails on a tree that breaks a rule
set -euo pipefail

# What each layer may include, besides itself. The order is the build order (bottom up).
declare -A allowed=(
  [common]=""
  [collectives]="common"
  [state]="common collectives"
  [checkpoint]="common"
  # Pure computation: layouts, the cost and memory model, rank assignment, model descriptions.
  [planner]="common"
  # The job's record: the file, its records, the events read back from it.
  [journal]="common"
  [coordinator]="common checkpoint planner journal"
  # The HTTP API: a client of the coordinator's socket; its events come through an interface.
  [http]="common"
  [worker]="common collectives state checkpoint"
  [launch]="common collectives state checkpoint planner journal coordinator http worker"
  [examples]="torch_interop"
  # elastra::torch (LibTorch interop): a user of the public headers, like the examples.
  [torch_interop]=""
  [testbed]="common"
)
# The layer that implements each public header (include/elastra/). A new public header must be
# added here.
declare -A owner=(
  [status.h]=common [layout.h]=common [sharding.h]=common [data_type.h]=common [config.h]=common [host_bytes.h]=common
  [communicator.h]=collectives
  [tensor_collection.h]=state [device_buffer.h]=state
  [worker.h]=worker
)
# Headers no public header may include: users build against <elastra/...> without these.
forbidden_in_public='zmq|nccl|mpi\.h|gloo/|cuda|torch/|cereal/'

check_tree() {
  local root=$1 failures=0
  may_use() {  # may_use LAYER TARGET_LAYER
    [ "$1" = "$2" ] && return 0
    local l
    for l in ${allowed[$1]}; do [ "$l" = "$2" ] && return 0; done
    return 1
  }
  report() { echo "$1"; failures=$((failures + 1)); }

  local layer file line target header dep
  for layer in "${!allowed[@]}"; do
    [ -d "$root/$layer" ] || continue
    while IFS= read -r file; do
      while IFS=: read -r line target; do
        dep=${target%%/*}
        if [ "$dep" = elastra ]; then
          header=${target#elastra/}
          [ -n "${owner[$header]:-}" ] || continue  # checked below, with the public headers
          dep=${owner[$header]}
          # Examples and elastra::torch are users: any public header is theirs to include.
          [ "$layer" = examples ] || [ "$layer" = torch_interop ] && continue
        elif [ -z "${allowed[$dep]+x}" ]; then
          continue  # not a layer (a system header in quotes, a generated file)
        fi
        may_use "$layer" "$dep" ||
          report "${file#$root/}:$line includes \"$target\" (layer $dep; $layer may include: ${allowed[$layer]:-only public headers})"
      done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"' "$file" |
               sed -E 's/^([0-9]+):.*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1:\2/')
    done < <(find "$root/$layer" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \))
  done

  if [ -d "$root/include/elastra" ]; then
    while IFS= read -r file; do
      header=$(basename "$file")
      if [ -z "${owner[$header]:-}" ]; then
        report "include/elastra/$header has no owning layer in tests/layers/check_layers.sh"
        continue
      fi
      while IFS=: read -r line target; do
        if [[ "$target" == elastra/* ]]; then
          dep=${owner[${target#elastra/}]:-}
          [ -n "$dep" ] || continue
          may_use "${owner[$header]}" "$dep" ||
            report "include/elastra/$header:$line includes \"$target\" (layer $dep above ${owner[$header]})"
        elif grep -qE "$forbidden_in_public" <<<"$target"; then
          report "include/elastra/$header:$line includes <$target>: public headers stay free of it"
        fi
      done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+["<]' "$file" |
               sed -E 's/^([0-9]+):.*#[[:space:]]*include[[:space:]]+["<]([^">]+)[">].*/\1:\2/')
    done < <(find "$root/include/elastra" -type f -name '*.h')
  fi

  if [ "$failures" -gt 0 ]; then
    echo "$failures include(s) cross a layer the wrong way (docs/architecture.md)"
    return 1
  fi
  echo "layers: no include crosses a layer the wrong way"
}

if [ "${1:-}" = --self-test ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/base/common" "$tmp/base/planner" "$tmp/base/journal" "$tmp/base/http" \
    "$tmp/base/coordinator" "$tmp/base/worker" \
    "$tmp/base/include/elastra"
  echo '#include "common/status.h"' >"$tmp/base/worker/a.cc"
  echo '#include "elastra/status.h"' >"$tmp/base/include/elastra/worker.h"
  check_tree "$tmp/base" >/dev/null || { echo "self-test: a clean tree was refused"; exit 1; }
  bad=(
    'coordinator/b.cc:#include "worker/a.h"'
    'common/c.h:#include "coordinator/x.h"'
    'planner/e.cc:#include "coordinator/x.h"'
    'journal/f.cc:#include "checkpoint/x.h"'
    'http/g.cc:#include "journal/x.h"'
    'coordinator/h.cc:#include "http/x.h"'
    'coordinator/d.cc:#include "elastra/worker.h"'
    'include/elastra/status.h:#include <zmq.h>'
    'include/elastra/status.h:#include "elastra/worker.h"'
    'include/elastra/new_header.h:#include "elastra/status.h"'
  )
  for case in "${bad[@]}"; do
    rm -rf "$tmp/case"
    cp -r "$tmp/base" "$tmp/case"
    path=${case%%:*}
    echo "${case#*:}" >>"$tmp/case/$path"
    if check_tree "$tmp/case" >/dev/null; then
      echo "self-test: not caught: $case"
      exit 1
    fi
  done
  echo "self-test: ${#bad[@]} crossing includes caught, the clean tree passes"
  exit 0
fi

check_tree "${1:?usage: check_layers.sh SOURCE_ROOT | --self-test}"
