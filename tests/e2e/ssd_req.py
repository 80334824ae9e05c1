#!/usr/bin/python3
"""ssd_req.py — one /v1/completions request for the SSD-cache e2e tests.

  ssd_req.py URL PREFIX_ID [max_tokens] [extra JSON]   -> prints one JSON line
  (a negative PREFIX_ID: a short ~150-token prompt, as ssd_kill.py sends):
  {"ttft": s, "cached": n, "prompt": n, "text": "...", "resumed": n, "finish": "..."}

The prompt is a deterministic ~2,000-token text chosen by PREFIX_ID; the
request streams so that TTFT is the time to the first chunk.
"""
import json
import sys
import time
import urllib.request


def prompt_for(pid):
    words = ["tom", "sees", "the", "sea", "and", "a", "boat", "with", "red", "sails"]
    return " ".join(f"{words[(i * 7 + pid) % 10]}{(i + pid) % 89}" for i in range(530))


def main():
    url, pid = sys.argv[1], int(sys.argv[2])
    max_tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    body = {"prompt": prompt_for(pid) if pid >= 0 else prompt_for(-pid)[:400], "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if len(sys.argv) > 4:
        body.update(json.loads(sys.argv[4]))
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.time()
    ttft = None
    text, usage, finish = [], {}, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ttft is None:
                ttft = time.time() - t0
            for c in ev.get("choices", []):
                text.append(c.get("text", ""))
                finish = c.get("finish_reason") or finish
            if ev.get("usage"):
                usage = ev["usage"]
    details = usage.get("prompt_tokens_details") or {}
    print(json.dumps({"ttft": ttft, "cached": details.get("cached_tokens", 0),
                      "prompt": usage.get("prompt_tokens", 0), "text": "".join(text),
                      "resumed": usage.get("resumed_tokens", 0), "finish": finish}))


if __name__ == "__main__":
    main()
