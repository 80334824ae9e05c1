// harness.mjs — a tiny test runner for the e2e node files: test(name, fn)
// runs cases in order; done() prints "N passed, M failed" and sets the exit code.
// Every API response and stream event a test receives (through vfetch: the
// SDK clients get `fetch: vfetch`, and sse/post/get below use it) is checked
// at the end against the official schemas (validate_api.py, shared/api-spec).
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
const cases = [];
export const test = (name, fn) => cases.push([name, fn]);
export { assert };
const records = [], pending = [];

// The official schema of what kiln answered on `pathname` (null: a kiln-only route).
function schemaFor(pathname, status, stream, event, body) {
  const ant = pathname.startsWith("/v1/messages");
  if (!pathname.startsWith("/v1/") || pathname.startsWith("/v1/conversations")) return null;
  // an error answer, or an error frame in a stream (chat/completions: {"error"}; Anthropic: event error)
  if (status >= 400 || event === "error" || (stream && !ant && body && body.error && body.type === undefined))
    return { spec: ant ? "anthropic" : "openai", schema: "ErrorResponse" };
  if (pathname === "/v1/chat/completions") return { spec: "openai", schema: stream ? "CreateChatCompletionStreamResponse" : "CreateChatCompletionResponse" };
  if (pathname === "/v1/completions") return { spec: "openai", schema: "CreateCompletionResponse" };
  if (pathname === "/v1/models") return { spec: "openai", schema: "ListModelsResponse" };
  if (pathname.startsWith("/v1/models/")) return { spec: "openai", schema: "Model" };
  if (pathname === "/v1/embeddings") return { spec: "openai", schema: "CreateEmbeddingResponse" };
  if (pathname === "/v1/responses") return { spec: "openai", schema: stream ? "ResponseStreamEvent" : "Response" };
  if (pathname === "/v1/messages") return { spec: "anthropic", schema: stream ? "MessageStreamEvent" : "Message" };
  if (pathname === "/v1/messages/count_tokens") return { spec: "anthropic", schema: "BetaCountMessageTokensResponse" };
  return null;
}

function record(where, pathname, status, stream, event, body) {
  const s = schemaFor(pathname, status, stream, event, body);
  if (s) records.push({ ...s, where, body });
}

async function readSSE(stream, where, pathname, status) {
  const dec = new TextDecoder();
  let buf = "", n = 0;
  for await (const chunk of stream) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i); buf = buf.slice(i + 2);
      let event = null, data = null;
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data = (data === null ? "" : data + "\n") + line.slice(6);
      }
      if (data === null || data === "[DONE]") continue;
      let body; try { body = JSON.parse(data); } catch { records.push({ spec: "openai", schema: "(not JSON)", where, body: data }); continue; }
      record(`${where} event ${n++}${event ? " " + event : ""}`, pathname, status, true, event, body);
    }
  }
}

// fetch that records what kiln answered, for the schema check in done().
export async function vfetch(url, init = {}) {
  const r = await fetch(url, init);
  const pathname = new URL(typeof url === "string" ? url : url.url ?? String(url)).pathname;
  const where = `${(init.method || "GET").toUpperCase()} ${pathname}`;
  const ct = r.headers.get("content-type") || "";
  if (ct.includes("text/event-stream") && r.body) {
    const [a, b] = r.body.tee();
    pending.push(readSSE(b, where, pathname, r.status).catch((e) => records.push({ spec: "openai", schema: "(unreadable)", where, body: String(e) })));
    return new Response(a, { status: r.status, statusText: r.statusText, headers: r.headers });
  }
  if (ct.includes("application/json")) {
    const text = await r.clone().text();
    let body; try { body = JSON.parse(text); } catch { body = undefined; }
    if (body !== undefined) record(where, pathname, r.status, false, null, body);
  }
  return r;
}

// The recorded objects through validate_api.py: 0 when all conform.
function validateRecords() {
  if (!records.length) return { ok: true, out: "" };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-api-"));
  const log = path.join(dir, "responses.jsonl");
  fs.writeFileSync(log, records.map((r) => JSON.stringify(r)).join("\n") + "\n");
  const v = spawnSync("/usr/bin/python3", [new URL("./validate_api.py", import.meta.url).pathname, log], { encoding: "utf8" });
  fs.rmSync(dir, { recursive: true, force: true });
  return { ok: v.status === 0, out: (v.stdout || "") + (v.stderr || "") };
}

export async function done() {
  let pass = 0, fail = 0;
  for (const [name, fn] of cases) {
    try { await fn(); pass++; console.log(`ok   ${name}`); }
    catch (e) { fail++; console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split("\n").slice(0, 4).join("\n") : e}`); }
  }
  await Promise.all(pending);
  const v = validateRecords();
  if (v.out) console.log(v.out.trimEnd());
  if (records.length) {
    if (v.ok) { pass++; console.log(`ok   every response and stream event (${records.length}) validates against the official schemas`); }
    else { fail++; console.log("FAIL every response and stream event validates against the official schemas"); }
  }
  console.log(`${pass} passed, ${fail} failed`);
  process.exitCode = fail ? 1 : 0;
}
export const arg = (k, d) => { const a = process.argv; const i = a.indexOf(k); return i >= 0 ? a[i + 1] : d; };
// Raw SSE reader over fetch: returns the parsed data frames (and "[DONE]").
export async function sse(url, body, { headers = {}, onFrame } = {}) {
  const r = await vfetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  assert.equal(r.status, 200, `status ${r.status}: ${await r.clone().text()}`);
  assert.match(r.headers.get("content-type"), /text\/event-stream/);
  const frames = [];
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i); buf = buf.slice(i + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const d = line.slice(6);
        const f = d === "[DONE]" ? d : JSON.parse(d);
        frames.push(f);
        if (onFrame && onFrame(f, frames) === false) return frames;
      }
    }
  }
  return frames;
}
export async function post(url, body, headers = {}) {
  const r = await vfetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json; try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, json, text };
}
export async function get(url, headers = {}) {
  const r = await vfetch(url, { headers });
  const text = await r.text();
  let json; try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, json, text };
}
