// spec.test.mjs — speculative decoding never changes a token (docs/speculative.md).
//   node spec.test.mjs --spec URL (kiln serve --spec ngram) --plain URL (no drafting)
//                      [--method draft] (the drafting server drafts with --draft-model)
//                      [--identity-only] (a random model: skip what assumes stories260K's text)
import OpenAI from "openai";
import { test, done, assert, arg, vfetch } from "./harness.mjs";

const SPEC = arg("--spec"), PLAIN = arg("--plain"), METHOD = arg("--method") ?? "ngram";
const IDENTITY_ONLY = process.argv.includes("--identity-only");
const client = (u) => new OpenAI({ fetch: vfetch, apiKey: "none", baseURL: `${u}/v1`, maxRetries: 0, timeout: 120000 });
const spec = client(SPEC), plain = client(PLAIN);

// Text that quotes itself, as an edit quoting the code it changes: the n-gram
// drafter finds what follows in the prompt.
const STORY = "Once upon a time, there was a little girl named Lily. She liked to play with her ball in the park. One day, she saw a big dog. The dog was friendly and wanted to play too.";
const PROMPT = `${STORY}\n\nHere is the story again:\n\n${STORY.slice(0, 60)}`;

function requests() {
  const base = { model: "x", prompt: PROMPT, max_tokens: 48 };
  return [
    { ...base, temperature: 0 },
    { ...base, temperature: 0, logprobs: 2 },
    { ...base, temperature: 0.3, seed: 11 },
    { ...base, temperature: 0.8, seed: 12, top_p: 0.9 },
    { ...base, temperature: 1.0, seed: 13, top_k: 8, min_p: 0.05 },
    { ...base, temperature: 0, frequency_penalty: 0.5, presence_penalty: 0.2 },
    { ...base, temperature: 0, stop: [" ball"] },
    { ...base, temperature: 0.5, seed: 14, max_tokens: 5, stream: true },
  ];
}

async function run(c, p) {
  if (!p.stream) {
    const r = await c.completions.create(p);
    const ch = r.choices[0];
    return { text: ch.text, finish: ch.finish_reason, lp: ch.logprobs ? JSON.stringify(ch.logprobs) : null, usage: r.usage };
  }
  let text = "", finish = null;
  for await (const ch of await c.completions.create(p)) {
    text += ch.choices[0]?.text ?? "";
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish, lp: null, usage: null };
}

test("8 requests alone and together on the drafting server equal the plain server, bitwise", async () => {
  const reqs = requests();
  const ref = [];
  for (const p of reqs) ref.push(await run(plain, p));
  const alone = [];
  for (const p of reqs) alone.push(await run(spec, p));
  const together = await Promise.all(reqs.map((p) => run(spec, p)));
  for (let i = 0; i < reqs.length; i++) {
    for (const got of [alone[i], together[i]]) {
      assert.equal(got.text, ref[i].text, `request ${i} ${JSON.stringify(reqs[i])}`);
      assert.equal(got.finish, ref[i].finish, `request ${i} finish`);
      assert.equal(got.lp, ref[i].lp, `request ${i} logprobs`);
    }
  }
  if (IDENTITY_ONLY) return; // a random model: its text need not hit the stop or repeat
  assert.equal(ref[6].finish, "stop");
  assert.equal(ref[7].finish, "length");
  // the greedy quote: drafts were accepted, and usage says so as OpenAI does
  const d = alone[0].usage.completion_tokens_details;
  assert.ok(d.accepted_prediction_tokens > 0, JSON.stringify(alone[0].usage));
  assert.ok(d.rejected_prediction_tokens >= 0);
  assert.equal(ref[0].usage.completion_tokens_details.accepted_prediction_tokens, 0);
});

test('per request: "speculative": "off" drafts nothing, {"method":"ngram","max_draft":2} on a plain server drafts', async () => {
  const off = await spec.completions.create({ model: "x", prompt: PROMPT, max_tokens: 32, temperature: 0, speculative: "off" });
  assert.equal(off.usage.completion_tokens_details.accepted_prediction_tokens, 0);
  assert.equal(off.usage.completion_tokens_details.rejected_prediction_tokens, 0);
  const on = await plain.completions.create({ model: "x", prompt: PROMPT, max_tokens: 32, temperature: 0, speculative: { method: "ngram", max_draft: 2 } });
  // a random model's text need not repeat, and a plain server without --spec-fixed may decline drafts
  if (!IDENTITY_ONLY) assert.ok(on.usage.completion_tokens_details.accepted_prediction_tokens > 0);
  assert.equal(on.choices[0].text, off.choices[0].text);
});

test("bad speculative values are 400s naming the field", async () => {
  for (const [v, param] of [[{ method: "medusa" }, "speculative.method"], [{ max_draft: 99 }, "speculative.max_draft"], [7, "speculative"]]) {
    const r = await fetch(`${SPEC}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "x", prompt: "Hi", max_tokens: 2, speculative: v }) });
    assert.equal(r.status, 400, JSON.stringify(v));
    const j = await r.json();
    assert.equal(j.error.param, param, JSON.stringify(j));
  }
});

test("/stats and /metrics count drafted, accepted and emitted tokens", async () => {
  const s = await (await fetch(`${SPEC}/stats`)).json();
  const sp = s.engine.speculative;
  assert.equal(sp.method, METHOD);
  assert.equal(sp.max_draft, 4);
  assert.ok(sp.accepted > 0 && sp.drafted >= sp.accepted, JSON.stringify(sp));
  assert.equal(sp.emitted, sp.accepted + sp.verifications);
  // every row of this server drafted with its method: the by-method counters are the totals
  assert.equal(sp.by_method[METHOD].accepted, sp.accepted, JSON.stringify(sp.by_method));
  assert.equal(sp.by_method[METHOD].drafted, sp.drafted);
  assert.ok(sp.acceptance_rate > 0 && sp.acceptance_rate <= 1);
  const m = await (await fetch(`${SPEC}/metrics`)).text();
  const acc = Number(new RegExp(`kiln_spec_accepted_tokens_total\\{method="${METHOD}"\\} (\\d+)`).exec(m)[1]);
  assert.ok(acc >= sp.accepted, m);
  assert.match(m, /kiln_spec_acceptance_ratio /);
});

if (METHOD === "draft") {
  test("/stats shows the draft model; its pool holds nothing after the runs; draft on a plain server is a 400", async () => {
    const dm = (await (await fetch(`${SPEC}/stats`)).json()).engine.speculative.draft_model;
    assert.ok(dm && dm.layers > 0 && dm.weights_bytes > 0 && dm.kv_blocks > 0, JSON.stringify(dm));
    assert.ok(dm.forwards > 0 && dm.drafted > 0, JSON.stringify(dm));
    assert.equal(dm.kv_blocks_active, 0, JSON.stringify(dm));
    const r = await fetch(`${PLAIN}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "x", prompt: "Hi", max_tokens: 2, speculative: { method: "draft" } }) });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error.message, /draft model/);
  });
}

await done();
