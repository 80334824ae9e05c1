#!/usr/bin/env bash
# bench-ssd.sh — decode speed of `kiln serve` with the SSD tier off, on, and on
# with generation checkpoints, under steady load (bench/serve-load). Runs the
# configurations interleaved, ROUNDS times, and prints the best aggregate output tok/s (agg_tok_s) of
# each. Prints figures; never pass/fail.
#   bench/bench-ssd.sh [MODEL_DIR] [KILN_BIN]      (env: ROUNDS=3 CLIENTS=4 OUT=128 REQS=3)
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
MODEL=${1:-$HERE/../build/test-models/e2e-llama-small-f32}
KILN=${2:-$HERE/../build/kiln}
ROUNDS=${ROUNDS:-3} CLIENTS=${CLIENTS:-4} OUT=${OUT:-128} REQS=${REQS:-3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
declare -A best
run() { # run NAME flags...
  local name=$1; shift
  local port; port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$KILN" serve --model "$MODEL" --port "$port" --threads "${THREADS:-2}" --ctx 4096 "$@" >"$TMP/$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
  local line; line=$("$HERE/serve-load" --url "http://127.0.0.1:$port" --clients "$CLIENTS" --requests "$REQS" \
    --prompt-tokens 256 --output-tokens "$OUT" | tail -n 1)
  kill -TERM "$pid"; wait "$pid" 2>/dev/null
  local tps; tps=$(echo "$line" | sed -nE 's/.*agg_tok_s=([0-9.]+).*/\1/p')
  echo "round $r $name: $line"
  if [ -n "$tps" ] && { [ -z "${best[$name]:-}" ] || /usr/bin/python3 -c "import sys; sys.exit(0 if $tps > ${best[$name]} else 1)"; }; then best[$name]=$tps; fi
}
for r in $(seq 1 "$ROUNDS"); do
  rm -rf "$TMP/ssd" "$TMP/ck"
  run off
  run ssd --ssd-cache "$TMP/ssd"
  run ckpt --ssd-cache "$TMP/ck" --generation-checkpoint 16
done
for k in off ssd ckpt; do
  echo "bench=serve-ssd config=$k best_output_tok_s=${best[$k]:-nan} ratio_vs_off=$(/usr/bin/python3 -c "print(round(${best[$k]:-0} / ${best[off]:-1}, 4))")"
done
