#!/usr/bin/env bash
# test_webui_browser.sh — the chat page at / in a real browser (Debian's chromium driven
# by playwright-core from tests/webui; no browser download): chat mode on a ChatML
# test model slow enough to stop mid-stream (streaming, stop cancels on the server,
# regenerate, edit-and-resend, reload, search, rename, delete, export/import, inert
# model output, thinking/tool-call blocks, settings kept), then a restart with the
# SSD tier: the conversation is still there and its prefix comes back cached;
# completion mode on the built-in stories260K (no --model) behind --api-key.
# Screenshots: $KILN_BINARY_DIR/webui-screenshots/*.png.
. "$(dirname "$0")/lib.sh"
e2e_need node
CHROMIUM=${KILN_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || e2e_skip "no chromium at $CHROMIUM (scripts/setup.sh installs Debian's)"
WEBUI="$KILN_SOURCE_DIR/tests/webui"
[ -d "$WEBUI/node_modules/playwright-core" ] || e2e_skip "run npm install in tests/webui (scripts/test.sh does)"
SHOTS="$KILN_BINARY_DIR/webui-screenshots"
rm -rf "$SHOTS"; mkdir -p "$SHOTS"

M="$KILN_BINARY_DIR/test-models/webui-slow-512-f32"
if [ ! -f "$M/model.safetensors" ]; then
  mkdir -p "$KILN_BINARY_DIR/test-models"
  "$KILN_SOURCE_DIR/tools/make-test-model" --arch llama --dtype f32 --shape custom --hidden 512 --layers 8 \
    --heads 8 --kv-heads 2 --head-dim 64 --ffn 1536 --out "$M.tmp$$" >/dev/null &&
    { mv -T "$M.tmp$$" "$M" 2>/dev/null || rm -rf "$M.tmp$$"; }
fi
[ -f "$M/model.safetensors" ] || e2e_skip "cannot make the test model (python3-numpy missing?)"

web() { (cd "$WEBUI" && KILN_CHROMIUM="$CHROMIUM" node chat.test.mjs "$@" 2>&1); }
tally() { # tally OUTPUT: adds the node file's "N passed, M failed" to ours
  echo "$1"
  local p f
  p=$(tail -n 1 <<<"$1" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\1/p')
  f=$(tail -n 1 <<<"$1" | sed -nE 's/^([0-9]+) passed, ([0-9]+) failed.*/\2/p')
  E2E_PASS=$((E2E_PASS + ${p:-0})); E2E_FAIL=$((E2E_FAIL + ${f:-1}))
}

DATA="$E2E_TMP/data"; SSD="$E2E_TMP/ssd"
e2e_server C --model "$M" --ctx 4096 --batch 2 --data-dir "$DATA" --ssd-cache "$SSD" || exit 1
check "reading the weights shows progress in the log" grep -qE "^loading webui-slow-512-f32: 100% \(9[0-9.]+ MiB/" "$C_LOG"
tally "$(web --url "$C_URL" --model webui-slow-512-f32 --shots "$SHOTS" --mode chat)"
n1=$(curl -s "$C_URL/v1/conversations" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]))')
curl -s -X POST "$C_URL/admin/cache/flush" >/dev/null
check "SIGTERM exits 0" e2e_stop "$C_PID"
e2e_server C --model "$M" --ctx 4096 --batch 2 --data-dir "$DATA" --ssd-cache "$SSD" || exit 1
n2=$(curl -s "$C_URL/v1/conversations" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]))')
check "after a restart the $n1 conversations are all there ($n2)" bash -c "[ '$n1' = '$n2' ] && [ '$n1' -gt 0 ]"
tally "$(web --url "$C_URL" --model webui-slow-512-f32 --shots "$SHOTS" --mode restart)"
e2e_stop "$C_PID"

e2e_server S --api-key test-key --data-dir "$E2E_TMP/data2" || exit 1
check "no --model serves the built-in stories260K" grep -q "serving stories260K" "$S_LOG"
tally "$(web --url "$S_URL" --model stories260K --shots "$SHOTS" --mode completion --key test-key)"
check "the page needs no key, the API does" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' '$S_URL/') = 200 ] && [ \$(curl -s -o /dev/null -w '%{http_code}' '$S_URL/v1/conversations') = 401 ]"
e2e_stop "$S_PID"
ls "$SHOTS"
e2e_done
