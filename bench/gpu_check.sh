#!/usr/bin/env bash
# gpu_check.sh: the one prepared run for a GPU machine. From the repository root:
#
#   OUT=/some/dir bash bench/gpu_check.sh        # OUT defaults to ./out
#
# Configures a fresh build-gpu (Release, CUDA arch 90, NCCL required), builds only what the GPU
# checks need, and runs, each as its own step with a timeout, its log and (for tests) JUnit XML:
#   1. the NCCL backend's tests, one gtest case (or group) per step (nccl_communicator_test);
#   2. device state (device_state_test) and device-to-device resharding over NCCL
#      (device_reshard_test);
#   3. train_mlp --device cuda against the CPU (train_mlp_cuda_test: reference, elastic jobs on
#      gloo and nccl, a killed worker in an nccl job);
#   4. the benchmarks bench_collectives (nccl_vs_raw, gloo_vs_raw) and bench_device
#      (reshard_vs_raw_nccl, checkpoint_save_vs_dd, stall_vs_memcpy_d2h);
#   5. the 200-cycle leak test last (it takes whatever time is left, up to its own budget).
# Everything goes under $OUT. It never stops halfway: each step's exit code and duration go to
# $OUT/summary.txt. The whole run is bounded by TOTAL_BUDGET_S (default 540 s, so that one device
# command of 600 s holds it): a step that would start with too little time left is recorded as
# skipped. Without a GPU the tests skip and the benchmarks print their no-device lines.
#
# Knobs (environment): OUT, JOBS (16), TOTAL_BUDGET_S (540), ELASTRA_LEAK_BUDGET_S (75),
# ELASTRA_LEAK_CYCLES (200), BUILD_DIR (build-gpu).
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
mkdir -p "$OUT"
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
  return 0
}

# --- What is installed ---------------------------------------------------------------------------
missing=0
for tool in cmake ninja; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "MISSING: $tool is not installed (apt-get install cmake ninja-build)" | tee -a "$SUMMARY"
    missing=1
  fi
done
if [[ ! -f /usr/include/gloo/allreduce.h && ! -f /usr/local/include/gloo/allreduce.h ]]; then
  echo "MISSING: gloo headers not found (apt-get install libgloo-dev)" | tee -a "$SUMMARY"
  missing=1
fi
if [[ ! -f /usr/local/cuda/include/nccl.h && ! -f /usr/include/nccl.h ]]; then
  echo "MISSING: nccl.h not found (NCCL must sit beside CUDA)" | tee -a "$SUMMARY"
  missing=1
fi
{
  echo "== nvidia-smi"; timeout 30 nvidia-smi 2>&1 || echo "nvidia-smi: rc=$?"
  echo "== nvidia-smi -q (short)"; timeout 30 nvidia-smi -q -d MEMORY,COMPUTE 2>&1 | head -60
  echo "== nvcc"; /usr/local/cuda/bin/nvcc --version 2>&1 || echo "no nvcc"
  echo "== nccl.h"; grep -h -E '#define NCCL_(MAJOR|MINOR|PATCH)' /usr/local/cuda/include/nccl.h \
    /usr/include/nccl.h 2>/dev/null
  echo "== cmake"; cmake --version 2>&1 | head -1
  echo "== cores"; nproc
  echo "== NCCL env"; env | grep '^NCCL_' || true
} >"$OUT/nvidia-smi.txt" 2>&1
echo "environment: $(grep -m1 -E 'Driver Version|nvidia-smi: rc' "$OUT/nvidia-smi.txt" || echo 'no nvidia-smi')" \
  | tee -a "$SUMMARY"
((missing)) && echo "some tools are missing: the steps that need them will fail" | tee -a "$SUMMARY"

# --- Build ---------------------------------------------------------------------------------------
rm -rf "$BUILD_DIR"
step configure 180 "$OUT/configure.log" \
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DELASTRA_WITH_NCCL=ON
step build 300 "$OUT/build.log" \
  ninja -C "$BUILD_DIR" -j"$JOBS" nccl_communicator_test nccl_rank_helper bench_collectives \
  train_mlp_cuda_test train_mlp elastra bench_device device_state_test device_reshard_test \
  device_reshard_helper
TEST_BIN=$BUILD_DIR/tests/gpu/nccl_communicator_test
BENCH_BIN=$BUILD_DIR/bench/collectives/bench_collectives

# --- Tests: one gtest case (or group) per step so that one hang costs only its own step --------
run_tests() {  # NAME FILTER TIMEOUT
  if [[ ! -x $TEST_BIN ]]; then
    echo "$1 rc=NOT_BUILT" | tee -a "$SUMMARY"
    return
  fi
  step "test:$1" "$3" "$OUT/test_$1.log" \
    "$TEST_BIN" --gtest_filter="$2" --gtest_output="xml:$OUT/test_$1.xml"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)|^\{"leak"|FAIL rank|saw k' "$OUT/test_$1.log" \
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
  step "test:$1" "$3" "$OUT/test_$1.log" "$2" --gtest_output="xml:$OUT/test_$1.xml"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)|^max relative loss|Failure|FAIL rank' \
    "$OUT/test_$1.log" | sed "s/^/    $1: /" | head -20 | tee -a "$SUMMARY"
}
run_binary device_state "$BUILD_DIR/tests/gpu/device_state_test" 90
run_binary device_reshard "$BUILD_DIR/tests/gpu/device_reshard_test" 150

# --- train_mlp --device cuda against its CPU reference (one process, elastic jobs on gloo and nccl,
# a killed worker in an nccl job)
run_binary train_mlp_cuda "$BUILD_DIR/tests/gpu/train_mlp_cuda_test" 180

# --- Benchmark (before the long leak test, so that its figures come back in any case) -----------
if [[ -x $BENCH_BIN ]]; then
  step bench 150 "$OUT/bench_collectives.log" "$BENCH_BIN"
  grep '^{"bench"' "$OUT/bench_collectives.log" | tail -1 >"$OUT/bench_collectives.json"
  echo "    bench: $(cat "$OUT/bench_collectives.json")" | tee -a "$SUMMARY"
else
  echo "bench rc=NOT_BUILT" | tee -a "$SUMMARY"
fi

# bench_device: device-to-device resharding vs raw NCCL, checkpoint of device state vs dd and
# cudaMemcpy. Its ranks are killed after 60 s; the checkpoint's files go under $BUILD_DIR (real
# disk: dd oflag=direct fails on a tmpfs /tmp) and are removed.
DEVICE_BENCH_BIN=$BUILD_DIR/bench/device/bench_device
if [[ -x $DEVICE_BENCH_BIN ]]; then
  step bench_device 120 "$OUT/bench_device.log" "$DEVICE_BENCH_BIN" --dir "$BUILD_DIR"
  grep '^{"bench":"device"' "$OUT/bench_device.log" | tail -1 >"$OUT/bench_device.json"
  echo "    bench_device: $(cat "$OUT/bench_device.json")" | tee -a "$SUMMARY"
else
  echo "bench_device rc=NOT_BUILT" | tee -a "$SUMMARY"
fi

run_tests leak 'NcclMultiProcessTest.InitSplitShrinkCyclesDoNotLeak' $((ELASTRA_LEAK_BUDGET_S + 75))
grep -h '^{"leak"' "$OUT"/test_leak.log >"$OUT/leak.json" 2>/dev/null

echo "total secs=$(($(date +%s) - START))" | tee -a "$SUMMARY"
exit 0
