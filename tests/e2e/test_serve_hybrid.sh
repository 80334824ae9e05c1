#!/usr/bin/env bash
# test_serve_hybrid.sh — a hybrid Qwen3.5-shaped model (gated DeltaNet +
# gated attention; docs/hybrid.md) served end to end: 8 concurrent chat
# clients with a shared system prompt equal their solo runs and hit the
# cache, a repeated 20-token prompt hits, a conversation resumes turn by turn,
# memory goes back to baseline (also under --kv-quant 8 with the SSD tier, and
# after its restart); kill -9 mid-generation with
# --generation-checkpoint and the retry resumes with the same text (also while
# drafting), --spec mtp answers as a plain server, and the
# prefix survives a restart through the SSD tier.
. "$(dirname "$0")/lib.sh"
e2e_need node
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
KILL="$E2E_DIR/ssd_kill.py"
MODEL="$KILN_BINARY_DIR/test-models/e2e-qwen35-tiny-f32"
if [ ! -f "$MODEL/model.safetensors" ]; then
  mkdir -p "$KILN_BINARY_DIR/test-models"
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3_5 --dtype f32 --out "$MODEL.tmp$$" >/dev/null &&
    { mv -T "$MODEL.tmp$$" "$MODEL" 2>/dev/null || rm -rf "$MODEL.tmp$$"; }
fi
[ -f "$MODEL/model.safetensors" ] || e2e_skip "cannot make the test model (python3-numpy missing?)"
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
same_text() { $PY -c "import json,sys; sys.exit(json.loads(sys.argv[1])['text'] != json.loads(sys.argv[2])['text'])" "$1" "$2"; }

e2e_server HY --model "$MODEL" --ctx 1024 --batch 8 || exit 1
e2e_server FRESH --model "$MODEL" --ctx 1024 --batch 8 || exit 1
run_node hybrid.test.mjs --url "$HY_URL" --fresh "$FRESH_URL"
e2e_stop "$HY_PID"
e2e_stop "$FRESH_PID"

# the same through --kv-quant 8 (attention K/V quantized, the state f32) with
# the SSD tier on; then the prefix survives a restart from disk
DQ="$E2E_TMP/q8"
e2e_server Q --model "$MODEL" --ctx 4096 --batch 8 --kv-quant 8 --ssd-cache "$DQ" || exit 1
e2e_server QF --model "$MODEL" --ctx 4096 --batch 8 --kv-quant 8 || exit 1
run_node hybrid.test.mjs --url "$Q_URL" --fresh "$QF_URL"
qcold=$($PY "$REQ" "$Q_URL" 4 8)
curl -s -X POST "$Q_URL/admin/cache/flush" >/dev/null
e2e_stop "$Q_PID"
e2e_server Q --model "$MODEL" --ctx 4096 --batch 8 --kv-quant 8 --ssd-cache "$DQ" || exit 1
qwarm=$($PY "$REQ" "$Q_URL" 4 8)
check "--kv-quant 8: after a restart the prompt hits from disk (cached $(j "$qwarm" "['cached']") of $(j "$qwarm" "['prompt']"))" \
  [ "$(j "$qwarm" "['cached']")" -ge $(( $(j "$qwarm" "['prompt']") - 16 )) ]
check "--kv-quant 8: and serves the same text" same_text "$qcold" "$qwarm"
e2e_stop "$Q_PID"
e2e_stop "$QF_PID"

# kill -9 mid-generation: the checkpoint carries the state, the retry resumes
DIR="$E2E_TMP/ck"
serve() { e2e_server "$1" --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" --generation-checkpoint 10; }
serve S || exit 1
ARGS='{"temperature":0.8,"seed":42,"ignore_eos":true}'
ref=$($PY "$REQ" "$S_URL" -5 3000 "$ARGS")
killed=$(KILN_KILL_SETTLE_CKPT=1 KILN_KILL_SETTLE_DIR="$DIR" $PY "$KILL" "$S_URL" "$S_PID" 150 5 3000 "$ARGS")
wait "$S_PID" 2>/dev/null
check "killed mid-generation ($(j "$killed" "['chunks']") chunks), a checkpoint is on disk" \
  [ "$(ls "$DIR" | grep -c '^ck-')" = 1 ]
serve S || exit 1
again=$($PY "$REQ" "$S_URL" -5 3000 "$ARGS")
check "the retry resumed ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
check "identical to the uninterrupted run" same_text "$ref" "$again"
# the same while drafting (n-gram): killed between verifications, the retry
# (drafting too) resumes and equals the uninterrupted run without drafting
SARGS='{"temperature":0.8,"seed":42,"ignore_eos":true,"speculative":"ngram"}'
e2e_stop "$S_PID"
rm -f "$DIR"/ck-*
serve S || exit 1
killed=$(KILN_KILL_SETTLE_CKPT=1 KILN_KILL_SETTLE_DIR="$DIR" $PY "$KILL" "$S_URL" "$S_PID" 150 5 3000 "$SARGS")
wait "$S_PID" 2>/dev/null
check "drafting: killed mid-generation, a checkpoint is on disk" [ "$(ls "$DIR" | grep -c '^ck-')" = 1 ]
serve S || exit 1
again=$($PY "$REQ" "$S_URL" -5 3000 "$SARGS")
check "drafting: the retry resumed ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
check "drafting: identical to the uninterrupted run without drafting" same_text "$ref" "$again"
# the prefix (KV + state snapshots) survives a restart through the SSD tier
cold=$($PY "$REQ" "$S_URL" 3 8)
curl -s -X POST "$S_URL/admin/cache/flush" >/dev/null
e2e_stop "$S_PID"
serve S || exit 1
warm=$($PY "$REQ" "$S_URL" 3 8)
check "after a restart the prompt hits from disk (cached $(j "$warm" "['cached']") of $(j "$warm" "['prompt']"))" \
  [ "$(j "$warm" "['cached']")" -ge $(( $(j "$warm" "['prompt']") - 16 )) ]
check "and serves the same text" same_text "$cold" "$warm"
check "nothing quarantined" [ "$(curl -s "$S_URL/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['ssd_cache']['quarantined'])")" = 0 ]
e2e_stop "$S_PID"

# --spec mtp: the model's own multi-token-prediction head drafts (every step,
# --spec-fixed); greedy and seeded answers equal a plain server's
e2e_server M --model "$MODEL" --ctx 1024 --batch 4 --spec mtp --spec-fixed || exit 1
e2e_server P --model "$MODEL" --ctx 1024 --batch 4 || exit 1
for a in '{"ignore_eos":true}' '{"temperature":0.8,"seed":7,"ignore_eos":true}'; do
  mt=$($PY "$REQ" "$M_URL" -5 60 "$a")
  pt=$($PY "$REQ" "$P_URL" -5 60 "$a")
  check "--spec mtp: $a answers as the plain server" same_text "$pt" "$mt"
done
mstat=$(curl -s "$M_URL/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['engine']['speculative']['by_method']['mtp']['drafted'])")
check "--spec mtp: the head drafted ($mstat tokens, /stats by_method.mtp)" [ "$mstat" -gt 0 ]
e2e_stop "$M_PID"
e2e_stop "$P_PID"
e2e_done
