#!/usr/bin/env bash
# test_serve_gemma.sh — a Gemma 4 e4b-shaped model (per-layer inputs, 4 KV-shared
# layers, 5:1 sliding:full layers with a 64-token window, proportional RoPE,
# soft-capping) through `kiln serve` with every KV feature on at once
# (issue 13 §6):
#   a. --kv-quant 8 + --ssd-cache + --generation-checkpoint, --batch 8: 8
#      concurrent clients (prompts sharing a 300-token prefix, each longer
#      than the window) each get the text of the same request alone; every
#      block is back (no group holds an active block) after;
#   b. /fit and /stats agree, KV counts only the layers that store it, and
#      the predicted total (weights, KV, scratch) plus what the process held
#      before the model (/fit process_bytes, measured) is within 5% of the
#      server's measured peak RSS (the toy model is 94 MB, so the ~10 MB of
#      binary, libraries and threads cannot be left out);
#   c. flush + SIGTERM + restart on the same SSD folder: a ~670-token prefix
#      (10x the window) is a hit: the full-attention group's blocks all come
#      back, the sliding group only its window's; the same text;
#   d. kill -9 during a seeded generation, the retry resumes from the
#      generation checkpoint and equals the uninterrupted run.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
KILL="$E2E_DIR/ssd_kill.py"
T0=$(date +%s)
M="$KILN_BINARY_DIR/test-models/e2e-gemma4-e4b-like"
if [ ! -f "$M/model.safetensors" ]; then
  mkdir -p "$KILN_BINARY_DIR/test-models"
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch gemma4 --dtype f32 --shape tiny --hidden 384 --heads 4 \
    --kv-heads 2 --head-dim 64 --global-head-dim 128 --ffn 1024 --layers 12 --layer-pattern 6 \
    --sliding-window 64 --per-layer-input 32 --kv-shared 4 --double-wide \
    --out "$M.tmp$$" >/dev/null && { mv -T "$M.tmp$$" "$M" 2>/dev/null || rm -rf "$M.tmp$$"; }
