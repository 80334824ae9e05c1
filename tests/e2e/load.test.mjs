// load.test.mjs — batching must not change results, and the prefix cache.
//   node load.test.mjs --text URL --chat URL --fresh URL (a second chat server, cache empty)
import OpenAI from "openai";
import { test, done, assert, arg, get, vfetch } from "./harness.mjs";

const TEXT = arg("--text"), CHAT = arg("--chat"), FRESH = arg("--fresh");
const client = (u) => new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${u}/v1`, maxRetries: 0, timeout: 120000 });
const text = client(TEXT), chat = client(CHAT), fresh = client(FRESH);

const STARTS = ["Once upon a time", "The little dog", "Lily and Tom went", "One day, a bird", "The sun was", "Mom said", "A big red ball", "In the park"];

// 16 requests: greedy and seeded sampling, completions and chat, stream and not.
function requests() {
  const out = [];
  for (let i = 0; i < 16; i++) {
    const greedy = i % 2 === 0;
    const sp = greedy ? { temperature: 0 } : { temperature: 0.9, seed: 1000 + i, top_p: i % 3 ? 0.95 : 1, top_k: i % 4 === 1 ? 20 : 0 };
    if (i < 10) out.push({ kind: "text", stream: i % 3 === 0, p: { model: "x", prompt: STARTS[i % 8], max_tokens: 12 + (i % 5) * 4, ...sp } });
    else out.push({ kind: "chat", stream: i % 3 === 0, p: { model: "x", messages: [{ role: "user", content: `Question number ${i}: ${STARTS[i % 8]}?` }], max_tokens: 16, ignore_eos: true, ...sp } });
  }
  return out;
}

async function run(r) {
  const c = r.kind === "text" ? text : chat;
  if (!r.stream) {
    const x = r.kind === "text" ? await c.completions.create(r.p) : await c.chat.completions.create(r.p);
    return r.kind === "text" ? x.choices[0].text : x.choices[0].message.content;
  }
  let s = "";
  if (r.kind === "text") for await (const ch of await c.completions.create({ ...r.p, stream: true })) s += ch.choices[0]?.text ?? "";
  else for await (const ch of await c.chat.completions.create({ ...r.p, stream: true })) s += ch.choices[0]?.delta?.content ?? "";
  return s;
}

test("16 concurrent clients each equal the same request alone (greedy and seeded)", async () => {
  const reqs = requests();
  const alone = [];
  for (const r of reqs) alone.push(await run(r));
  const together = await Promise.all(reqs.map(run));
  for (let i = 0; i < reqs.length; i++) assert.equal(together[i], alone[i], `request ${i} ${JSON.stringify(reqs[i].p)}`);
  const again = await Promise.all(reqs.map(run));
  for (let i = 0; i < reqs.length; i++) assert.equal(again[i], alone[i], `request ${i}, second round`);
});

const SYSTEM = "You are a careful assistant for a small test. " + "The cache keeps the keys and values of every token, so the next step does not have to start again. ".repeat(6);

test("prefix cache: 3-turn conversation reports growing cached_tokens; same output as a cold server", async () => {
  const msgs = [{ role: "system", content: SYSTEM }, { role: "user", content: "Tell me about the cache." }];
  const cached = [], outs = [];
  for (let turn = 0; turn < 3; turn++) {
    const r = await chat.chat.completions.create({ model: "x", messages: msgs, max_tokens: 10, temperature: 0, ignore_eos: true });
    cached.push(r.usage.prompt_tokens_details.cached_tokens);
    outs.push(r.choices[0].message.content);
    assert.ok(cached[turn] <= r.usage.prompt_tokens);
    msgs.push({ role: "assistant", content: r.choices[0].message.content }, { role: "user", content: `And turn ${turn + 2}?` });
  }
  assert.ok(cached[1] > 0, `turn 2 cached ${cached}`);
  assert.ok(cached[2] > cached[1], `turn 3 cached more than turn 2: ${cached}`);
  // the same last turn on a server whose cache is empty
  msgs.splice(-2);
  const cold = await fresh.chat.completions.create({ model: "x", messages: msgs, max_tokens: 10, temperature: 0, ignore_eos: true });
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(cold.choices[0].message.content, outs[2]);
});

test("two concurrent requests with one long system prompt both reuse its blocks", async () => {
  const before = (await get(`${CHAT}/stats`)).json.prefix_cache.hits;
  const mk = (q) => chat.chat.completions.create({ model: "x", max_tokens: 30, temperature: 0, ignore_eos: true,
    messages: [{ role: "system", content: SYSTEM }, { role: "user", content: q }] });
  const [a, b] = await Promise.all([mk("First question here."), mk("Second, different question.")]);
  assert.ok(a.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(a.usage));
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= 64, JSON.stringify(b.usage));
  const after = (await get(`${CHAT}/stats`)).json.prefix_cache.hits;
  assert.ok(after > before, `prefix hits ${before} -> ${after}`);
});

await done();
