#!/usr/bin/python3
"""conn_flood.py — hostile connections against a kiln server, and a normal
client beside them (stdlib only; used by test_serve_connections.sh).

  conn_flood.py flood URL --idle N --slow M [--from 127.0.0.2,127.0.0.3] [--probe-from 127.0.0.1]
      opens N connections that send nothing and M that send a request header one
      byte a second (slowloris), spread over the --from source addresses, then
      (while they are held) sends one normal chat request from --probe-from and
      prints one JSON line: {"status", "seconds", "held", "content"}.
  conn_flood.py deadline URL --kind header|keepalive|body [--wait S]
      one connection of that kind; prints {"closed_after": seconds} when the
      server closes it (or null after --wait seconds).
  conn_flood.py busy URL --n N [--from ADDR]
      N connections that send a request header and half a body, then hold
      (they are busy: never displaced); prints {"held": n} and keeps them until
      stdin closes.
  conn_flood.py request URL [--from ADDR]
      one chat request; prints {"status", "retry_after", "connection", "body"}.
"""
import argparse
import json
import resource
import select
import socket
import sys
import threading
import time
import urllib.parse

CHAT = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4,
                   "temperature": 0}).encode()


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def hostport(url):
    u = urllib.parse.urlparse(url)
    return u.hostname, u.port


def connect(url, src=None, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if src:
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(hostport(url))
    return s


def alive(s):
    """True while the server has not closed s (nothing to read, no EOF/reset)."""
    try:
        p = select.poll()
        p.register(s, select.POLLIN)
        if not p.poll(0):
            return True
        return len(s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)) > 0
    except BlockingIOError:
        return True
    except OSError:
        return False


def http_request(url, body=CHAT, path="/v1/chat/completions", src=None, timeout=60):
    s = connect(url, src, timeout)
    host, port = hostport(url)
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    s.sendall(head + body)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    hdr = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdr[k.strip().lower()] = v.strip()
    if hdr.get("transfer-encoding", "").lower() == "chunked":
        out, buf = b"", rest
        while buf:
            size_line, _, buf = buf.partition(b"\r\n")
            n = int(size_line.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out, buf = out + buf[:n], buf[n + 2:]
        rest = out
    return status, hdr, rest


def cmd_flood(a):
    raise_nofile()
    srcs = a.from_.split(",") if a.from_ else [None]
    socks, slow = [], []
    for i in range(a.idle + a.slow):
        try:
            s = connect(a.url, srcs[i % len(srcs)], 5)
        except OSError:
            continue
        (slow if i >= a.idle else socks).append(s)
    header = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 4000
    stop = threading.Event()

    def drip():
        k = 0
        while not stop.is_set() and k < len(header):
            for s in slow:
                try:
                    s.send(header[k:k + 1])
                except OSError:
                    pass
            k += 1
            stop.wait(1.0)

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    time.sleep(a.settle)
    held_before = sum(alive(s) for s in socks + slow)
    t0 = time.monotonic()
    try:
        status, hdr, body = http_request(a.url, src=a.probe_from, timeout=a.timeout)
    except OSError as e:
        status, hdr, body = 0, {}, str(e).encode()
    dt = time.monotonic() - t0
    content = None
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except Exception:
        pass
    held = sum(alive(s) for s in socks + slow)
    stop.set()
    print(json.dumps({"status": status, "seconds": round(dt, 3), "opened": len(socks) + len(slow),
                      "held_before": held_before, "held": held, "content": content,
                      "body": body[:300].decode("utf-8", "replace")}))
    for s in socks + slow:
        s.close()


def cmd_deadline(a):
    s = connect(a.url, a.from_)
    t0 = time.monotonic()
    if a.kind == "header":
        partial = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "
        i = 0
    elif a.kind == "keepalive":
        host, port = hostport(a.url)
        s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        t0 = time.monotonic()  # idle from the end of the response
    else:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"messages\":")
    closed = None
    while time.monotonic() - t0 < a.wait:
        if a.kind == "header":  # one byte a second: never idle, never complete
            try:
                s.send(b"a")
            except OSError:
                pass
        p = select.poll()
        p.register(s, select.POLLIN)
        if p.poll(1000):
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                closed = round(time.monotonic() - t0, 2)
                break
    print(json.dumps({"closed_after": closed}))


def cmd_busy(a):
    raise_nofile()
    socks = []
    for _ in range(a.n):
        s = connect(a.url, a.from_)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n{\"messages\":")
        socks.append(s)
    time.sleep(0.5)
    print(json.dumps({"held": sum(alive(s) for s in socks)}), flush=True)
    sys.stdin.read()
    for s in socks:
        s.close()


def cmd_request(a):
    status, hdr, body = http_request(a.url, src=a.from_, timeout=30)
    print(json.dumps({"status": status, "retry_after": hdr.get("retry-after"),
                      "connection": hdr.get("connection"), "body": body[:400].decode("utf-8", "replace")}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("flood")
    f.add_argument("url")
    f.add_argument("--idle", type=int, default=1000)
    f.add_argument("--slow", type=int, default=200)
    f.add_argument("--from", dest="from_")
    f.add_argument("--probe-from", default="127.0.0.1")
    f.add_argument("--settle", type=float, default=2.0)
    f.add_argument("--timeout", type=float, default=60)
    d = sub.add_parser("deadline")
    d.add_argument("url")
    d.add_argument("--kind", choices=["header", "keepalive", "body"], required=True)
    d.add_argument("--wait", type=float, default=30)
    d.add_argument("--from", dest="from_")
    b = sub.add_parser("busy")
    b.add_argument("url")
    b.add_argument("--n", type=int, required=True)
    b.add_argument("--from", dest="from_")
    r = sub.add_parser("request")
    r.add_argument("url")
    r.add_argument("--from", dest="from_")
    a = p.parse_args()
    {"flood": cmd_flood, "deadline": cmd_deadline, "busy": cmd_busy, "request": cmd_request}[a.cmd](a)


if __name__ == "__main__":
    main()
