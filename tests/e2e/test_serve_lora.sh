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
# embeddings run on the adapter the `model` field names, as generation does
emb() { vcurl -s "$S_URL/v1/embeddings" -H 'content-type: application/json' -d "{\"input\":\"Once upon a time\",\"model\":\"$1\"}" |
  /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d["data"][0]["embedding"][:8]) + " " + d["model"] if "data" in d else d["error"]["code"])'; }
e_base=$(emb "$ID"); e_sql=$(emb sql); e_sql2=$(emb "$ID:sql"); e_nope=$(emb "$ID:nope")
check "embeddings: model sql differs from the base, <id>:sql is the same vectors" \
  [ "${e_sql% *}" != "${e_base% *}" -a "${e_sql% *}" = "${e_sql2% *}" -a "${e_sql##* }" = sql ]
check "embeddings: an unknown <id>:NAME is a 404" [ "$e_nope" = model_not_found -o "$e_nope" = not_found ]
check "SIGTERM exits 0" e2e_stop "$S_PID"

# --lora-default: requests naming nothing get the adapter
e2e_server D --model "$BASE" --ctx 1024 --lora sql="$E2E_TMP/sql" --lora-default sql || exit 1
body='{"prompt":"Once upon a time","max_tokens":6,"temperature":0}'
a=$(vcurl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "$body" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
b=$(vcurl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "${body%\}},\"adapters\":[{\"name\":\"sql\"}]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
c=$(vcurl -s "$D_URL/v1/completions" -H 'content-type: application/json' -d "${body%\}},\"adapters\":[]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
check "--lora-default: no model field = the default adapter" [ -n "$a" -a "$a" = "$b" ]
check "--lora-default: adapters [] = the base model" [ "$a" != "$c" ]
e2e_stop "$D_PID"

# another base model and an adapter made for it
/usr/bin/python3 "$KILN_SOURCE_DIR/tools/make-test-model" --arch qwen3 --dtype f32 --shape custom --ffn 160 --out "$E2E_TMP/other" >/dev/null || exit 1
$ML --base "$E2E_TMP/other" --format peft --rank 4 --targets down --out "$E2E_TMP/wrong" || exit 1

# hot load / unload (POST/DELETE/GET /v1/adapters): admin only, from --lora-dir only
mkdir -p "$E2E_TMP/hot"
e2e_server H --model "$BASE" --ctx 1024 --batch 8 --api-key k --lora sql="$E2E_TMP/sql" \
  --lora-dir "$E2E_TMP/hot" || exit 1
cp -r "$E2E_TMP/sql" "$E2E_TMP/hot/sqlcopy"   # the same adapter, arriving after startup
cp -r "$E2E_TMP/wrong" "$E2E_TMP/hot/wrong"   # another base model's adapter
ln -s "$E2E_TMP/sql" "$E2E_TMP/hot/link"      # a symlink out of --lora-dir
K=(-H 'authorization: Bearer k' -H 'content-type: application/json')
post() { vcurl -s -o "$E2E_TMP/out" -w '%{http_code}' "${K[@]}" -X POST "$1/v1/adapters" -d "$2"; }
gen() { # gen URL MODEL MAX -> the text
  vcurl -s "${K[@]}" "$1/v1/completions" \
    -d "{\"model\":\"$2\",\"prompt\":\"Once upon a time\",\"max_tokens\":$3,\"temperature\":0}" |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["choices"][0]["text"] if "choices" in d else d)'; }
code=$(vcurl -s -o /dev/null -w '%{http_code}' -X POST "$H_URL/v1/adapters" -d '{"name":"x","path":"sqlcopy"}')
check "hot: POST without the key is 401" [ "$code" = 401 ]
check "hot: a path outside --lora-dir is 403" [ "$(post "$H_URL" "{\"name\":\"x\",\"path\":\"$E2E_TMP/sql\"}")" = 403 ]
check "hot: '..' out of --lora-dir is 403" [ "$(post "$H_URL" '{"name":"x","path":"../sql"}')" = 403 ]
check "hot: a symlink leading out of --lora-dir is 403" [ "$(post "$H_URL" '{"name":"x","path":"link"}')" = 403 ]
check "hot: a bad name is 400" [ "$(post "$H_URL" '{"name":"a/b","path":"sqlcopy"}')" = 400 ]
code=$(post "$H_URL" '{"name":"w","path":"wrong"}')
check "hot: another base's adapter is a 400 naming the tensor" \
  bash -c "[ $code = 400 ] && grep -q 'down_proj.lora_A.weight' '$E2E_TMP/out'"
check "hot: POST loads sqlcopy (200)" [ "$(post "$H_URL" '{"name":"hot","path":"sqlcopy"}')" = 200 ]
check "hot: the same name again is 409" [ "$(post "$H_URL" '{"name":"hot","path":"sqlcopy"}')" = 409 ]
vcurl -s "${K[@]}" "$H_URL/v1/adapters" > "$E2E_TMP/list"
check "hot: GET /v1/adapters lists it as hot, the startup one not" /usr/bin/python3 -c "
import json; d = {a['name']: a for a in json.load(open('$E2E_TMP/list'))['data']}
assert d['hot']['hot'] and not d['sql']['hot'] and d['hot']['bytes'] > 0, d"
check "hot: /v1/models lists it" bash -c "vcurl -s -H 'authorization: Bearer k' '$H_URL/v1/models' | grep -q '\"id\":\"hot\"'"
t_sql=$(gen "$H_URL" sql 12); t_hot=$(gen "$H_URL" "$ID:hot" 12); t_base=$(gen "$H_URL" "$ID" 12)
echo "  sql: $t_sql | hot: $t_hot | base: $t_base"
check "hot: the hot-loaded copy writes what the startup adapter writes, not what the base writes" \
  [ -n "$t_sql" -a "$t_sql" = "$t_hot" -a "$t_hot" != "$t_base" ]
# a long request on it, unloaded while it runs: it finishes on the adapter
vcurl -s "${K[@]}" "$H_URL/v1/completions" \
  -d "{\"model\":\"$ID:hot\",\"prompt\":\"Once upon a time\",\"max_tokens\":300,\"temperature\":0,\"ignore_eos\":true}" \
  > "$E2E_TMP/long.json" &
lp=$!
for _ in $(seq 1 200); do
  n=$(curl -s -H 'authorization: Bearer k' "$H_URL/stats" |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["batch"]["active"])' 2>/dev/null)
  [ "${n:-0}" -ge 1 ] && break
  sleep 0.05
done
code=$(vcurl -s -o /dev/null -w '%{http_code}' "${K[@]}" -X DELETE "$H_URL/v1/adapters/hot")
check "hot: DELETE while a request runs on it is 200" [ "$code" = 200 ]
wait $lp
check "hot: the running request finished on it (300 tokens, starting with the adapter's text)" \
  /usr/bin/python3 -c "
import json, sys; d = json.load(open('$E2E_TMP/long.json'))
assert d['usage']['completion_tokens'] == 300 and d['choices'][0]['text'].startswith(sys.argv[1]), d" "$t_hot"
code=$(vcurl -s -o /dev/null -w '%{http_code}' "${K[@]}" "$H_URL/v1/completions" -d "{\"model\":\"$ID:hot\",\"prompt\":\"a\",\"max_tokens\":1}")
check "hot: after DELETE, <id>:hot is 404" [ "$code" = 404 ]
vcurl -s "${K[@]}" "$H_URL/v1/adapters" > "$E2E_TMP/list"
check "hot: after DELETE, the list drops it" /usr/bin/python3 -c "
import json; n = [a['name'] for a in json.load(open('$E2E_TMP/list'))['data']]
assert n == ['sql'], n"
code=$(vcurl -s -o /dev/null -w '%{http_code}' "${K[@]}" -X DELETE "$H_URL/v1/adapters/nope")
check "hot: DELETE of an unknown adapter is 404" [ "$code" = 404 ]
code=$(vcurl -s -o /dev/null -w '%{http_code}' "${K[@]}" -X PUT "$H_URL/v1/adapters")
check "hot: PUT is 405" [ "$code" = 405 ]
check "hot: SIGTERM exits 0" e2e_stop "$H_PID"
rm -rf "$E2E_TMP/hot/wrong" "$E2E_TMP/hot/link" # --lora-dir loads every folder at startup
# no --api-key: changes only over the --unix socket
e2e_server U --model "$BASE" --ctx 1024 --lora-dir "$E2E_TMP/hot" --unix "$E2E_TMP/kiln.sock" || exit 1
code=$(vcurl -s -o /dev/null -w '%{http_code}' -X POST "$U_URL/v1/adapters" -d '{"name":"u","path":"sqlcopy"}')
check "hot: without --api-key, POST over TCP is 403" [ "$code" = 403 ]
code=$(vcurl -s -o /dev/null -w '%{http_code}' --unix-socket "$E2E_TMP/kiln.sock" -X POST http://kiln/v1/adapters -d '{"name":"u","path":"sqlcopy"}')
check "hot: over the --unix socket it loads (200)" [ "$code" = 200 ]
e2e_stop "$U_PID"
# --lora-memory caps hot loads, and the plan counts it
e2e_server M --model "$BASE" --ctx 1024 --api-key k --lora-dir "$E2E_TMP/hot" --lora-memory 0.01 || exit 1
code=$(post "$M_URL" '{"name":"h","path":"sqlcopy"}')
check "hot: over --lora-memory is a 400 naming it" bash -c "[ $code = 400 ] && grep -q -- '--lora-memory' '$E2E_TMP/out'"
check "hot: /stats admission counts the startup adapters and the --lora-memory room" bash -c "
  curl -s -H 'authorization: Bearer k' '$M_URL/stats' |
  /usr/bin/python3 -c 'import json,sys; a=json.load(sys.stdin)[\"admission\"]; assert a[\"adapter_bytes\"] >= 10485, a'"
e2e_stop "$M_PID"

# bad adapter folders: the server refuses to start, saying why
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
