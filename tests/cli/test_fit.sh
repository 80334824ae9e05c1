#!/usr/bin/env bash
# test_fit.sh — `kiln fit` is deterministic, reads only headers, agrees with
# itself across budgets, and its prediction is close to the peak RSS `kiln
# bench` measures for the same context.
set -u
KILN=${KILN_BIN:?}
M=${KILN_SHARED_DIR:?}/models/stories260K
PY=/usr/bin/python3
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok $1"; }
no() { fail=$((fail+1)); echo "not ok $1: $2"; }
a=$("$KILN" fit --model "$M" --ctx 256 --batch 4 --bandwidth 10 --json) || no run "exit $?"
b=$("$KILN" fit --model "$M" --ctx 256 --batch 4 --bandwidth 10 --json)
[ "$a" = "$b" ] && ok deterministic || no deterministic "$a vs $b"
get() { $PY -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
[ "$(get "$a" kv_bytes_per_token)" = 1280 ] && ok kv_per_token || no kv_per_token "$(get "$a" kv_bytes_per_token)"
[ "$(get "$a" kv_blocks)" = $(( (256/16 + 1) * 4 )) ] && ok kv_blocks || no kv_blocks "$(get "$a" kv_blocks)"
# --budget plans as `kiln serve --memory-budget`: the process overhead (binary,
# tokenizer, a default 64 MiB responses store) counts; the pool gets the rest.
# Budgets are placed relative to the fixed part so the test survives other KV formats.
g=$("$KILN" fit --model "$M" --budget 1 --bandwidth 10 --json)
fixed=$(( $(get "$g" budget_bytes) - $(get "$g" usable_bytes) ))
blk=$(( $(get "$g" kv_bytes_per_token) * 16 + 64 ))
gb() { $PY -c "print('%.9f' % ($1 / 1e9))"; }
p1=$("$KILN" fit --model "$M" --budget "$(gb $((fixed + 12 * blk)))" --bandwidth 10 --json)
c1=$(get "$p1" max_safe_context)
c2=$(get "$("$KILN" fit --model "$M" --budget "$(gb $((fixed + 24 * blk)))" --bandwidth 10 --json)" max_safe_context)
[ "$c1" -gt 0 ] && [ "$c2" -gt "$c1" ] && [ "$c1" -le 256 ] && ok budget_monotonic || no budget_monotonic "$c1 $c2"
t=$(get "$("$KILN" fit --model "$M" --ctx "$c1" --bandwidth 10 --json)" total_bytes)
ov=$(get "$p1" overhead_bytes)
[ $((t + ov)) -le $((fixed + 12 * blk + 2 * blk)) ] && ok max_ctx_fits_budget || no max_ctx_fits_budget "$t + $ov"
[ $(( $(get "$p1" total_bytes) + ov )) -le "$(get "$p1" budget_bytes)" ] && ok plan_within_budget || no plan_within_budget "$p1"
"$KILN" fit --model "$M" --budget 0.001 --bandwidth 10 --json >/dev/null 2>"$(mktemp)" && no budget_too_small "exit 0" || ok budget_too_small
# weights are never read: a file with valid headers and zeroed data plans the same
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cp "$M"/*.json "$T/"; $PY - "$M/model.safetensors" "$T/model.safetensors" <<'PYEOF'
import struct,sys
b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]
open(sys.argv[2],'wb').write(b[:8+n]+bytes(len(b)-8-n))
PYEOF
z=$("$KILN" fit --model "$T" --ctx 256 --batch 4 --bandwidth 10 --json)
[ "$z" = "${a/$M/$T}" ] || [ "$(get "$z" total_bytes)" = "$(get "$a" total_bytes)" ] && ok headers_only || no headers_only "$z"
"$KILN" fit --model "$T/nope" >/dev/null 2>&1 && no missing_model "exit 0" || ok missing_model
# a hybrid (Qwen3.5-shaped: 6 gated DeltaNet + 2 attention layers): the state
# per sequence is reported apart from the KV per token (fit and info), from the config alone:
# per DeltaNet layer S [Hv 4, Dk 16, Dv 16] + conv (K-1 = 3) x C (2*2*16 + 4*16), f32
H="$T/hybrid"
if "${KILN_SOURCE_DIR:?}/tools/make-test-model" --arch qwen3_5 --dtype f32 --out "$H" >/dev/null 2>&1; then
  h=$("$KILN" fit --model "$H" --ctx 256 --batch 4 --bandwidth 10 --json)
  sb=$(( (4*16*16 + 3*(2*2*16 + 4*16)) * 4 * 6 ))
  [ "$(get "$h" state_bytes)" = $sb ] && [ "$(get "$h" state_layers)" = 6 ] && ok hybrid_state_bytes || no hybrid_state_bytes "$h"
  [ "$(get "$h" kv_bytes_per_token)" = $(( 2 * 2 * 2 * 32 * 4 )) ] && [ "$(get "$h" kv_layers)" = 2 ] \
    && ok hybrid_kv_only_attention_layers || no hybrid_kv_only_attention_layers "$h"
  [ "$(get "$h" state_bytes_per_seq)" = $((2 * sb)) ] && [ "$(get "$h" state_pool_bytes)" = $(( $(get "$h" state_blocks) * sb )) ] \
    && [ "$(get "$h" state_blocks)" -ge 8 ] && ok hybrid_state_pool || no hybrid_state_pool "$h"
  h8=$("$KILN" fit --model "$H" --ctx 256 --batch 4 --bandwidth 10 --kv-quant 8 --json)
  [ "$(get "$h8" state_bytes)" = $sb ] && [ "$(get "$h8" kv_bytes_per_token)" -lt "$(get "$h" kv_bytes_per_token)" ] \
    && ok hybrid_kv_quant_leaves_state_f32 || no hybrid_kv_quant_leaves_state_f32 "$h8"
  hs=$("$KILN" fit --model "$H" --ctx 256 --batch 4 --bandwidth 10 --state-every 4 --state-blocks 40 --json)
  [ "$(get "$hs" state_every)" = 4 ] && [ "$(get "$hs" state_blocks)" = 40 ] && ok hybrid_state_flags || no hybrid_state_flags "$hs"
  "$KILN" fit --model "$H" --state-every 0 >/dev/null 2>&1 && no hybrid_bad_state_every "exit 0" || ok hybrid_bad_state_every
  "$KILN" fit --model "$H" | grep -q "^state per seq:" && ok hybrid_text_report || no hybrid_text_report "no state line"
  i=$("$KILN" info --model "$H")
  grep -q "^hybrid: *6 gated DeltaNet + 2 gated attention layers (full attention every 4); RoPE on 8 of 32 dims" <<<"$i" &&
    grep -q "^state per seq: *$sb bytes" <<<"$i" && grep -q "^layout: *HF" <<<"$i" && ok hybrid_info || no hybrid_info "$i"
else
  no hybrid_model "make-test-model failed"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
