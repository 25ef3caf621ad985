#!/usr/bin/env bash
# gpu_check.sh: the one prepared run for a GPU machine. From the repository root:
#
#   bash bench/gpu_bundle.sh                       # here, first: builds for sm_90, packs .gpu-bundle
#   OUT=/some/dir bash bench/gpu_check.sh          # there, carrying .gpu-bundle (OUT: ./out)
#
# With .gpu-bundle (see gpu_bundle.sh) it builds nothing: it links the bundle's build directory at
# the absolute path compiled into the binaries, puts the bundle's libraries and the image's NCCL and
# cuBLAS on LD_LIBRARY_PATH, and checks that every binary loads. Without a bundle (or with
# GPU_CHECK_BUILD=1) it configures and builds a fresh build-gpu (Release, CUDA arch 90, NCCL
# required), which needs our build dependencies installed. Then it runs, each as its own step with
# a timeout, its log and (for tests) JUnit XML:
#   1. the NCCL backend's tests, one gtest case (or group) per step (nccl_communicator_test);
#   2. device state (device_state_test) and device-to-device resharding over NCCL
#      (device_reshard_test);
#   3. train_mlp --device cuda against the CPU (train_mlp_cuda_test: reference, elastic jobs on
#      gloo and nccl, a killed worker in an nccl job);
#   4. the benchmarks bench_collectives (nccl_vs_raw, gloo_vs_raw) and bench_device
#      (reshard_vs_raw_nccl, checkpoint_save_vs_dd, stall_vs_memcpy_d2h);
#   5. the 200-cycle leak test last (it takes whatever time is left, up to its own budget).
# It never stops halfway: each step's exit code and duration go to $OUT/summary.txt (and stdout).
# The device tool brings back at most 8 files, so $OUT holds only summary.txt, logs.tar.gz (every
# log and XML, refreshed after each step so that a killed run still returns them) and the JSON
# lines bench_collectives.json, bench_device.json and leak.json. The whole run is bounded by
# TOTAL_BUDGET_S (default 540 s, so that one device command of 600 s holds it): a step that would
# start with too little time left is recorded as skipped. Without a GPU the tests skip and the
# benchmarks print their no-device lines.
#
# Knobs (environment): OUT, JOBS (16), TOTAL_BUDGET_S (540), ELASTRA_LEAK_BUDGET_S (75),
# ELASTRA_LEAK_CYCLES (200), BUILD_DIR (build-gpu), GPU_CHECK_BUILD (0), LOGS (a temporary folder).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out}
JOBS=${JOBS:-16}
BUILD_DIR=${BUILD_DIR:-build-gpu}
TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-540}
export ELASTRA_LEAK_BUDGET_S=${ELASTRA_LEAK_BUDGET_S:-75}
export ELASTRA_LEAK_CYCLES=${ELASTRA_LEAK_CYCLES:-200}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
BUNDLE=$ROOT/.gpu-bundle
GPU_CHECK_BUILD=${GPU_CHECK_BUILD:-0}
LOGS=${LOGS:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
mkdir -p "$OUT" "$LOGS"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
: >"$SUMMARY"
echo "gpu_check $(date -u +%FT%TZ) root=$ROOT out=$OUT jobs=$JOBS budget=${TOTAL_BUDGET_S}s" \
  | tee -a "$SUMMARY"

left() { echo $((TOTAL_BUDGET_S - ($(date +%s) - START))); }

# step NAME TIMEOUT_S LOGFILE CMD...: runs CMD with a timeout (capped by the time left), logs its
# output, and records "NAME rc=RC secs=S" in the summary. 124 = timed out.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local remaining
  remaining=$(left)
  if ((remaining < 15)); then
    echo "$name rc=SKIPPED reason=budget_exhausted" | tee -a "$SUMMARY"
    return 0
  fi
  ((limit > remaining)) && limit=$remaining
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  echo "$name rc=$rc secs=$(($(date +%s) - t0)) limit=$limit log=$(basename "$log")" \
    | tee -a "$SUMMARY"
  pack_logs
  return 0
}

