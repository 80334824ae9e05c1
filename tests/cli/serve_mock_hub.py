#!/usr/bin/env python3
"""serve_mock_hub.py — a tiny stand-in for the Hugging Face hub, for `kiln get` tests.

Usage: serve_mock_hub.py MODEL_DIR PORT_FILE LOG_FILE
Serves two repos from MODEL_DIR's files:
  test-org/tiny     correct files; model.safetensors is "LFS" (sha256 in the API and
                    in X-Linked-Etag); Range requests are honoured (206)
  test-org/corrupt  model.safetensors bytes differ from the advertised sha256
Anything else is 404. Each request line (path + Range header) is appended to LOG_FILE.
"""
import hashlib, http.server, json, os, sys

MODEL, PORT_FILE, LOG = sys.argv[1], sys.argv[2], sys.argv[3]
SHA = "0123456789abcdef0123456789abcdef01234567"
FILES = sorted(f for f in os.listdir(MODEL) if os.path.isfile(os.path.join(MODEL, f)))

def data(repo, name):
    b = open(os.path.join(MODEL, name), "rb").read()
    if repo == "test-org/corrupt" and name == "model.safetensors":
        b = b[:-1] + bytes([b[-1] ^ 1])
    return b

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        with open(LOG, "a") as f:
            f.write(f"{self.path} range={self.headers.get('Range')}\n")
        for repo in ("test-org/tiny", "test-org/corrupt"):
            if self.path.startswith(f"/api/models/{repo}/revision/main"):
                sib = []
                for n in FILES + ["pytorch_model.bin"]:
                    if n == "pytorch_model.bin":
                        sib.append({"rfilename": n}); continue
                    good = open(os.path.join(MODEL, n), "rb").read()
                    e = {"rfilename": n, "size": len(good)}
                    if n.endswith(".safetensors"):
                        e["lfs"] = {"sha256": hashlib.sha256(good).hexdigest(), "size": len(good)}
                    sib.append(e)
                body = json.dumps({"id": repo, "sha": SHA, "siblings": sib}).encode()
                self.send_response(200); self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
                return
            pre = f"/{repo}/resolve/{SHA}/"
            if self.path.startswith(pre) and self.path[len(pre):] in FILES:
                name = self.path[len(pre):]
                b = data(repo, name)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0])
                self.send_response(206 if start else 200)
                if name.endswith(".safetensors"):
                    self.send_header("X-Linked-Etag", '"%s"' % hashlib.sha256(open(os.path.join(MODEL, name), "rb").read()).hexdigest())
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(b)-1}/{len(b)}")
                self.send_header("Content-Length", str(len(b) - start)); self.end_headers()
                self.wfile.write(b[start:])
                return
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()

srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(PORT_FILE, "w") as f:
    f.write(str(srv.server_address[1]))
srv.serve_forever()
