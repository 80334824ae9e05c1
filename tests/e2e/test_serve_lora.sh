#!/usr/bin/env bash
# test_serve_lora.sh — LoRA adapters through `kiln serve` (docs/lora.md): a generated
# Qwen3 model with a PEFT and an mlx-lm adapter (tools/make-test-lora), served with
# --lora; lora.test.mjs drives it with the official openai client (listing, model
# "NAME" / "<id>:NAME" / adapters stacks, concurrent requests on different adapters each
# equal to its own solo run, prefix cache never crossing adapters, 404/400s); bad
# adapter folders stop the server at startup with a message.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null || e2e_skip "python3-numpy is not installed"
BASE=$(e2e_chat_model) || exit 1
ML="/usr/bin/python3 $KILN_SOURCE_DIR/tools/make-test-lora"
$ML --base "$BASE" --format peft --rank 8 --alpha 16 --targets q,k,v,o,gate,up,down --out "$E2E_TMP/sql" || exit 1
$ML --base "$BASE" --format mlx --rank 4 --scale 2 --targets q,v,down --seed 4 --out "$E2E_TMP/ad/chat" || exit 1
ID=$(basename "$BASE")

e2e_server S --model "$BASE" --ctx 1024 --batch 8 --lora sql="$E2E_TMP/sql" --lora-dir "$E2E_TMP/ad" || exit 1
check "startup lines name each adapter" grep -q 'kiln: adapter chat (mlx-lm, rank 4' "$S_LOG"
run_node lora.test.mjs --url "$S_URL" --id "$ID"
check "SIGTERM exits 0" e2e_stop "$S_PID"

# --lora-default: requests naming nothing get the adapter
e2e_server D --model "$BASE" --ctx 1024 --lora sql="$E2E_TMP/sql" --lora-default sql || exit 1
body='{"prompt":"Once upon a time","max_tokens":6,"temperature":0}'
a=$(curl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "$body" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
b=$(curl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "${body%\}},\"adapters\":[{\"name\":\"sql\"}]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
c=$(curl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "${body%\}},\"adapters\":[]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
check "--lora-default: no model field = the default adapter" [ -n "$a" -a "$a" = "$b" ]
check "--lora-default: adapters [] = the base model" [ "$a" != "$c" ]
e2e_stop "$D_PID"

# bad adapter folders: the server refuses to start, saying why
/usr/bin/python3 "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3 --dtype f32 --shape custom --ffn 160 --out "$E2E_TMP/other" >/dev/null || exit 1
$ML --base "$E2E_TMP/other" --format peft --rank 4 --targets down --out "$E2E_TMP/wrong" || exit 1
refuse() { # refuse WHAT PATTERN flags...
  local what=$1 pat=$2; shift 2
  local out; out=$("$KILN_BIN" serve --model "$BASE" --port 0 "$@" 2>&1); local rc=$?
  check "$what: refused at startup" [ $rc -ne 0 ]
  check "$what: says '$pat'" grep -q -- "$pat" <<<"$out"
}
refuse "missing folder" "no adapter_config.json" --lora x="$E2E_TMP/none"
refuse "wrong base" "down_proj.lora_A.weight' has shape" --lora x="$E2E_TMP/wrong"
refuse "bad spec" "expected NAME=DIR" --lora "$E2E_TMP/sql"
refuse "bad name" "adapter name" --lora "a/b=$E2E_TMP/sql"
refuse "unknown default" "no adapter of that name" --lora sql="$E2E_TMP/sql" --lora-default nope
e2e_done
