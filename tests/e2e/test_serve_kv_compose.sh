#!/usr/bin/env bash
# test_serve_kv_compose.sh — quantized KV composes with everything else
# (issues #5 and #6: "no combination is refused"), on a small random llama:
#   a. --kv-quant 8 + --ssd-cache: a ~670-token prefix survives flush + SIGTERM,
#      the restarted server reports it cached and answers the same text;
#   b. the same DIR under --kv-quant 4: no false hit, the text of a fresh q4
#      server; the q8 entries are skipped (kept, counted), not quarantined, and
#      a server back on --kv-quant 8 still finds them all;
#   c. --kv-quant 4 --quantized-kv-start 32 + --generation-checkpoint 16:
#      kill -9 at ~60% of a seeded 200-token generation, the retry resumes and
#      equals an uninterrupted run;
#   d. --kv-quant 8 --batch 4: 4 concurrent greedy requests sharing a prefix
#      each equal the same request alone;
#   e. --memory-budget: /fit and /stats report the format's bytes per token,
#      the max safe context at 4-bit is the byte ratio larger (up to the step
#      scratch that grows with the context), a prompt over the f32 limit is
#      refused at f32 and served at 4-bit;
#   f. --kv-budget: the projection uses the quantized bytes per token (and f32
#      for the positions before --quantized-kv-start);
#   g. a sliding-window model (every layer slides over 24 positions) with
#      --kv-quant 8 + --ssd-cache + --generation-checkpoint: a ~700-token
#      prompt + 300 tokens runs in a pool far smaller than its length, and
#      after a restart the prefix is cached again, loaded as only the window's
#      blocks, with the same text.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
KILL="$E2E_DIR/ssd_kill.py"
MODEL=$(e2e_small_model) || e2e_skip "cannot make the test model"
T0=$(date +%s)
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
stat_of() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)$2)"; }
fit_of() { curl -s "$1/fit" | $PY -c "import json,sys; print(json.load(sys.stdin)$2)"; }
# prompt JSON: prompt_for(ID) cut at CHARS, optionally after a shared prefix
prompt() { $PY -c "
import json, sys
sys.path.insert(0, '$E2E_DIR')
from ssd_req import prompt_for
pre = prompt_for(7)[:600] + ' ' if len(sys.argv) > 3 else ''
print(json.dumps({'prompt': pre + prompt_for(int(sys.argv[1]))[:int(sys.argv[2])]}))" "$@"; }
LONG=$(prompt 3 1100) # ~670 tokens

# ---- a. --kv-quant 8 + SSD tier: restart survival
DIR="$E2E_TMP/ssd"
e2e_server A --model "$MODEL" --ctx 1024 --kv-quant 8 --ssd-cache "$DIR" || exit 1
r1=$($PY "$REQ" "$A_URL" 0 32 "$LONG")
n_prompt=$(j "$r1" "['prompt']")
check "a: q8 cold request ($n_prompt prompt tokens, cached $(j "$r1" "['cached']"))" [ "$(j "$r1" "['cached']")" = 0 ]
flush=$(curl -s -w ' %{http_code}' -X POST "$A_URL/admin/cache/flush")
check "a: flush is durable ($flush)" bash -c "[[ '$flush' == *'\"durable\":true'* && '$flush' == *' 200' ]]"
q8_entries=$(stat_of "$A_URL" "['ssd_cache']['entries']")
check "a: q8 blocks on disk ($q8_entries)" [ "$q8_entries" -ge $((n_prompt / 16)) ]
check "a: SIGTERM exits 0" e2e_stop "$A_PID"
e2e_server B --model "$MODEL" --ctx 1024 --kv-quant 8 --ssd-cache "$DIR" || exit 1
r2=$($PY "$REQ" "$B_URL" 0 32 "$LONG")
check "a: after the restart the prefix is cached ($(j "$r2" "['cached']") of $n_prompt)" \
  [ "$(j "$r2" "['cached']")" -ge $((n_prompt - 16)) ]
check "a: ... loaded from the SSD tier ($(stat_of "$B_URL" "['ssd_cache']['hits']") block hits)" \
  [ "$(stat_of "$B_URL" "['ssd_cache']['hits']")" -ge $((n_prompt / 16)) ]
check "a: identical greedy text" [ "$(j "$r1" "['text']")" = "$(j "$r2" "['text']")" ]
e2e_stop "$B_PID"

# ---- b. the same DIR under another format: no false hit, nothing lost
e2e_server C --model "$MODEL" --ctx 1024 --kv-quant 4 --ssd-cache "$DIR" || exit 1
r3=$($PY "$REQ" "$C_URL" 0 32 "$LONG")
check "b: q4 on the q8 DIR: no false hit (cached $(j "$r3" "['cached']"))" [ "$(j "$r3" "['cached']")" = 0 ]
check "b: no SSD hit either" [ "$(stat_of "$C_URL" "['ssd_cache']['hits']")" = 0 ]
skipped=$(stat_of "$C_URL" "['ssd_cache']['skipped']")
check "b: the q8 entries are skipped ($skipped), not quarantined" \
  bash -c "[ '$skipped' = '$q8_entries' ] && [ '$(stat_of "$C_URL" "['ssd_cache']['quarantined']")' = 0 ] && [ -z \"\$(ls '$DIR/quarantine')\" ]"
curl -s -X POST "$C_URL/admin/cache/flush" >/dev/null
q4_entries=$(stat_of "$C_URL" "['ssd_cache']['entries']")
e2e_stop "$C_PID"
e2e_server Q4 --model "$MODEL" --ctx 1024 --kv-quant 4 || exit 1
r4=$($PY "$REQ" "$Q4_URL" 0 32 "$LONG")
check "b: q4 text equals a fresh q4 server's" [ "$(j "$r3" "['text']")" = "$(j "$r4" "['text']")" ]
e2e_stop "$Q4_PID"
e2e_server D --model "$MODEL" --ctx 1024 --kv-quant 8 --ssd-cache "$DIR" || exit 1
r5=$($PY "$REQ" "$D_URL" 0 32 "$LONG")
check "b: back on q8 the prefix is still cached ($(j "$r5" "['cached']") of $n_prompt)" \
  [ "$(j "$r5" "['cached']")" -ge $((n_prompt - 16)) ]
check "b: ... with the q8 text" [ "$(j "$r1" "['text']")" = "$(j "$r5" "['text']")" ]
check "b: the q4 entries are skipped in turn ($q4_entries)" \
  [ "$(stat_of "$D_URL" "['ssd_cache']['skipped']")" = "$q4_entries" ]
e2e_stop "$D_PID"

# ---- c. two block classes + generation checkpoints: kill -9, retry, resume
CK="$E2E_TMP/ck"
serve_ck() { e2e_server S --model "$MODEL" --ctx 1024 --kv-quant 4 --quantized-kv-start 32 \
  --ssd-cache "$CK" --generation-checkpoint 16; }
n_ckpt() { ls "$CK" | grep -c '^ck-'; }
SEEDED='{"temperature":0.8,"seed":42,"ignore_eos":true}'
serve_ck || exit 1
check "c: two block classes (format $(stat_of "$S_URL" "['kv']['kv_format']"), $(stat_of "$S_URL" "['kv']['blocks_full']") f32 blocks)" \
  [ "$(stat_of "$S_URL" "['kv']['blocks_full']")" -gt 0 ]
ref=$($PY "$REQ" "$S_URL" -5 200 "$SEEDED")
killed=$($PY "$KILL" "$S_URL" "$S_PID" 120 5 200 "$SEEDED")
wait "$S_PID" 2>/dev/null
check "c: killed after $(j "$killed" "['chunks']") of 200 tokens, a checkpoint is on disk" [ "$(n_ckpt)" = 1 ]
serve_ck || exit 1
again=$($PY "$REQ" "$S_URL" -5 200 "$SEEDED")
check "c: the retry resumed ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
check "c: identical to the uninterrupted run" [ "$(j "$ref" "['text']")" = "$(j "$again" "['text']")" ]
check "c: nothing quarantined" [ "$(stat_of "$S_URL" "['ssd_cache']['quarantined']")" = 0 ]
curl -s -X POST "$S_URL/admin/cache/flush" >/dev/null
check "c: the checkpoint is removed once the request completes" [ "$(n_ckpt)" = 0 ]
e2e_stop "$S_PID"

# ---- d. batching + quantized KV: concurrent == alone (cold, sharing a prefix),
# then each alone (its prefix from the cache)
e2e_server BT --model "$MODEL" --ctx 1024 --kv-quant 8 --batch 4 || exit 1
pids=()
for i in 1 2 3 4; do
  $PY "$REQ" "$BT_URL" 0 48 "$(prompt "$i" 200 shared)" > "$E2E_TMP/conc$i.json" &
  pids+=($!)
done
wait "${pids[@]}" # not a bare wait: the servers are background jobs too
steps=$(stat_of "$BT_URL" "['engine']['steps']")
same=1
for i in 1 2 3 4; do
  alone=$($PY "$REQ" "$BT_URL" 0 48 "$(prompt "$i" 200 shared)")
  [ "$(j "$alone" "['text']")" = "$(j "$(cat "$E2E_TMP/conc$i.json")" "['text']")" ] || same=0
  [ "$(j "$alone" "['cached']")" -gt 0 ] || same=0
done
check "d: 4 concurrent q8 requests ($steps steps, < 4 x 48: batched) each equal the request alone" \
  bash -c "[ $same = 1 ] && [ $steps -lt 192 ]"
e2e_stop "$BT_PID"

# ---- e. --memory-budget: q4 vs f32 KV (batch 1, a budget ~1-2 MB over the fixed part)
BUDGET=0.12358 # 0.1068 + the 16 MiB of default --request-memory
e2e_server E0 --model "$MODEL" --ctx 65536 --batch 1 --memory-budget $BUDGET || exit 1
e2e_server E4 --model "$MODEL" --ctx 65536 --batch 1 --memory-budget $BUDGET --kv-quant 4 || exit 1
ok=1
for s in E0 E4; do
  u=${s}_URL
  f_bpt=$(fit_of "${!u}" "['kv_bytes_per_token']"); s_bpt=$(stat_of "${!u}" "['kv']['kv_bytes_per_token']")
  a_bpt=$(stat_of "${!u}" "['admission']['kv_bytes_per_token']")
  f_safe=$(fit_of "${!u}" "['max_safe_context']"); s_safe=$(stat_of "${!u}" "['admission']['max_safe_context']")
  echo "  $s: kv $(stat_of "${!u}" "['kv']['kv_format']") $s_bpt B/token, max safe context $s_safe, usable $(stat_of "${!u}" "['admission']['usable_bytes']") B"
  [ "$f_bpt" = "$s_bpt" ] && [ "$a_bpt" = "$s_bpt" ] && [ "$f_safe" = "$s_safe" ] || ok=0
  [ "$(fit_of "${!u}" "['kv_pool_bytes']")" = "$(stat_of "${!u}" "['kv']['bytes']")" ] || ok=0
done
check "e: /fit and /stats agree on bytes per token, max safe context and pool bytes" [ $ok = 1 ]
check "e: bytes per token: f32 2048, q4g32 384" \
  bash -c "[ $(stat_of "$E0_URL" "['kv']['kv_bytes_per_token']") = 2048 ] && [ $(stat_of "$E4_URL" "['kv']['kv_bytes_per_token']") = 384 ]"
safe0=$(stat_of "$E0_URL" "['admission']['max_safe_context']"); safe4=$(stat_of "$E4_URL" "['admission']['max_safe_context']")
use0=$(stat_of "$E0_URL" "['admission']['usable_bytes']"); use4=$(stat_of "$E4_URL" "['admission']['usable_bytes']")
# safe = usable / (bytes per token + 64 B of block metadata / 16 tokens), rounded down
# to a block; usable shrinks a little at the larger context (attention scratch), so
# the ratio of contexts is the byte ratio (2048/384 = 5.33) times the usable ratio
check "e: max safe context q4 $safe4 vs f32 $safe0 (x$($PY -c "print(round($safe4/$safe0, 2))"), byte ratio 5.33, usable ratio $($PY -c "print(round($use4/$use0, 3))"))" \
  $PY -c "
r = $safe4 / $safe0; want = 2048 / 384 * $use4 / $use0
ok = 0.85 * 2048 / 384 <= r <= 2048 / 384 and abs(r - want) / want < 0.03
ok = ok and $safe0 * 2052 <= $use0 < ($safe0 + 32) * 2052 and $safe4 * 388 <= $use4 < ($safe4 + 32) * 388
raise SystemExit(0 if ok else 1)"
OVER=$(prompt 4 3000)
code0=$(vcurl -s -o "$E2E_TMP/over0.json" -w '%{http_code}' "$E0_URL/v1/completions" \
  -H 'Content-Type: application/json' -d "$($PY -c "import json,sys; d=json.loads(sys.argv[1]); d['max_tokens']=8; print(json.dumps(d))" "$OVER")")
r6=$($PY "$REQ" "$E4_URL" 0 8 "$OVER")
check "e: a $(j "$r6" "['prompt']")-token prompt (> $safe0) is refused at f32 ($code0, $(grep -o 'context_over_budget' "$E2E_TMP/over0.json"))" \
  bash -c "[ $code0 = 400 ] && grep -q context_over_budget '$E2E_TMP/over0.json' && [ $(j "$r6" "['prompt']") -gt $safe0 ]"
check "e: ... and served at 4-bit ($(j "$r6" "['finish']"))" [ "$(j "$r6" "['finish']")" = length ]
e2e_stop "$E0_PID"; e2e_stop "$E4_PID"

# ---- f. --kv-budget 0.0005 GB (500,000 B): ~150 + 200 tokens x 2048 B is over it, x 640 B fits
e2e_server K0 --model "$MODEL" --ctx 1024 --kv-budget 0.0005 || exit 1
e2e_server K8 --model "$MODEL" --ctx 1024 --kv-budget 0.0005 --kv-quant 8 || exit 1
BODY=$($PY -c "
import json, sys
sys.path.insert(0, '$E2E_DIR')
from ssd_req import prompt_for
print(json.dumps({'prompt': prompt_for(5)[:400], 'max_tokens': 200, 'temperature': 0, 'ignore_eos': True}))")
codek0=$(vcurl -s -o "$E2E_TMP/k0.json" -w '%{http_code}' "$K0_URL/v1/completions" -H 'Content-Type: application/json' -d "$BODY")
codek8=$(vcurl -s -o "$E2E_TMP/k8.json" -w '%{http_code}' "$K8_URL/v1/completions" -H 'Content-Type: application/json' -d "$BODY")
check "f: over the kv budget at f32 ($codek0: $(grep -o '[0-9]* bytes = [0-9]* bytes' "$E2E_TMP/k0.json"))" \
  bash -c "[ $codek0 = 400 ] && grep -q '2048 bytes' '$E2E_TMP/k0.json'"
check "f: fits at 8-bit ($codek8, projection at $(stat_of "$K8_URL" "['admission']['kv_bytes_per_token']") B/token)" \
  bash -c "[ $codek8 = 200 ] && [ $(stat_of "$K8_URL" "['admission']['kv_bytes_per_token']") = 640 ]"
# with --quantized-kv-start 256 the first 256 positions are f32 again: over the budget
e2e_server KS --model "$MODEL" --ctx 1024 --kv-budget 0.0005 --kv-quant 8 --quantized-kv-start 256 || exit 1
codeks=$(vcurl -s -o "$E2E_TMP/ks.json" -w '%{http_code}' "$KS_URL/v1/completions" -H 'Content-Type: application/json' -d "$BODY")
check "f: ... but not with its first 256 positions in f32 ($codeks: $(grep -o '= [0-9]* bytes) is over' "$E2E_TMP/ks.json"))" \
  bash -c "[ $codeks = 400 ] && grep -q 'quantized-kv-start' '$E2E_TMP/ks.json'"
e2e_stop "$K0_PID"; e2e_stop "$K8_PID"; e2e_stop "$KS_PID"
# ---- g. sliding window x q8 x SSD tier x checkpoints x restart
SWA="$KILN_BINARY_DIR/test-models/e2e-swa-w24"
if [ ! -f "$SWA/model.safetensors" ]; then
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch mistral --dtype f32 --sliding-window 24 \
    --out "$SWA.tmp$$" >/dev/null && { mv -T "$SWA.tmp$$" "$SWA" 2>/dev/null || rm -rf "$SWA.tmp$$"; }
fi
SDIR="$E2E_TMP/ssd-swa"
SWA_FLAGS=(--model "$SWA" --ctx 2048 --batch 2 --kv-quant 8 --ssd-cache "$SDIR" --generation-checkpoint 16)
e2e_server G1 "${SWA_FLAGS[@]}" || exit 1
g1=$($PY "$REQ" "$G1_URL" 3 300 '{"ignore_eos": true}')
gp=$(j "$g1" "['prompt']")
check "g: window 24: $gp + 300 positions in a $(stat_of "$G1_URL" "['kv']['blocks_total']")-block pool (at most $(stat_of "$G1_URL" "['kv']['seq_max_blocks']") held)" \
  bash -c "[ '$(j "$g1" "['finish']")' = length ] && [ $(stat_of "$G1_URL" "['kv']['blocks_total']") -lt $(( (gp + 300) / 16 )) ]"
curl -s -X POST "$G1_URL/admin/cache/flush" >/dev/null
e2e_stop "$G1_PID"
e2e_server G2 "${SWA_FLAGS[@]}" || exit 1
g2=$($PY "$REQ" "$G2_URL" 3 300 '{"ignore_eos": true}')
gh=$(stat_of "$G2_URL" "['ssd_cache']['hits']")
check "g: after the restart $(j "$g2" "['cached']") of $gp prompt tokens cached, $gh blocks read from disk (the window's)" \
  bash -c "[ $(j "$g2" "['cached']") -ge $((gp - 16)) ] && [ $gh -ge 1 ] && [ $gh -le 3 ]"
check "g: identical greedy text" [ "$(j "$g1" "['text']")" = "$(j "$g2" "['text']")" ]
e2e_stop "$G2_PID"
echo "kv compose: $(($(date +%s) - T0)) s"
e2e_done
