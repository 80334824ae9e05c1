#!/usr/bin/env bash
# test_serve_soak.sh — the CI-sized soak (tests/soak/soak.sh): 16 streaming
# clients for 45 s after a 10 s warm-up over chat, completions, Responses and
# Anthropic messages through the official SDKs, 30 % hanging up mid-stream,
# SSD tier on. Every completed stream well-formed; afterwards KV blocks active
# 0, open fds and threads back to the baseline, RSS within 10 % of it, the
# server still answers and exits 0 on SIGTERM. The 10-minute, 64-client run:
# docs/testing.md, Soak.
. "$(dirname "$0")/lib.sh"
e2e_need node
check "soak: 16 clients x 45 s" bash "$E2E_DIR/../soak/soak.sh" --clients 16 --duration 45 --warmup 10 --seed 7
e2e_done
