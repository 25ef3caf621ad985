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
  # The wire protocol: messages, codec, keys, net, the control client, the coordinator process.
  [protocol]="common"
  [collectives]="common"
  # The reshard planner (pure region math) and each generation's state move built from it.
  [state/plan]="common protocol"
  [state]="common protocol collectives state/plan"
  [checkpoint]="common"
  # Pure computation: layouts, the cost and memory model, rank assignment, model descriptions.
  [planner]="common"
  # The job's record: the file, its records, the events read back from it.
  [journal]="common protocol"
  [coordinator]="common protocol state/plan checkpoint planner journal"
  # The HTTP API: a client of the coordinator's socket; its events come through an interface.
  [http]="common protocol"
  [worker]="common protocol collectives state/plan state checkpoint"
  [launch]="common protocol collectives state/plan state checkpoint planner journal coordinator http worker"
  [examples]="torch_interop"
  # elastra::torch (LibTorch interop): a user of the public headers, like the examples.
  [torch_interop]=""
  [testbed]="common"
  # The elastra Python package: the worker library bound with pybind11, public headers only.
  [python]=""
)
# The layer of each CMake target: a layer's targets may link only the targets of the layers it may
# include. Users (examples, elastra::torch) may link the public libraries besides.
declare -A target_layer=(
  [elastra_common]=common [elastra_protocol]=protocol
  [elastra_collectives]=collectives [elastra_gloo]=collectives [elastra_mpi]=collectives
  [elastra_nccl]=collectives [elastra_nccl_dep]=collectives
  [elastra_state_plan]=state/plan [elastra_state]=state [elastra_checkpoint]=checkpoint
  [elastra_planner]=planner [elastra_journal]=journal [elastra_coordinator]=coordinator
  [elastra_http]=http [elastra_worker]=worker [elastra_launch]=launch [elastra]=launch
  [elastra_torch]=torch_interop [elastra_testbed]=testbed [elastra_python]=python
)
public_libraries="common collectives state worker"
# The layer that implements each public header (include/elastra/). A new public header must be
# added here.
declare -A owner=(
  [status.h]=common [layout.h]=common [sharding.h]=common [data_type.h]=common [config.h]=common [host_bytes.h]=common
  [communicator.h]=collectives
  [tensor_collection.h]=state [device_buffer.h]=state
  [worker.h]=worker [worker_options.h]=worker
)
# Headers no public header may include: users build against <elastra/...> without these.
forbidden_in_public='zmq|nccl|mpi\.h|gloo/|cuda|torch/|cereal/'

# include_lines FILE: LINE:TARGET for every #include "..." and #include <...> of FILE.
include_lines() {
  grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]+["<]' "$1" |
    sed -E 's/^([0-9]+):.*#[[:space:]]*include[[:space:]]+["<]([^">]+)[">].*/\1:\2/'
}

check_tree() {
  local root=$1 failures=0
  may_use() {  # may_use LAYER TARGET_LAYER
    [ "$1" = "$2" ] && return 0
    local l
    for l in ${allowed[$1]}; do [ "$l" = "$2" ] && return 0; done
    return 1
  }
  report() { echo "$1"; failures=$((failures + 1)); }
  # check_links ROOT LAYER: every elastra target that LAYER's CMakeLists.txt links is one it may use.
  check_links() {
    local cmake=$1/$2/CMakeLists.txt lib lib_layer
    [ -f "$cmake" ] || return 0
    while read -r lib; do
      lib_layer=${target_layer[$lib]:-}
      [ -n "$lib_layer" ] || continue
      may_use "$2" "$lib_layer" && continue
      case "$2" in examples|torch_interop|python)
        [[ " $public_libraries " == *" $lib_layer "* ]] && continue ;;
      esac
      report "$2/CMakeLists.txt links $lib (layer $lib_layer; $2 may use: ${allowed[$2]:-only public libraries})"
    done < <(tr '\n' ' ' <"$cmake" | grep -oE 'target_link_libraries\([^)]*\)' |
             sed -E 's/^target_link_libraries\([[:space:]]*[^[:space:]]+//; s/\)$//' |
             tr ' ' '\n' | grep -E '^elastra(_[a-z_]+)?$' | sort -u)
  }

  layer_of() {  # layer_of PATH: the layer a path (of a file or an include) lies in, or its first part
    local two=${1#*/}
    two=${1%%/*}/${two%%/*}
    if [ -n "${allowed[$two]+x}" ]; then echo "$two"; else echo "${1%%/*}"; fi
  }

  local layer file line target header dep sub
  for layer in "${!allowed[@]}"; do
    [ -d "$root/$layer" ] || continue
    while IFS= read -r file; do
      # A file of a nested layer (state/plan) belongs to it, not to its parent folder.
      [ "$(layer_of "${file#$root/}")" = "$layer" ] || continue
      while IFS=: read -r line target; do
        dep=$(layer_of "$target")
        if [ "$dep" = elastra ]; then
          header=${target#elastra/}
          [ -n "${owner[$header]:-}" ] || continue  # checked below, with the public headers
          dep=${owner[$header]}
          # Examples and elastra::torch are users: any public header is theirs to include.
          [ "$layer" = examples ] || [ "$layer" = torch_interop ] || [ "$layer" = python ] &&
            continue
        elif [ -z "${allowed[$dep]+x}" ]; then
          continue  # not a layer (a system header in quotes, a generated file)
        fi
        may_use "$layer" "$dep" ||
          report "${file#$root/}:$line includes \"$target\" (layer $dep; $layer may include: ${allowed[$layer]:-only public headers})"
      done < <(include_lines "$file")
    done < <(find "$root/$layer" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \))
    check_links "$root" "$layer"
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
        elif [ -n "${allowed[$(layer_of "$target")]+x}" ]; then
          report "include/elastra/$header:$line includes internal \"$target\": users have only include/"
        fi
      done < <(include_lines "$file")
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
  mkdir -p "$tmp/base/common" "$tmp/base/protocol" "$tmp/base/planner" "$tmp/base/journal" \
    "$tmp/base/http" "$tmp/base/coordinator" "$tmp/base/worker" "$tmp/base/state/plan" \
    "$tmp/base/include/elastra"
  echo '#include "common/status.h"' >"$tmp/base/worker/a.cc"
  echo '#include "state/plan/p.h"' >"$tmp/base/coordinator/p.cc"
  echo 'target_link_libraries(elastra_coordinator PUBLIC elastra_protocol elastra_planner)' \
    >"$tmp/base/coordinator/CMakeLists.txt"
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
    'protocol/m.h:#include "state/plan/p.h"'
    'state/plan/q.cc:#include "state/x.h"'
    'planner/k.cc:#include <coordinator/x.h>'
    'include/elastra/status.h:#include "common/logging.h"'
    'coordinator/CMakeLists.txt:target_link_libraries(elastra_coordinator PRIVATE elastra_worker)'
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
