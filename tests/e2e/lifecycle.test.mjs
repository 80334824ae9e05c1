// lifecycle.test.mjs — a client that goes away frees its sequence and KV blocks.
//   node lifecycle.test.mjs --chat URL
import { test, done, assert, arg, sse, get } from "./harness.mjs";

const CHAT = arg("--chat");
const LONG = { messages: [{ role: "user", content: "Write a very long story." }], max_tokens: 3000, ignore_eos: true, temperature: 0 };

async function settled() {
  for (let i = 0; i < 100; i++) {
    const s = (await get(`${CHAT}/stats`)).json;
    if (s.batch.active === 0 && s.batch.queued === 0 && s.kv.blocks_used === 0 && s.batch.http_in_flight === 0) return s;
    await new Promise((r) => setTimeout(r, 100));
  }
  const s = (await get(`${CHAT}/stats`)).json;
  assert.fail("stats did not return to baseline: " + JSON.stringify({ batch: s.batch, kv: s.kv }));
}

test("baseline: nothing running, no blocks used", async () => { await settled(); });

test("disconnect mid-stream cancels the request and frees its blocks", async () => {
  const before = (await get(`${CHAT}/stats`)).json.requests.cancelled;
  const ac = new AbortController();
  let n = 0;
  try {
    const r = await fetch(`${CHAT}/v1/chat/completions`, { method: "POST", signal: ac.signal, headers: { "content-type": "application/json" }, body: JSON.stringify({ ...LONG, stream: true }) });
    for await (const _ of r.body) { if (++n >= 5) { ac.abort(); break; } }
  } catch (e) { if (e.name !== "AbortError") throw e; }
  assert.ok(n >= 1);
  const mid = (await get(`${CHAT}/stats`)).json;
  const s = await settled();
  assert.ok(s.requests.cancelled > before, `cancelled ${before} -> ${s.requests.cancelled} (mid: ${JSON.stringify(mid.batch)})`);
  assert.ok(s.requests.cancelled > before);
});

test("disconnect during a non-stream request frees it too", async () => {
  const ac = new AbortController();
  const p = fetch(`${CHAT}/v1/chat/completions`, { method: "POST", signal: ac.signal, headers: { "content-type": "application/json" }, body: JSON.stringify(LONG) }).catch((e) => e);
  await new Promise((r) => setTimeout(r, 400));
  ac.abort();
  await p;
  await settled();
});

test("a short stream afterwards still works", async () => {
  const f = await sse(`${CHAT}/v1/chat/completions`, { ...LONG, max_tokens: 4, stream: true });
  assert.equal(f.at(-1), "[DONE]");
});

await done();
