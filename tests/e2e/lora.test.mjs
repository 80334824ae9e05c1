// lora.test.mjs — LoRA adapters through kiln serve with the official openai client.
//   node lora.test.mjs --url URL --id MODEL_ID
// The server has adapters "sql" (PEFT, all projections) and "chat" (mlx-lm, q/v/down).
import OpenAI from "openai";
import { test, done, assert, arg, post, get, vfetch } from "./harness.mjs";

const URL_ = arg("--url"), ID = arg("--id");
const oa = new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${URL_}/v1`, maxRetries: 0, timeout: 120000 });
const PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play";

async function gen(model, extra = {}, prompt = PROMPT) {
  const r = await oa.completions.create({ model, prompt, max_tokens: 16, temperature: 0, ...extra });
  return r;
}

test("/v1/models lists the base and each adapter as its own model", async () => {
  const list = await oa.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, [ID, "sql", "chat"]);
  const sql = list.data[1];
  assert.equal(sql.parent, ID);
  assert.equal(sql.adapter.format, "peft");
  assert.equal(sql.adapter.rank, 8);
  assert.equal(sql.adapter.scale, 2);
  assert.equal(list.data[2].adapter.format, "mlx-lm");
  assert.equal(list.data[2].adapter.targets, "q_proj,v_proj,down_proj");
});

test("models.retrieve: the base, an adapter by NAME and by <id>:NAME; unknown adapter 404", async () => {
  const list = await oa.models.list();
  assert.deepEqual({ ...(await oa.models.retrieve(ID)) }, { ...list.data[0] });
  assert.deepEqual({ ...(await oa.models.retrieve("sql")) }, { ...list.data[1] });
  assert.deepEqual({ ...(await oa.models.retrieve(`${ID}:chat`)) }, { ...list.data[2] });
  await assert.rejects(oa.models.retrieve(`${ID}:nope`), (e) => e.status === 404);
});

const SOLO = {};
test("each model alone: adapters change the output; NAME and <id>:NAME are the same", async () => {
  for (const m of [ID, "sql", "chat"]) SOLO[m] = (await gen(m)).choices[0].text;
  assert.notEqual(SOLO.sql, SOLO[ID]);
  assert.notEqual(SOLO.chat, SOLO[ID]);
  assert.notEqual(SOLO.chat, SOLO.sql);
  const r = await gen(`${ID}:sql`);
  assert.equal(r.choices[0].text, SOLO.sql);
  assert.equal(r.model, `${ID}:sql`, "the reply names the model asked for");
  const stack = await gen(ID, { adapters: [{ name: "sql", scale: 1 }] });
  assert.equal(stack.choices[0].text, SOLO.sql, "adapters [sql] = model sql");
  SOLO.stack = (await gen(ID, { adapters: [{ name: "sql", scale: 0.5 }, { name: "chat" }] })).choices[0].text;
  assert.notEqual(SOLO.stack, SOLO.sql);
});

test("concurrent requests on different adapters (and none) each equal their solo run", async () => {
  for (let round = 0; round < 2; round++) {
    const jobs = [];
    for (let k = 0; k < 2; k++) {
      jobs.push(gen(ID).then((r) => [ID, r]));
      jobs.push(gen("sql").then((r) => ["sql", r]));
      jobs.push(gen("chat").then((r) => ["chat", r]));
      jobs.push(gen(ID, { adapters: [{ name: "sql", scale: 0.5 }, { name: "chat" }] }).then((r) => ["stack", r]));
    }
    for (const [m, r] of await Promise.all(jobs)) assert.equal(r.choices[0].text, SOLO[m], `${m} in a mixed batch`);
  }
});

test("streaming chat with an adapter equals the non-streamed reply", async () => {
  const msgs = [{ role: "user", content: "Tell me about the red ball." }];
  const whole = await oa.chat.completions.create({ model: "chat", messages: msgs, max_tokens: 12, temperature: 0 });
  const base = await oa.chat.completions.create({ model: ID, messages: msgs, max_tokens: 12, temperature: 0 });
  let text = "";
  const stream = await oa.chat.completions.create({ model: "chat", messages: msgs, max_tokens: 12, temperature: 0, stream: true });
  for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? "";
  assert.equal(text, whole.choices[0].message.content);
  assert.notEqual(whole.choices[0].message.content, base.choices[0].message.content);
});

test("the prefix cache never crosses adapters (or scales)", async () => {
  const long = "The sun was warm and the sky was blue. Birds were singing in the trees. ".repeat(6);
  const cached = (r) => r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  const b1 = await gen(ID, { max_tokens: 2 }, long);
  const b2 = await gen(ID, { max_tokens: 2 }, long);
  assert.ok(cached(b2) >= 32, `base again hits the cache (${cached(b2)})`);
  const s1 = await gen("sql", { max_tokens: 2 }, long);
  assert.equal(cached(s1), 0, "sql does not reuse the base's blocks");
  const s2 = await gen("sql", { max_tokens: 2 }, long);
  assert.ok(cached(s2) >= 32, "sql again hits its own");
  const h = await gen(ID, { max_tokens: 2, adapters: [{ name: "sql", scale: 0.5 }] }, long);
  assert.equal(cached(h), 0, "another scale is another namespace");
  const c1 = await gen("chat", { max_tokens: 2 }, long);
  assert.equal(cached(c1), 0, "chat does not reuse sql's");
  assert.equal(cached(b1), 0);
});

test("unknown adapters are a 404, bad adapters fields a 400", async () => {
  let r = await post(`${URL_}/v1/completions`, { model: `${ID}:nope`, prompt: "hi", max_tokens: 1 });
  assert.equal(r.status, 404, r.text);
  assert.match(r.json.error.message, /adapter 'nope'/);
  r = await post(`${URL_}/v1/completions`, { prompt: "hi", max_tokens: 1, adapters: [{ name: "nope" }] });
  assert.equal(r.status, 404, r.text);
  for (const bad of ["sql", [{ scale: 1 }], [{ name: "sql", scale: "x" }], Array(9).fill({ name: "sql" })]) {
    r = await post(`${URL_}/v1/completions`, { prompt: "hi", max_tokens: 1, adapters: bad });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, "adapters");
  }
  r = await post(`${URL_}/v1/completions`, { prompt: "hi", max_tokens: 1, adapters: [{ name: "../../etc" }] });
  assert.equal(r.status, 404, "a request names adapters, never paths");
});

await done();
