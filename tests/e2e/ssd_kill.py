#!/usr/bin/python3
"""ssd_kill.py — streams one request and SIGKILLs the server after N chunks.

  ssd_kill.py URL SERVER_PID N PREFIX_ID MAX_TOKENS [extra JSON]
Prints {"chunks": n, "text": "text received before the kill"}.
With KILN_KILL_SETTLE=K in the environment, after N chunks it first waits (at
most 60 s, the generation going on) until /stats shows at least K checkpoints
on disk and nothing pending in the SSD write queue: a loaded machine's writer
may lag, and a checkpoint is durable only once written. KILN_KILL_SETTLE_CKPT=K
waits only for K checkpoints on disk (write-behind items wait for an idle
engine, so the queue never empties while a long generation runs); with
KILN_KILL_SETTLE_DIR=DIR it counts the ck-*.kv files there (renamed into place
once written and synced; /stats does not count a checkpoint whose newer
version is queued although its older file is still on disk).
"""
import json
import os
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ssd_req import prompt_for  # noqa: E402


def settle(url):
    want = int(os.environ.get("KILN_KILL_SETTLE", "0"))
    ckpt_only = int(os.environ.get("KILN_KILL_SETTLE_CKPT", "0"))
    if ckpt_only > 0:
        want = ckpt_only
    if want <= 0:
        return
    deadline = time.time() + 180  # a loaded machine writes late; the kill waits for it
    d = os.environ.get("KILN_KILL_SETTLE_DIR")
    while time.time() < deadline:
        if ckpt_only > 0 and d:
            try:
                if sum(1 for f in os.listdir(d) if f.startswith("ck-") and f.endswith(".kv")) >= want:
                    return
            except OSError:
                pass
            time.sleep(0.02)
            continue
        try:
            with urllib.request.urlopen(url + "/stats", timeout=10) as r:
                ssd = json.load(r)["ssd_cache"]
            if ssd["checkpoints"] >= want and (ckpt_only > 0 or ssd["pending"] == 0):
                return
        except Exception:
            pass
        time.sleep(0.02)


def main():
    url, pid, n_kill, prefix, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    body = {"prompt": prompt_for(prefix)[:400], "max_tokens": max_tokens, "temperature": 0, "stream": True}
    if len(sys.argv) > 6:
        body.update(json.loads(sys.argv[6]))
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    text, chunks = [], 0
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                for c in ev.get("choices", []):
                    text.append(c.get("text", ""))
                    chunks += 1
                if chunks >= n_kill:
                    settle(url)
                    os.kill(pid, signal.SIGKILL)
                    break
    except Exception:
        pass
    print(json.dumps({"chunks": chunks, "text": "".join(text)}))


if __name__ == "__main__":
    main()
