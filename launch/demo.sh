#!/usr/bin/env bash
# make demo: train_mlp under `elastra run` on 4 workers, resized 4 -> 2 -> 3 with `elastra resize`,
# then to 4 workers laid out as 2 pipeline stages x 2 tensor-parallel ranks, then as 2 data-parallel
# replicas x 2 tensor-parallel ranks, then one worker killed with SIGKILL. Ends with a report: each generation with its layout and
# downtime, and the largest relative loss difference against `train_mlp --reference`.
set -euo pipefail
BUILD=${1:-build}
ELASTRA=$BUILD/launch/elastra
TRAIN=$BUILD/examples/train_mlp
COMPARE=$BUILD/examples/compare_logs
OUT=${DEMO_DIR:-out/demo}
STEPS=${DEMO_STEPS:-400}
ARGS=(--steps "$STEPS" --step-time-ms 25 --global-batch 96 --hidden 48 --ffn 96 --layers 4 --commit-every 10)

rm -rf "$OUT" && mkdir -p "$OUT"
STATE=$OUT/state

json_field() {  # json_field FIELD < json
  python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
step_now() { "$ELASTRA" status --state-dir "$STATE" --json 2>/dev/null | json_field step; }
wait_step() {  # wait_step N
  for _ in $(seq 1 600); do
    s=$(step_now || echo -1)
    [ "$s" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "demo: the job did not reach step $1" >&2; return 1
}

echo "== elastra run --nproc 4 -- train_mlp ${ARGS[*]}"
"$ELASTRA" run --nproc 4 --state-dir "$STATE" -- "$TRAIN" "${ARGS[@]}" --log "$OUT/run.jsonl" \
  > "$OUT/launcher.log" 2>&1 &
RUN_PID=$!
trap 'kill $RUN_PID 2>/dev/null || true' EXIT

wait_step 40
echo "== elastra resize --workers 2 --wait"
"$ELASTRA" resize --state-dir "$STATE" --workers 2 --wait | tee "$OUT/resize_2.json"
wait_step $(( $(step_now) + 40 ))
echo "== elastra resize --workers 3 --wait"
"$ELASTRA" resize --state-dir "$STATE" --workers 3 --wait | tee "$OUT/resize_3.json"
wait_step $(( $(step_now) + 40 ))
echo "== elastra resize --workers 4 --layout dp=1,pp=2,tp=2 --wait"
"$ELASTRA" resize --state-dir "$STATE" --workers 4 --layout dp=1,pp=2,tp=2 --wait | tee "$OUT/resize_pp_tp.json"
wait_step $(( $(step_now) + 40 ))
echo "== elastra resize --workers 4 --layout dp=2,pp=1,tp=2 --wait"
"$ELASTRA" resize --state-dir "$STATE" --workers 4 --layout dp=2,pp=1,tp=2 --wait | tee "$OUT/resize_dp_tp.json"
wait_step $(( $(step_now) + 40 ))
echo "== elastra status"
"$ELASTRA" status --state-dir "$STATE"
VICTIM=$("$ELASTRA" status --state-dir "$STATE" --json | python3 -c '
import json,sys
j=json.load(sys.stdin)
print(next(w["pid"] for w in j["workers"] if w["state"]=="member" and w["rank"]==1))')
echo "== kill -9 $VICTIM (rank 1)"
kill -9 "$VICTIM"
set +e
wait $RUN_PID
RC=$?
set -e
trap - EXIT
echo "== elastra run exited with $RC"

"$TRAIN" --reference "${ARGS[@]}" --log "$OUT/ref.jsonl" > /dev/null
echo
echo "== report"
python3 - "$STATE/status.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
print(f"{'generation':>10}  {'reason':<8} {'workers':>7}  {'layout':<16} {'downtime':>12}")
for h in st.get("history", []):
    l = h["layout"]
    n = len(h["workers"]) if isinstance(h["workers"], list) else h["workers"]
    print(f"{h['generation']:>10}  {h['reason']:<8} {n:>7}  "
          f"dp={l['dp']},pp={l['pp']},tp={l['tp']:<6} {h['downtime_ms']:>9.1f} ms")
PY
CMP=$("$COMPARE" "$OUT/run.jsonl" "$OUT/ref.jsonl" "$STEPS") && OK=1 || OK=0
echo "against --reference: $CMP"
python3 - "$CMP" <<'PY'
import json, sys
c = json.loads(sys.argv[1])
print(f"largest relative loss difference at equal steps: {c['max_rel_loss_diff']:.3g} over {c['steps']} steps")
print(f"sample accounting exact: {c['accounting_ok']} ({c['reapplied']} steps re-applied after the rollback)")
PY
[ "$RC" -eq 0 ] && [ "$OK" -eq 1 ]