fi
[ -f "$M/model.safetensors" ] || e2e_skip "cannot make the test model (python3-numpy missing?)"
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
stat_of() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)$2)"; }
fit_of() { curl -s "$1/fit" | $PY -c "import json,sys; print(json.load(sys.stdin)$2)"; }
prompt() { $PY -c "
import json, sys
sys.path.insert(0, '$E2E_DIR')
from ssd_req import prompt_for
pre = prompt_for(7)[:600] + ' ' if len(sys.argv) > 3 else ''
print(json.dumps({'prompt': pre + prompt_for(int(sys.argv[1]))[:int(sys.argv[2])]}))" "$@"; }
active() { stat_of "$1" "['kv']['groups']" | $PY -c "import ast,sys; print(sum(g['active'] for g in ast.literal_eval(sys.stdin.read())))"; }

DIR="$E2E_TMP/ssd"
FLAGS=(--model "$M" --ctx 1536 --batch 8 --kv-quant 8 --ssd-cache "$DIR" --generation-checkpoint 16)

# ---- a. 8 concurrent == alone, blocks back after
e2e_server A "${FLAGS[@]}" || exit 1
groups=$(stat_of "$A_URL" "['kv']['groups']")
echo "  kv groups: $groups"
check "a: two KV groups (full; window 64), 8 of 12 layers store K/V" \
  $PY -c "
import ast; g = ast.literal_eval('''$groups''')
raise SystemExit(0 if [x['window'] for x in g] == [0, 64] and sum(x['layers'] for x in g) == 8 else 1)"
pids=()
for i in 1 2 3 4 5 6 7 8; do
  $PY "$REQ" "$A_URL" 0 40 "$(prompt "$i" 260 shared)" > "$E2E_TMP/conc$i.json" &
  pids+=($!)
done
wait "${pids[@]}"
steps=$(stat_of "$A_URL" "['engine']['steps']")
same=1
for i in 1 2 3 4 5 6 7 8; do
  c=$(cat "$E2E_TMP/conc$i.json")
  alone=$($PY "$REQ" "$A_URL" 0 40 "$(prompt "$i" 260 shared)")
  [ "$(j "$alone" "['text']")" = "$(j "$c" "['text']")" ] && [ "$(j "$c" "['finish']")" = length ] || same=0
  [ "$(j "$c" "['prompt']")" -gt 64 ] || same=0
done
check "a: 8 concurrent requests ($steps steps < 8 x 40: batched) each equal the request alone" \
  bash -c "[ $same = 1 ] && [ $steps -lt 320 ]"
check "a: every block is back after (active $(active "$A_URL"))" [ "$(active "$A_URL")" = 0 ]

# ---- b. fit vs stats vs measured RSS
bpt=$(stat_of "$A_URL" "['kv']['kv_bytes_per_token']")
check "b: /fit and /stats agree on bytes per token ($bpt) and pool bytes" \
  bash -c "[ '$(fit_of "$A_URL" "['kv_bytes_per_token']")' = '$bpt' ] && [ '$(fit_of "$A_URL" "['kv_pool_bytes']")' = '$(stat_of "$A_URL" "['kv']['bytes']")' ]"
hwm=$(awk '/VmHWM/ {print $2 * 1024}' "/proc/$A_PID/status")
pred=$(fit_of "$A_URL" "['total_bytes']")
proc=$(fit_of "$A_URL" "['process_bytes']")
echo "  fit total $pred B (weights, KV, scratch) + process before the model $proc B vs measured VmHWM $hwm B"
check "b: kiln fit + the process's own start-up bytes within 5% of the measured peak RSS" \
  $PY -c "p = $pred + $proc; h = $hwm; print('  ratio %.3f' % (p / h)); raise SystemExit(0 if abs(p - h) <= 0.05 * h and $proc > 0 else 1)"
LONG=$(prompt 3 1100)
r1=$($PY "$REQ" "$A_URL" 0 32 "$LONG")
curl -s -X POST "$A_URL/admin/cache/flush" >/dev/null
check "a: SIGTERM exits 0" e2e_stop "$A_PID"

# ---- c. restart: a prefix hit 10x longer than the window
e2e_server B "${FLAGS[@]}" || exit 1
r2=$($PY "$REQ" "$B_URL" 0 32 "$LONG")
np=$(j "$r1" "['prompt']")
hits=$(stat_of "$B_URL" "['ssd_cache']['hits']")
# blocks of 16: the full group needs every block of the hit, the sliding group (64) its last ~5
check "c: after the restart $(j "$r2" "['cached']") of $np prompt tokens cached, $hits blocks read (full group all, sliding only the window's)" \
  bash -c "[ $(j "$r2" "['cached']") -ge $((np - 16)) ] && [ $hits -ge $((np / 16)) ] && [ $hits -le $((np / 16 + 6)) ]"
check "c: identical greedy text" [ "$(j "$r1" "['text']")" = "$(j "$r2" "['text']")" ]
e2e_stop "$B_PID"

# ---- d. generation checkpoint: kill -9, retry, resume
CK="$E2E_TMP/ck"
SEEDED='{"temperature":0.8,"seed":42,"ignore_eos":true}'
e2e_server C --model "$M" --ctx 1536 --kv-quant 8 --ssd-cache "$CK" --generation-checkpoint 16 || exit 1
ref=$($PY "$REQ" "$C_URL" -5 200 "$SEEDED")
killed=$($PY "$KILL" "$C_URL" "$C_PID" 120 5 200 "$SEEDED")
kill -0 "$C_PID" 2>/dev/null && { echo "  the server was not killed: $killed"; kill -9 "$C_PID"; }
wait "$C_PID" 2>/dev/null
check "d: killed after $(j "$killed" "['chunks']") of 200 tokens, a checkpoint is on disk" [ "$(ls "$CK" | grep -c '^ck-')" = 1 ]
e2e_server D --model "$M" --ctx 1536 --kv-quant 8 --ssd-cache "$CK" --generation-checkpoint 16 || exit 1
again=$($PY "$REQ" "$D_URL" -5 200 "$SEEDED")
check "d: the retry resumed ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
check "d: identical to the uninterrupted run" [ "$(j "$ref" "['text']")" = "$(j "$again" "['text']")" ]
e2e_stop "$D_PID"
echo "gemma compose: $(($(date +%s) - T0)) s"
e2e_done
