// make_reference.mjs — runs ref_tokenize.mjs once per (model, conversation), a few
// at a time, and collects the renders (or the error a template raised) into one
// JSON file, in a fixed order. Called by make_reference.sh; see there.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const a = { names: [] };
for (let i = 2; i < process.argv.length; i++) {
  const k = process.argv[i];
  if (k.startsWith("--")) a[k.slice(2)] = process.argv[++i];
  else a.names.push(k);
}
const convs = JSON.parse(fs.readFileSync(a.conversations, "utf8"));
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-tmpl-ref-"));
const noTexts = path.join(tmp, "texts.json");
fs.writeFileSync(noTexts, "[]");

function run(model, c, idx) {
  const chatFile = path.join(tmp, `chat${idx}.json`);
  fs.writeFileSync(chatFile, JSON.stringify(c.chat));
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [a.tool, "--model", path.join(a["model-dir"], model),
      "--modules", a.modules, "--texts", noTexts, "--chat", chatFile]);
    let so = "", se = "";
    p.stdout.on("data", (d) => (so += d));
    p.stderr.on("data", (d) => (se += d));
    p.on("close", (status) => {
      const entry = { model, conversation: c.name };
      let versions = null;
      if (status === 0) {
        const doc = JSON.parse(so);
        versions = doc.versions;
        if (doc.chat && doc.chat.error) entry.no_template = true;
        else entry.rendered = doc.chat.rendered;
      } else {
        // ref_tokenize prints the error's stack: "Error: <message>\n    at ..."
        entry.error = se.split(/\n\s+at /)[0].replace(/^[A-Za-z]*Error: /, "").trimEnd();
      }
      resolve({ entry, versions });
    });
  });
}

const jobs = [];
for (const model of a.names) convs.forEach((c) => jobs.push([model, c]));
const results = new Array(jobs.length);
let next = 0;
async function worker() {
  while (next < jobs.length) {
    const i = next++;
    results[i] = await run(jobs[i][0], jobs[i][1], i);
  }
}
await Promise.all(Array.from({ length: Math.min(6, os.cpus().length) }, worker));
fs.rmSync(tmp, { recursive: true, force: true });

const out = { generator: "tests/template/make_reference.sh", versions: null, cases: [] };
const noTemplate = new Set();
for (const r of results) {
  out.versions ??= r.versions;
  if (r.entry.no_template) {
    if (noTemplate.has(r.entry.model)) continue; // the same for every conversation
    noTemplate.add(r.entry.model);
    delete r.entry.conversation;
  }
  out.cases.push(r.entry);
}
fs.writeFileSync(a.out, JSON.stringify(out, null, 1) + "\n");
const n = (p) => out.cases.filter(p).length;
console.error(`reference: ${out.cases.length} cases, ${n((e) => "rendered" in e)} renders, ` +
  `${n((e) => "error" in e)} errors, ${n((e) => e.no_template)} without a template -> ${a.out}`);
