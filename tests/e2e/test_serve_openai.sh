#!/usr/bin/env bash
# test_serve_openai.sh — the official openai client against `kiln serve`:
# completions on stories260K, chat on a ChatML test model (openai.test.mjs).
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
CHAT_MODEL=$(e2e_chat_model) || exit 1
e2e_server TEXT --model "$STORIES" --ctx 128 || exit 1
e2e_server CHAT --model "$CHAT_MODEL" --ctx 1024 || exit 1
# a thinking variant: the template opens <think> for the model unless enable_thinking is false
THINK_MODEL="$E2E_TMP/think-model"
mkdir -p "$THINK_MODEL" && cp "$CHAT_MODEL"/* "$THINK_MODEL"/
cat > "$THINK_MODEL/chat_template.jinja" <<'JINJA'
{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}{% else %}{{ '<think>\n' }}{% endif %}{% endif %}
JINJA
e2e_server THINK --model "$THINK_MODEL" --ctx 1024 || exit 1
run_node openai.test.mjs --text "$TEXT_URL" --chat "$CHAT_URL" --think "$THINK_URL"
check "SIGTERM exits 0 (text server)" e2e_stop "$TEXT_PID"
check "SIGTERM exits 0 (chat server)" e2e_stop "$CHAT_PID"
check "SIGTERM exits 0 (thinking server)" e2e_stop "$THINK_PID"
e2e_done
