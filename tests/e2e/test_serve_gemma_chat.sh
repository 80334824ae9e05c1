#!/usr/bin/env bash
# test_serve_gemma_chat.sh — Gemma 4's chat format end to end (issue 13 §5):
# a tiny random Gemma 4 model given Gemma 4's control tokens (<|turn>,
# <|channel>, <|tool_call>, <|"|>, … as special tokens) and Google's canonical
# chat template (tests/template/gemma4/gemma4_e2b), served by `kiln serve`,
# driven by the official openai and @anthropic-ai/sdk clients
# (gemma_chat.test.mjs): prompts equal @huggingface/jinja's render, forced
# calls in Gemma 4's syntax come back as tool calls in all three APIs,
# <|tool_response> ends a turn with tools, the thought channel is reasoning.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] || e2e_skip "no @anthropic-ai/sdk in tests/e2e/node_modules"
M="$E2E_TMP/gemma4-chat"
# Gemma 4's control tokens as added special tokens after the test tokenizer's ids,
# <turn|> the end of a turn; the canonical template beside them.
"$KILN_SOURCE_DIR/tools/make-test-model" --arch gemma4 --dtype f32 --shape tiny --vocab 640 --gemma4-chat-tokens \
  --out "$M" >/dev/null || e2e_skip "cannot make the test model (python3-numpy missing?)"
cp "$KILN_SOURCE_DIR/tests/template/gemma4/gemma4_e2b/chat_template.jinja" "$M/chat_template.jinja"
e2e_server G --model "$M" --ctx 2048 || exit 1
run_node gemma_chat.test.mjs --url "$G_URL" --template "$M/chat_template.jinja"
check "SIGTERM exits 0" e2e_stop "$G_PID"
e2e_done
