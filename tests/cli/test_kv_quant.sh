#!/usr/bin/env bash
# test_kv_quant.sh — the KV-format flags on the CLI: `kiln fit --kv-quant`
# bytes per token (scale/bias included), `kiln serve --kv-quant` /stats
# reporting the same kv_format and kv_bytes_per_token as fit and the same
# pool bytes, `kvq-report` output, and bad flag values refused with exit 2.
# A sliding-window model (every layer slides): fit, /fit and /stats agree on
# the window cap and the pool, and --kv-budget admits a request far longer
# than the window because only the window's blocks are held.
set -u
KILN=${KILN_BIN:?}
M=${KILN_SHARED_DIR:?}/models/stories260K
PY=/usr/bin/python3
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok $1"; }
no() { fail=$((fail+1)); echo "not ok $1: $2"; }
get() { $PY -c "import json,sys; d=json.loads(sys.argv[1]); [d:=d[k] for k in sys.argv[2:]]; print(d)" "$@"; }
# stories260K: 5 layers, 4 KV heads, head_dim 8 (groups clamp to 8)
for q in off:1280:f32 f16:640:f16 bf16:640:bf16 8:640:q8g8 4:480:q4g8; do
  IFS=: read -r flag bytes fmt <<<"$q"
  j=$("$KILN" fit --model "$M" --ctx 256 --bandwidth 10 --json --kv-quant "$flag") || no "fit_$flag" "exit $?"
  [ "$(get "$j" kv_bytes_per_token)" = "$bytes" ] && [ "$(get "$j" kv_format)" = "$fmt" ] \
    && ok "fit_$flag" || no "fit_$flag" "$j"
done
j=$("$KILN" fit --model "$M" --ctx 256 --batch 2 --bandwidth 10 --json --kv-quant 4 --quantized-kv-start 64)
[ "$(get "$j" kv_format)" = "q4g8@64" ] && [ "$(get "$j" kv_blocks_full)" = 8 ] \
  && [ "$(get "$j" kv_pool_bytes)" = $(( (8 * 1280 + 26 * 480) * 16 )) ] && ok fit_split || no fit_split "$j"
"$KILN" fit --model "$M" --kv-quant 3 >/dev/null 2>&1; [ $? = 2 ] && ok bad_quant || no bad_quant "exit $?"
out=$("$KILN" fit --model "$M" --kv-quant 4 --kv-group 6 2>&1); rc=$?
[ $rc != 0 ] && grep -q "divide head_dim 8" <<<"$out" && ok bad_group || no bad_group "$rc $out"
out=$("$KILN" generate --model "$M" --tokens 1 --kv-quant config 2>&1); rc=$?
[ $rc != 0 ] && grep -q "kv_config.json does not exist" <<<"$out" && ok config_missing || no config_missing "$out"
ids=$("$KILN" generate --model "$M" --tokens 1 --max-tokens 16 --ids --kv-quant 8 | tail -1)
[ "$ids" = "$("$KILN" generate --model "$M" --tokens 1 --max-tokens 16 --ids | tail -1)" ] \
  && ok generate_q8 || no generate_q8 "$ids"
r=$("$KILN" kvq-report --model "$M" --positions 64 --formats 8 --json)
[ "$(get "$r" kv_format)" = q8g8 ] && [ "$(get "$r" positions)" = 65 ] && ok kvq_report || no kvq_report "$r"
# /stats of a server with 4-bit KV and a full-precision prefix
PORT=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$KILN" serve --model "$M" --port "$PORT" --threads 1 --batch 2 --ctx 256 --kv-quant 4 \
  --quantized-kv-start 64 > "$T/serve.out" 2>&1 & pid=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.05; done
s=$(curl -s "http://127.0.0.1:$PORT/stats")
kill -TERM $pid; wait $pid
[ "$(get "$s" kv kv_format)" = "q4g8@64" ] && [ "$(get "$s" kv kv_bytes_per_token)" = 480 ] \
  && [ "$(get "$s" kv bytes)" = "$(get "$j" kv_pool_bytes)" ] && [ "$(get "$s" kv blocks_full)" = 8 ] \
  && ok stats || no stats "$s"
# a synthetic Mistral whose 2 layers slide over 20 positions (q8g16: 192 B/token)
W=$T/swa; $PY "${KILN_SOURCE_DIR:?}/tools/make-test-model" --arch mistral --dtype f32 \
  --sliding-window 20 --out "$W" >/dev/null || no make_swa "exit $?"
j=$("$KILN" fit --model "$W" --ctx 2048 --batch 2 --bandwidth 10 --json --kv-quant 8)
# ceil((20 - 1 + 512) / 16) + 1 = 35 blocks held at most; pool 2 x 36 blocks
[ "$(get "$j" kv_window)" = 20 ] && [ "$(get "$j" sliding_layers)" = 2 ] \
  && [ "$(get "$j" kv_bytes_per_token)" = 192 ] && [ "$(get "$j" kv_bytes_per_token_sliding_layers)" = 192 ] \
  && [ "$(get "$j" kv_bytes_per_token_full_layers)" = 0 ] && [ "$(get "$j" kv_seq_max_blocks)" = 35 ] \
  && [ "$(get "$j" kv_blocks)" = 72 ] && [ "$(get "$j" kv_pool_bytes)" = $((72 * 16 * 192)) ] \
  && [ "$(get "$j" kv_seq_bytes)" = $((35 * 16 * 192)) ] && ok fit_window || no fit_window "$j"
# --kv-budget 110,000 B: 560 positions x 192 B = 107,520 fit; 800 positions would not
"$KILN" serve --model "$W" --port "$PORT" --threads 1 --batch 2 --ctx 2048 --kv-quant 8 \
  --kv-budget 0.00011 > "$T/serve2.out" 2>&1 & pid=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.05; done
body=$($PY -c "import json; print(json.dumps({'prompt': 'Once upon a time, there was a little girl named Lily. ' * 8, 'max_tokens': 700, 'temperature': 0, 'ignore_eos': True}))")
r=$(curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$body")
s=$(curl -s "http://127.0.0.1:$PORT/stats"); fj=$(curl -s "http://127.0.0.1:$PORT/fit")
kill -TERM $pid; wait $pid
[ "$(get "$r" usage completion_tokens)" = 700 ] && [ "$(get "$r" usage prompt_tokens)" -gt 60 ] \
  && ok window_kv_budget || no window_kv_budget "$r"
[ "$(get "$s" kv kv_window)" = 20 ] && [ "$(get "$s" kv sliding_window)" = 20 ] \
  && [ "$(get "$s" kv seq_max_blocks)" = 35 ] && [ "$(get "$s" kv bytes)" = "$(get "$j" kv_pool_bytes)" ] \
  && [ "$(get "$s" kv kv_bytes_per_token_sliding_layers)" = 192 ] && [ "$(get "$s" kv blocks_used)" = 0 ] \
  && [ "$(get "$fj" kv_window)" = 20 ] && [ "$(get "$fj" kv_pool_bytes)" = "$(get "$j" kv_pool_bytes)" ] \
  && ok stats_window || no stats_window "$s $fj"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