# Every log and XML as one file under $OUT (the device tool returns at most 8).
pack_logs() {
  tar czf "$OUT/logs.tar.gz.tmp" -C "$LOGS" . 2>/dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

# --- The machine ---------------------------------------------------------------------------------
{
  echo "== nvidia-smi"; timeout 30 nvidia-smi 2>&1 || echo "nvidia-smi: rc=$?"
  echo "== nvidia-smi -q (short)"; timeout 30 nvidia-smi -q -d MEMORY,COMPUTE 2>&1 | head -60
  echo "== nvcc"; /usr/local/cuda/bin/nvcc --version 2>&1 || echo "no nvcc"
  echo "== nccl.h"; grep -h -E '#define NCCL_(MAJOR|MINOR|PATCH)' /usr/local/cuda/include/nccl.h \
    /usr/include/nccl.h 2>/dev/null
  echo "== os"; grep PRETTY_NAME /etc/os-release; ldd --version 2>&1 | head -1
  echo "== cmake"; cmake --version 2>&1 | head -1
  echo "== cores"; nproc
  echo "== NCCL env"; env | grep '^NCCL_' || true
} >"$LOGS/nvidia-smi.txt" 2>&1
echo "environment: $(grep -m1 -E 'Driver Version|nvidia-smi: rc' "$LOGS/nvidia-smi.txt" || echo 'no nvidia-smi')" \
  | tee -a "$SUMMARY"

# The folder holding the first file called $1 under the usual library places (the image keeps
# NCCL and cuBLAS inside PyTorch's wheels, the CUDA toolkit beside them).
lib_dir_of() {
  local f
  f=$(find /usr/local/cuda/lib64/ /usr/local/cuda/lib/ /usr/lib/x86_64-linux-gnu/ /opt/ /usr/local/lib/ \
    -name "$1" 2>/dev/null | head -1)
  [[ -n $f ]] && dirname "$f"
}

if [[ -f $BUNDLE/MANIFEST && $GPU_CHECK_BUILD != 1 ]]; then
  # --- Prebuilt: link the bundle's build directory where its binaries look for it -------------
  build_root=$(sed -n 's/^build_root=//p' "$BUNDLE/MANIFEST")
  bundle_build=$BUNDLE/$(sed -n 's/^build_dir=//p' "$BUNDLE/MANIFEST")
  echo "bundle: $(grep -E '^(commit|built|nccl_headers)=' "$BUNDLE/MANIFEST" | tr '\n' ' ')" \
    | tee -a "$SUMMARY"
  if [[ -L $build_root || ! -e $build_root ]]; then
    mkdir -p "$(dirname "$build_root")" && ln -sfn "$bundle_build" "$build_root" ||
      echo "MISSING: cannot link $build_root to the bundle: the tests will not find their helpers" \
        | tee -a "$SUMMARY"
  elif [[ ! -x $build_root/tests/gpu/nccl_communicator_test ]]; then
    echo "MISSING: $build_root is a folder without the bundle's binaries" | tee -a "$SUMMARY"
  fi
  BUILD_DIR=$build_root
  lib_path=$BUNDLE/lib
  for lib in libnccl.so.2 libcublas.so.13 libcublasLt.so.13; do
    dir=$(lib_dir_of "$lib")
    if [[ -z $dir ]]; then
      echo "MISSING: $lib is not on this machine" | tee -a "$SUMMARY"
    else
      lib_path=$lib_path:$dir
    fi
  done
  export LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nccl_so=$(lib_dir_of libnccl.so.2)/libnccl.so.2
  echo "nccl loaded: $(python3 -c "import ctypes; v = ctypes.c_int(); \
ctypes.CDLL('$nccl_so').ncclGetVersion(ctypes.byref(v)); print(v.value)" 2>&1 | tail -1) \
from $nccl_so" | tee -a "$SUMMARY"
  # Every binary must load: one line per library the loader cannot find.
  for f in $(find -L "$BUILD_DIR" -type f -perm -u+x ! -name '*.so*'); do
    echo "== $f"
    ldd "$f"
  done >"$LOGS/ldd.txt" 2>&1
  if grep -q 'not found' "$LOGS/ldd.txt"; then
    grep 'not found' "$LOGS/ldd.txt" | sort -u | sed 's/^/MISSING library: /' | tee -a "$SUMMARY"
  else
    echo "libraries: every binary loads ($(grep -c '^==' "$LOGS/ldd.txt") checked)" \
      | tee -a "$SUMMARY"
  fi
  pack_logs
else
  # --- Build here: needs cmake, ninja and our dependencies -----------------------------------
  missing=0
  for tool in cmake ninja; do
    if ! command -v $tool >/dev/null 2>&1; then
      echo "MISSING: $tool is not installed (apt-get install cmake ninja-build)" | tee -a "$SUMMARY"
      missing=1
    fi
  done
  if [[ ! -f /usr/include/gloo/allreduce.h && ! -f /usr/local/include/gloo/allreduce.h ]]; then
    echo "MISSING: gloo headers not found (apt-get install libgloo-dev; or carry a bundle made" \
      "by bench/gpu_bundle.sh)" | tee -a "$SUMMARY"
    missing=1
  fi
  if [[ ! -f /usr/local/cuda/include/nccl.h && ! -f /usr/include/nccl.h ]]; then
    echo "MISSING: nccl.h not found (NCCL must sit beside CUDA)" | tee -a "$SUMMARY"
    missing=1
  fi
  ((missing)) && echo "some tools are missing: the steps that need them will fail" | tee -a "$SUMMARY"
  rm -rf "$BUILD_DIR"
  step configure 180 "$LOGS/configure.log" \
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DELASTRA_WITH_NCCL=ON
  step build 300 "$LOGS/build.log" \
    ninja -C "$BUILD_DIR" -j"$JOBS" nccl_communicator_test nccl_rank_helper bench_collectives \
    train_mlp_cuda_test train_mlp elastra bench_device device_state_test device_reshard_test \
    device_reshard_helper
fi
TEST_BIN=$BUILD_DIR/tests/gpu/nccl_communicator_test
BENCH_BIN=$BUILD_DIR/bench/collectives/bench_collectives

# --- Tests: one gtest case (or group) per step so that one hang costs only its own step --------
run_tests() {  # NAME FILTER TIMEOUT
  if [[ ! -x $TEST_BIN ]]; then
    echo "$1 rc=NOT_BUILT" | tee -a "$SUMMARY"
    return
  fi
  step "test:$1" "$3" "$LOGS/test_$1.log" \
    "$TEST_BIN" --gtest_filter="$2" --gtest_output="xml:$LOGS/test_$1.xml"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)|^\{"leak"|FAIL rank|saw k' "$LOGS/test_$1.log" \
    | sed "s/^/    $1: /" | head -20 | tee -a "$SUMMARY"
}
run_tests unit 'FileKeyValueStoreTest.*:NcclOptionsTest.*:NcclSingleRankTest.*' 60
run_tests collectives2 'NcclMultiProcessTest.CollectivesTwoRanks' 75
run_tests collectives3 'NcclMultiProcessTest.CollectivesThreeRanks' 75
run_tests split 'NcclMultiProcessTest.SplitAndPlannedShrinkThreeRanks' 75
run_tests hang 'NcclMultiProcessTest.TimeoutAndAbortBreakHungCollectives' 60
run_tests kill 'NcclMultiProcessTest.KilledRankSurvivorsDetectAndShrink' 100
run_tests interrupt 'NcclMultiProcessTest.InterruptedWorldIsShrunkBySurvivors' 90

# --- Device state and device-to-device resharding -----------------------------------------------
run_binary() {  # NAME BINARY TIMEOUT
  if [[ ! -x $2 ]]; then
    echo "test:$1 rc=NOT_BUILT" | tee -a "$SUMMARY"
    return
  fi
  step "test:$1" "$3" "$LOGS/test_$1.log" "$2" --gtest_output="xml:$LOGS/test_$1.xml"
  grep -E '^\[ +(OK|FAILED|SKIPPED|INFO) +\] |^max relative loss|Failure|FAIL rank' \
    "$LOGS/test_$1.log" | sed "s/^/    $1: /" | head -20 | tee -a "$SUMMARY"
}
run_binary device_state "$BUILD_DIR/tests/gpu/device_state_test" 90
run_binary device_reshard "$BUILD_DIR/tests/gpu/device_reshard_test" 150

# --- train_mlp --device cuda against its CPU reference (one process, elastic jobs on gloo and nccl,
# a killed worker in an nccl job)
run_binary train_mlp_cuda "$BUILD_DIR/tests/gpu/train_mlp_cuda_test" 240

# --- Benchmark (before the long leak test, so that its figures come back in any case) -----------
if [[ -x $BENCH_BIN ]]; then
  step bench 150 "$LOGS/bench_collectives.log" "$BENCH_BIN"
  grep '^{"bench"' "$LOGS/bench_collectives.log" | tail -1 >"$OUT/bench_collectives.json"
  echo "    bench: $(cat "$OUT/bench_collectives.json")" | tee -a "$SUMMARY"
else
  echo "bench rc=NOT_BUILT" | tee -a "$SUMMARY"
fi

# bench_device: device-to-device resharding vs raw NCCL, checkpoint of device state vs dd and
# cudaMemcpy. Its ranks are killed after 60 s; the checkpoint's files go under $BUILD_DIR (real
# disk: dd oflag=direct fails on a tmpfs /tmp) and are removed.
DEVICE_BENCH_BIN=$BUILD_DIR/bench/device/bench_device
if [[ -x $DEVICE_BENCH_BIN ]]; then
  step bench_device 120 "$LOGS/bench_device.log" "$DEVICE_BENCH_BIN" --dir "$BUILD_DIR"
  grep '^{"bench":"device"' "$LOGS/bench_device.log" | tail -1 >"$OUT/bench_device.json"
  echo "    bench_device: $(cat "$OUT/bench_device.json")" | tee -a "$SUMMARY"
else
  echo "bench_device rc=NOT_BUILT" | tee -a "$SUMMARY"
fi

run_tests leak 'NcclMultiProcessTest.InitSplitShrinkCyclesDoNotLeak' $((ELASTRA_LEAK_BUDGET_S + 75))
grep -h '^{"leak"' "$LOGS"/test_leak.log >"$OUT/leak.json" 2>/dev/null

echo "total secs=$(($(date +%s) - START))" | tee -a "$SUMMARY"
exit 0
