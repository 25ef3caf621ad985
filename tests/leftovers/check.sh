#!/usr/bin/env bash
# Run after the suite (make test, make test-asan): no test may leave a process of a job (mpirun,
# orted, a worker, an elastra launcher, agent or coordinator) or an uncommitted checkpoint
# directory (a ckpt-* folder without MANIFEST) behind (issue 38). Whatever it finds it names,
# kills or removes, and it exits 1, so the next run starts clean and the suite's result says so.
#
#   bash tests/leftovers/check.sh [ROOT...]    (default ROOT: the temporary directory)
set -u
roots=("$@")
[ ${#roots[@]} -gt 0 ] || roots=("${TMPDIR:-/tmp}")
found=0
names=(mpirun orted train_mlp train_gpt elastra)
# A process a test's end killed (a parent-death signal, a SIGKILL to a group) may still be on its
# way out when the last test returns: give those up to 10 s to go.
# (One pgrep a name: pgrep matches at most 15 characters of a name, so the names joined by "|"
# matched nothing and this wait ended at once.)
any_left() {
  local name
  for name in "${names[@]}"; do pgrep -x "$name" >/dev/null && return 0; done
  return 1
}
for _ in $(seq 100); do
  any_left || break
  sleep 0.1
done
# Processes by their executable's name: a test's own helpers (gtest binaries) are not listed.
for name in "${names[@]}"; do
  pids=$(pgrep -x "$name" | tr '\n' ' ')
  [ -n "$pids" ] || continue
  found=1
  echo "leftover $name process(es):"
  for p in $pids; do echo "  $p $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-200)"; done
  kill -9 $pids 2>/dev/null
done
for root in "${roots[@]}"; do
  while IFS= read -r -d '' dir; do
    [ -f "$dir/MANIFEST" ] && continue
    found=1
    echo "leftover uncommitted checkpoint directory: $dir"
    rm -rf "$dir"
  done < <(find "$root" -xdev -maxdepth 6 -type d -regex '.*/ckpt-[0-9]+-g[0-9]+' -print0 \
             2>/dev/null)
done
if [ "$found" -ne 0 ]; then
  echo "tests/leftovers/check.sh: the suite left the above behind"
  exit 1
fi
echo "tests/leftovers/check.sh: no process or uncommitted checkpoint left behind"
