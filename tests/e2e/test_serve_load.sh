#!/usr/bin/env bash
# test_serve_load.sh — 16 concurrent clients equal their solo runs (greedy and
# seeded); prefix cache across a 3-turn conversation and concurrent requests.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
CHAT_MODEL=$(e2e_chat_model) || exit 1
e2e_server TEXT --model "$STORIES" --ctx 256 --batch 8 || exit 1
e2e_server CHAT --model "$CHAT_MODEL" --ctx 1024 --batch 8 || exit 1
e2e_server FRESH --model "$CHAT_MODEL" --ctx 1024 --batch 8 || exit 1
run_node load.test.mjs --text "$TEXT_URL" --chat "$CHAT_URL" --fresh "$FRESH_URL"
check "blocks back to zero used after the load" bash -c "curl -s $CHAT_URL/stats | grep -q '\"blocks_used\":0'"
e2e_done
