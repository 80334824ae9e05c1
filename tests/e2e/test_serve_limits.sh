#!/usr/bin/env bash
# test_serve_limits.sh — depth limits on request JSON and the chat template's
# render limits (limits.test.mjs) through the openai and @anthropic-ai/sdk
# clients and raw HTTP: a 10,000-deep body, deep tool schemas, tool-call
# arguments, chat_template_kwargs and response_format schemas, a template
# that recurses or prints past its limits (limits_template.jinja). Then the
# server still answers and exits 0 on SIGTERM.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] || e2e_skip "no @anthropic-ai/sdk in tests/e2e/node_modules"
CHAT_MODEL=$(e2e_chat_model) || exit 1
TOOL_MODEL="$E2E_TMP/tool-model"
mkdir -p "$TOOL_MODEL" && cp "$CHAT_MODEL"/* "$TOOL_MODEL"/ && cp "$E2E_DIR/tools_template.jinja" "$TOOL_MODEL/chat_template.jinja"
TMPL_MODEL="$E2E_TMP/limits-model"
mkdir -p "$TMPL_MODEL" && cp "$CHAT_MODEL"/* "$TMPL_MODEL"/ && cp "$E2E_DIR/limits_template.jinja" "$TMPL_MODEL/chat_template.jinja"
e2e_server L --model "$TOOL_MODEL" --ctx 512 || exit 1
e2e_server T --model "$TMPL_MODEL" --ctx 512 || exit 1
run_node limits.test.mjs --url "$L_URL" --tmpl "$T_URL"
check "server L alive" curl -sf "$L_URL/health" -o /dev/null
check "SIGTERM exits 0 (L)" e2e_stop "$L_PID"
check "SIGTERM exits 0 (T)" e2e_stop "$T_PID"
e2e_done
