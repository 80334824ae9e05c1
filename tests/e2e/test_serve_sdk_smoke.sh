#!/usr/bin/env bash
# test_serve_sdk_smoke.sh — ../shared/tools/sdk_smoke.mjs (the official openai
# and @anthropic-ai/sdk clients, plain and streaming) against `kiln serve`
# with an API key, on the ChatML test model.
. "$(dirname "$0")/lib.sh"
e2e_need node
SMOKE="$KILN_SHARED_DIR/tools/sdk_smoke.mjs"
[ -f "$SMOKE" ] || e2e_skip "no $SMOKE"
[ -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] || e2e_skip "no @anthropic-ai/sdk in tests/e2e/node_modules"
CHAT_MODEL=$(e2e_chat_model) || exit 1
e2e_server CHAT --model "$CHAT_MODEL" --ctx 1024 --api-key test-key --temperature 0 || exit 1
out=$(node "$SMOKE" --modules "$E2E_DIR" --base "$CHAT_URL" 2>&1); rc=$?
echo "$out" | head -n 30
for k in openai.chat openai.chat.stream anthropic.messages anthropic.messages.stream; do
  check "sdk_smoke $k" grep -q "\"$k\": \"ok\"" <<<"$out"
done
check "sdk_smoke exit status" [ $rc -eq 0 ]
check "SIGTERM exits 0" e2e_stop "$CHAT_PID"
e2e_done
