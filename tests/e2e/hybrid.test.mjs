// hybrid.test.mjs — a hybrid model (gated DeltaNet + gated attention) served
// like every other model: batched, prefix-cached, with the real openai client.
//   node hybrid.test.mjs --url URL (cache warm as it goes) --fresh URL (a second server)
import OpenAI from "openai";
import { test, done, assert, arg, get, vfetch } from "./harness.mjs";

const URL_ = arg("--url"), FRESH = arg("--fresh");
const client = (u) => new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${u}/v1`, maxRetries: 0, timeout: 300000 });
const hy = client(URL_), fresh = client(FRESH);

const SYSTEM = "You are a careful assistant for a small test of a hybrid model. " +
  "Its recurrent state is snapshotted at block boundaries, so a shared prompt is computed once. ".repeat(3);
const QUESTIONS = ["What is a cat?", "Tell me about boats on the sea.", "Why is the sky blue?", "Count to five.",
  "Name a red fruit.", "What does a server do?", "Say hello in French.", "Write one line of code."];
const req = (q, extra = {}) => ({ model: "x", max_tokens: 24, temperature: 0, ignore_eos: true,
  messages: [{ role: "system", content: SYSTEM }, { role: "user", content: q }], ...extra });
const seeded = (i) => (i % 2 ? { temperature: 0.9, seed: 100 + i } : {});

async function stream(c, body) {
  let s = "", usage = null;
  for await (const ch of await c.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
    s += ch.choices[0]?.delta?.content ?? "";
    if (ch.usage) usage = ch.usage;
  }
  return { text: s, usage };
}

test("8 concurrent chat clients with a shared system prompt: each equals its request alone, every one after the first hits the cache", async () => {
  const alone = [];
  for (let i = 0; i < 8; i++) alone.push((await fresh.chat.completions.create(req(QUESTIONS[i], seeded(i)))).choices[0].message.content);
  const first = await hy.chat.completions.create(req("A first question, to warm the cache."));
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  const together = await Promise.all(QUESTIONS.map((q, i) =>
    i % 2 ? stream(hy, req(q, seeded(i))) : hy.chat.completions.create(req(q, seeded(i))).then((r) => ({ text: r.choices[0].message.content, usage: r.usage }))));
  for (let i = 0; i < 8; i++) {
    assert.equal(together[i].text, alone[i], `client ${i}`);
    assert.ok(together[i].usage.prompt_tokens_details.cached_tokens > 0, `client ${i}: ${JSON.stringify(together[i].usage)}`);
  }
});

test("a 20-token prompt that repeats hits the cache, same text", async () => {
  const p = "the little boat sails on the big sea"; // 20 tokens with make-test-model's tokenizer
  const a = await hy.completions.create({ model: "x", prompt: p, max_tokens: 12, temperature: 0, ignore_eos: true });
  const b = await hy.completions.create({ model: "x", prompt: p, max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(a.usage.prompt_tokens, 20);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, JSON.stringify(b.usage));
  assert.equal(b.choices[0].text, a.choices[0].text);
});

test("a 3-turn conversation resumes each turn from the last one's state; same text as a cold server", async () => {
  const msgs = [{ role: "system", content: SYSTEM }, { role: "user", content: "Tell me about the state." }];
  const cached = [];
  let last;
  for (let turn = 0; turn < 3; turn++) {
    last = await hy.chat.completions.create({ model: "x", messages: msgs, max_tokens: 10, temperature: 0, ignore_eos: true });
    cached.push(last.usage.prompt_tokens_details.cached_tokens);
    msgs.push({ role: "assistant", content: last.choices[0].message.content }, { role: "user", content: `And turn ${turn + 2}?` });
  }
  assert.ok(cached[1] > 0 && cached[2] > cached[1], `cached ${cached}`);
  msgs.splice(-2);
  const cold = await fresh.chat.completions.create({ model: "x", messages: msgs, max_tokens: 10, temperature: 0, ignore_eos: true });
  assert.equal(cold.choices[0].message.content, last.choices[0].message.content);
});

test("memory back to baseline: no KV block and no state block held once idle", async () => {
  const st = (await get(`${URL_}/stats`)).json;
  assert.equal(st.kv.state.active, 0, JSON.stringify(st.kv.state));
  assert.ok(st.kv.state.cached > 0, "snapshots stay cached for later hits");
  assert.ok(st.kv.state.blocks > 0 && st.kv.state.block_bytes > 0);
  assert.equal(st.kv.groups[0].active, 0, JSON.stringify(st.kv.groups));
});

await done();
