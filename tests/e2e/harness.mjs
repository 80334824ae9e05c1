// harness.mjs — a tiny test runner for the e2e node files: test(name, fn)
// runs cases in order; done() prints "N passed, M failed" and sets the exit code.
import assert from "node:assert/strict";
const cases = [];
export const test = (name, fn) => cases.push([name, fn]);
export { assert };
export async function done() {
  let pass = 0, fail = 0;
  for (const [name, fn] of cases) {
    try { await fn(); pass++; console.log(`ok   ${name}`); }
    catch (e) { fail++; console.log(`FAIL ${name}: ${e && e.stack ? e.stack.split("\n").slice(0, 4).join("\n") : e}`); }
  }
  console.log(`${pass} passed, ${fail} failed`);
  process.exitCode = fail ? 1 : 0;
}
export const arg = (k, d) => { const a = process.argv; const i = a.indexOf(k); return i >= 0 ? a[i + 1] : d; };
// Raw SSE reader over fetch: returns the parsed data frames (and "[DONE]").
export async function sse(url, body, { headers = {}, onFrame } = {}) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
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
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json; try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, json, text };
}
export async function get(url, headers = {}) {
  const r = await fetch(url, { headers });
  const text = await r.text();
  let json; try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: r.status, json, text };
}
