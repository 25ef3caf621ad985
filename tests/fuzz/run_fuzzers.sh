#!/usr/bin/env bash
# Runs every fuzz target of a clang fuzz build (ELASTRA_FUZZ=ON) for SECONDS each, one after the
# other, starting from the committed corpus (tests/fuzz/corpus/<target>, read only) and a working
# corpus in BUILD/fuzz-work/<target> that keeps what earlier runs found. A crash, a leak, an
# undefined behaviour, a CHECK, a timeout (an input slower than 60 s; wall time, so a machine
# loaded by builds does not turn a slow moment into a finding) or an input that needs more than
# 2 GiB is a finding: its input is kept in BUILD/fuzz-findings/<target>/ and the script exits 1
# after the other targets ran. docs/hardening.md says how to turn one into a regression input.
#
#   tests/fuzz/run_fuzzers.sh BUILD SECONDS [TARGET...]     (make fuzz FUZZ_SECONDS=N)
set -uo pipefail
build=${1:?usage: run_fuzzers.sh BUILD SECONDS [TARGET...]}
seconds=${2:?usage: run_fuzzers.sh BUILD SECONDS [TARGET...]}
shift 2
src=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for corpus in "$src"/corpus/*/; do targets+=("$(basename "$corpus")"); done
fi

# Leaks are findings; a finding stops the target at once with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "run_fuzzers: $bin is missing (build with ELASTRA_FUZZ=ON)" >&2
    exit 2
  fi
  work="$build/fuzz-work/$t"
  findings="$build/fuzz-findings/$t"
  mkdir -p "$work" "$findings"
  dict=()
  [ -f "$src/dict/$t.dict" ] && dict=(-dict="$src/dict/$t.dict")
  log="$build/fuzz-findings/$t.log"
  start=$(date +%s)
  "$bin" "$work" "$src/corpus/$t" "${dict[@]}" -max_total_time="$seconds" -timeout=60 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$findings/" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  stats=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    echo "FUZZ $t: FINDING after ${elapsed}s (exit $rc): $findings/$(ls -t "$findings" | head -1)"
    grep -E 'ERROR|runtime error|Check failed|SUMMARY' "$log" | head -5
    echo "  full log: $log"
    failed+=("$t")
  else
    echo "FUZZ $t: ok, ${elapsed}s, ${stats:-?} inputs, ${cov:-cov: ?}"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "run_fuzzers: findings in: ${failed[*]}" >&2
  exit 1
fi
