#!/usr/bin/env bash
# gpu_bundle.sh: prepares, on this machine (no GPU needed), everything bench/gpu_check.sh runs on
# the GPU machine, so that no device time goes into building. From the repository root:
#
#   bash bench/gpu_bundle.sh          # then: device run, carry [".gpu-bundle"],
#                                     #       command "OUT=$OUT bash bench/gpu_check.sh"
#
# Why: the device machine's image has CUDA, cuBLAS, NCCL (inside PyTorch's wheels), CMake and
# ninja, but not our other dependencies (ZeroMQ, Gloo, xxHash, GoogleTest, ...), and nothing can be
# installed there. So we build here for sm_90 (nvcc cross-compiles without a GPU), and carry the
# binaries with the shared libraries that the image lacks.
#
# What it does:
#   1. configures $BUILD_DIR (default build-gpu: Release, CUDA arch 90, NCCL required, MPI off,
#      since the GPU checks never start MPI and its libraries drag in a dozen more) and builds the
#      GPU checks' targets;
#   2. copies those binaries and our own shared libraries into .gpu-bundle/<BUILD_DIR>/..., at the
#      same paths relative to the build directory (the binaries find each other and our libraries
#      by the absolute paths compiled into them: gpu_check.sh links the build directory's
#      absolute path here to the bundle's copy there);
#   3. copies every shared library they load except glibc's, the C++ runtime's and the CUDA
#      driver's, cuBLAS's and NCCL's (taken from the device image) into .gpu-bundle/lib;
#   4. writes .gpu-bundle/MANIFEST (build directory, commit, NCCL and CUDA versions built against)
#      and checks the bundle fits the device's 64 MiB carry limit with the working tree.
#
# Knobs (environment): BUILD_DIR (build-gpu), JOBS (2), BUNDLE (.gpu-bundle),
# LIMIT_MIB (64: carry limit for the bundle plus the tracked tree).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-2}
BUNDLE=${BUNDLE:-.gpu-bundle}
LIMIT_MIB=${LIMIT_MIB:-64}

# The executables gpu_check.sh runs or that they start (paths relative to the build directory).
TARGETS=(nccl_communicator_test nccl_rank_helper device_state_test device_reshard_test
         device_reshard_helper train_mlp_cuda_test train_mlp elastra bench_collectives
         bench_device)

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DELASTRA_WITH_CUDA=ON -DELASTRA_WITH_NCCL=ON -DELASTRA_WITH_MPI=OFF >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS" "${TARGETS[@]}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib"
echo '*' >"$BUNDLE/.gitignore"  # never committed, whatever the repository's ignore file says

# 2. Our binaries and libraries, at their paths under the build directory.
mapfile -t elves < <(
  for t in "${TARGETS[@]}"; do find "$BUILD_DIR" -type f -name "$t" -perm -u+x; done
  find "$BUILD_DIR" -type f -name 'libelastra*.so*'
)
for f in "${elves[@]}"; do
  mkdir -p "$BUNDLE/$(dirname "$f")"
  strip --strip-unneeded -o "$BUNDLE/$f" "$f"
done

# 3. Third-party libraries: what the loader resolves here, minus what the image has.
keep_from_image() {
  case $1 in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | \
      libpthread.so.* | librt.so.* | libresolv.so.* | libutil.so.* | libstdc++.so.* | \
      libgcc_s.so.* | libcuda.so.* | libnccl.so.* | libcublas.so.* | libcublasLt.so.*)
      return 0 ;;
  esac
  return 1
}
missing=0
while read -r name arrow path _; do
  [[ $arrow == "=>" ]] || continue
  keep_from_image "$name" && continue
  if [[ $path == "not" || ! -f $path ]]; then
    echo "gpu_bundle: $name is not found here" >&2
    missing=1
    continue
  fi
  [[ $path == "$ROOT"/* ]] && continue  # our own, copied above
  cp -L "$path" "$BUNDLE/lib/$name"
done < <(for f in "${elves[@]}"; do ldd "$f"; done | sort -u)
((missing)) && exit 1

# 4. Manifest and size.
nccl_version=$(grep -h -E '#define NCCL_(MAJOR|MINOR|PATCH) ' /usr/local/cuda/include/nccl.h \
  | awk '{printf "%s%s", sep, $3; sep="."}')
{
  echo "build_root=$ROOT/$BUILD_DIR"
  echo "build_dir=$BUILD_DIR"
  echo "commit=$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo '+changes')"
  echo "built=$(date -u +%FT%TZ)"
  echo "nccl_headers=$nccl_version"
  echo "cuda=$(/usr/local/cuda/bin/nvcc --version | grep -o 'release [0-9.]*')"
  echo "libs=$(ls "$BUNDLE/lib" | tr '\n' ' ')"
} >"$BUNDLE/MANIFEST"
bundle_kib=$(du -sk "$BUNDLE" | cut -f1)
tree_kib=$(($(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1024))
echo "gpu_bundle: $BUNDLE is $((bundle_kib / 1024)) MiB, the tracked tree $((tree_kib / 1024)) MiB"
if ((bundle_kib + tree_kib > LIMIT_MIB * 1024 - 4096)); then
  echo "gpu_bundle: over the ${LIMIT_MIB} MiB carry limit (with 4 MiB to spare)" >&2
  exit 1
fi
cat "$BUNDLE/MANIFEST"
