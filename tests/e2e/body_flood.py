#!/usr/bin/python3
"""body_flood.py — large request bodies against a kiln server's request memory
(stdlib only; used by test_serve_request_memory.sh).

  body_flood.py hold URL --pid PID --n N --size BYTES
      opens N connections that each announce a BYTES-long chat body; those the
      server does not refuse at once (503 + Retry-After: their body cannot be
      reserved) send all of it but the last byte and hold. While they are held:
      the server's VmRSS, a normal chat request from a new connection, and
      /stats request_memory. Prints one JSON line:
      {"held", "refused", "retry_after_ok", "rss_kb_before", "rss_kb_held",
       "normal_status", "reqmem_held", "reqmem_after", "statuses"}
  body_flood.py bomb URL --messages N [--parallel P]
      P parallel chat requests, each with N empty messages (a small body whose
      parsed JSON is large); prints {"statuses": [...], "bodies": [...]}.
"""
import argparse
import json
import select
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request

CHAT = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2,
                   "temperature": 0}).encode()


def addr(url):
    u = urllib.parse.urlparse(url)
    return u.hostname, u.port


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def stats(url):
    with urllib.request.urlopen(url + "/stats", timeout=30) as r:
        return json.load(r)


def post(url, body, timeout=120):
    """POSTs body on a raw socket: (status, body, Retry-After). A server may answer
    (413/503) before the body is all sent and close: the rest of the send then fails
    with EPIPE/ECONNRESET, and the answer is still read (urllib raised instead)."""
    u = urllib.parse.urlsplit(url)
    s = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {u.hostname}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    try:
        s.sendall(head + body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    hdr, _, rest = data.partition(b"\r\n\r\n")
    lines = hdr.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    ra = None
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        if k.strip().lower() == "retry-after":
            ra = v.strip()
        if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
            out, r = b"", rest  # de-chunk
            while r:
                n, _, r = r.partition(b"\r\n")
                size = int(n.split(b";")[0] or b"0", 16)
                if size == 0:
                    break
                out, r = out + r[:size], r[size + 2:]
            rest = out
    return status, rest.decode("utf-8", "replace"), ra


def read_status(s):
    """Reads a reply's head (and what follows) from s; (status, retry_after)."""
    data = b""
    s.setblocking(True)
    s.settimeout(30)
    while b"\r\n\r\n" not in data:
        try:
            c = s.recv(65536)
        except OSError:
            break
        if not c:
            break
        data += c
    head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    if not head or not head[0].startswith("HTTP/"):
        return None, None
    ra = None
    for h in head[1:]:
        if h.lower().startswith("retry-after:"):
            ra = h.split(":", 1)[1].strip()
    return int(head[0].split()[1]), ra


def hold(a):
    host, port = addr(a.url)
    # a valid chat body of exactly a.size bytes: one message padded with spaces
    pre = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1'
    body = pre + b" " * (a.size - len(pre) - 1) + b"}"
    assert len(body) == a.size
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {a.size}\r\n\r\n").encode()
    rss0 = rss_kb(a.pid)
    socks = []
    for _ in range(a.n):
        s = socket.create_connection((host, port), timeout=30)
        s.sendall(head)
        socks.append(s)
    cap = stats(a.url)["request_memory"]["max"]
    fit = cap // (a.size + 1)  # bodies the server can reserve at once
    # wait until every connection past those has been refused (or 60 s)
    refused, statuses, ra_ok = set(), [], True
    t_end = time.time() + 60
    while len(refused) < a.n - fit and time.time() < t_end:
        rd, _, _ = select.select([s for s in socks if s not in refused], [], [], 1.0)
        for s in rd:
            st, ra = read_status(s)
            statuses.append(st)
            ra_ok = ra_ok and st == 503 and ra is not None
            refused.add(s)
    held = [s for s in socks if s not in refused]
    for s in held:  # all but the last byte
        s.setblocking(True)
        s.sendall(body[:-1])
    t_end = time.time() + 60  # the server has read them: its reservations are in use
    while time.time() < t_end:
        if stats(a.url)["request_memory"]["used"] >= len(held) * a.size:
            break
        time.sleep(0.2)
    rss_held = rss_kb(a.pid)
    reqmem_held = stats(a.url)["request_memory"]
    st, text, _ = post(a.url, CHAT)
    for s in socks:
        s.close()
    t_end = time.time() + 60
    after = None
    while time.time() < t_end:
        after = stats(a.url)["request_memory"]["used"]
        if after == 0:
            break
        time.sleep(0.2)
    print(json.dumps({"held": len(held), "refused": len(refused), "retry_after_ok": ra_ok,
                      "rss_kb_before": rss0, "rss_kb_held": rss_held, "normal_status": st,
                      "reqmem_held": reqmem_held, "reqmem_after": after,
                      "statuses": sorted(set(statuses), key=str)}))


def bomb(a):
    body = json.dumps({"messages": [{"role": "user", "content": ""}] * a.messages,
                       "max_tokens": 1}).encode()
    out = [None] * a.parallel

    def one(i):
        out[i] = post(a.url, body)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(a.parallel)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"size": len(body), "statuses": [o[0] for o in out],
                      "retry_after": [o[2] for o in out],
                      "bodies": [o[1][:400] for o in out]}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold")
    h.add_argument("url")
    h.add_argument("--pid", type=int, required=True)
    h.add_argument("--n", type=int, default=100)
    h.add_argument("--size", type=int, default=4_000_000)
    b = sub.add_parser("bomb")
    b.add_argument("url")
    b.add_argument("--messages", type=int, default=120_000)
    b.add_argument("--parallel", type=int, default=1)
    a = p.parse_args()
    {"hold": hold, "bomb": bomb}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
