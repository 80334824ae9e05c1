#!/usr/bin/env bash
# test_serve_tools.sh — tool calls, Anthropic tool use and the Responses API
# through the official openai and @anthropic-ai/sdk clients (tools.test.mjs),
# on the ChatML test model given a tool-capable template (tools_template.jinja).
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] || e2e_skip "no @anthropic-ai/sdk in tests/e2e/node_modules"
CHAT_MODEL=$(e2e_chat_model) || exit 1
TOOL_MODEL="$E2E_TMP/tool-model"
mkdir -p "$TOOL_MODEL" && cp "$CHAT_MODEL"/* "$TOOL_MODEL"/ && cp "$E2E_DIR/tools_template.jinja" "$TOOL_MODEL/chat_template.jinja"
# the same, but the template opens <think> for the model (reasoning + forced calls after it)
THINK_MODEL="$E2E_TMP/think-tool-model"
mkdir -p "$THINK_MODEL" && cp "$TOOL_MODEL"/* "$THINK_MODEL"/
sed -i "s/'<|im_start|>assistant\\\\n' }}{%- endif %}\$/'<|im_start|>assistant\\\\n<think>\\\\n' }}{%- endif %}/" "$THINK_MODEL/chat_template.jinja"
check "think template opens <think>" grep -q "assistant.n<think>" "$THINK_MODEL/chat_template.jinja"
e2e_server TOOLS --model "$TOOL_MODEL" --ctx 1024 || exit 1
e2e_server PLAIN --model "$CHAT_MODEL" --ctx 1024 || exit 1
e2e_server THINK --model "$THINK_MODEL" --ctx 1024 || exit 1
check "the schema validator rejects deliberately broken objects" /usr/bin/python3 "$E2E_DIR/validate_api.py" --self-test
run_node tools.test.mjs --url "$TOOLS_URL" --plain "$PLAIN_URL" --think "$THINK_URL"
check "SIGTERM exits 0 (tools server)" e2e_stop "$TOOLS_PID"
check "SIGTERM exits 0 (plain server)" e2e_stop "$PLAIN_PID"
check "SIGTERM exits 0 (thinking server)" e2e_stop "$THINK_PID"
e2e_done
