#!/usr/bin/env bash
# test_serve_openai.sh — the official openai client against `kiln serve`:
# completions on stories260K, chat on a ChatML test model (openai.test.mjs).
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
CHAT_MODEL=$(e2e_chat_model) || exit 1
e2e_server TEXT --model "$STORIES" --ctx 128 || exit 1
e2e_server CHAT --model "$CHAT_MODEL" --ctx 1024 || exit 1
run_node openai.test.mjs --text "$TEXT_URL" --chat "$CHAT_URL"
check "SIGTERM exits 0 (text server)" e2e_stop "$TEXT_PID"
check "SIGTERM exits 0 (chat server)" e2e_stop "$CHAT_PID"
e2e_done
