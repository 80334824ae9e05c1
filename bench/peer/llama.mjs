// llama.mjs — the llama.cpp side of bench/peer, through node-llama-cpp's prebuilt CPU binaries.
//
//   node llama.mjs bench  --model F.gguf [--threads 2] [--prompt-tokens 512] [--gen-tokens 128]
//   node llama.mjs greedy --model F.gguf --tokens 1,2,3 [--n 8] [--probs] [--threads 2]
//   node llama.mjs logprobs --model F.gguf --tokens 1,2,3 --out F.f32 [--threads 2]
//   node llama.mjs info
//
// bench: one JSON line. The prompt is the same pseudo-random token sequence `kiln bench` uses
// (LCG x = x * 6364136223846793005 + 1442695040888963407 from 12345, token = (x >> 33) % vocab), so
// both engines prefill identical ids. prefill_tok_s = prompt / (time from the start of the
// evaluation to the first generated token: the prompt's forward pass, its last row of logits
// and a greedy pick); decode_tok_s = (gen - 1) / (time for the remaining gen - 1 tokens, each a
// one-token forward pass that computes the full vocabulary logits row and samples greedily
// from it, as node-llama-cpp's completion API does). EOS does not stop the run. This is how
// `kiln bench` splits its figures.
// greedy: the first n greedy tokens after the prompt; with --probs also every step's full
// log-probability row (log of node-llama-cpp's probabilities, temperature 0 = plain softmax).
//
// logprobs: teacher-forced, one controlledEvaluate batch over --tokens with the full
// probability row after every position (temperature 0 = plain softmax of llama.cpp's logits);
// writes log p as little-endian float32 [tokens, vocab] to --out (-Infinity where p is 0)
// (bench/peer/accuracy compares it with the float64 reference).
//
// Never downloads or builds: getLlama({build: "never", usePrebuiltBinaries: true}); run with
// NODE_LLAMA_CPP_SKIP_DOWNLOAD=true so that nothing is fetched either.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { readFileSync, writeFileSync } from "node:fs";

function parse(argv) {
    const a = { cmd: argv[0], threads: 2, promptTokens: 512, genTokens: 128, n: 8, probs: false };
    for (let i = 1; i < argv.length; i++) {
        const k = argv[i];
        const v = () => {
            if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
            return argv[++i];
        };
        if (k === "--model") a.model = v();
        else if (k === "--threads") a.threads = parseInt(v(), 10);
        else if (k === "--prompt-tokens") a.promptTokens = parseInt(v(), 10);
        else if (k === "--gen-tokens") a.genTokens = parseInt(v(), 10);
        else if (k === "--tokens") a.tokens = v().split(",").map((s) => parseInt(s, 10));
        else if (k === "--n") a.n = parseInt(v(), 10);
        else if (k === "--probs") a.probs = true;
        else if (k === "--out") a.out = v();
        else throw new Error(`unknown flag ${k}`);
    }
    return a;
}

function benchPrompt(n, vocab) {
    // kiln bench's prompt (cli_model.c), in 64-bit unsigned arithmetic
    const M = (1n << 64n) - 1n;
    let x = 12345n;
    const out = [];
    for (let i = 0; i < n; i++) {
        x = (x * 6364136223846793005n + 1442695040888963407n) & M;
        out.push(Number((x >> 33n) % BigInt(vocab)));
    }
    return out;
}

function versions() {
    const base = new URL("./node_modules/node-llama-cpp/", import.meta.url);
    const pkg = JSON.parse(readFileSync(new URL("package.json", base), "utf8"));
    let llamaCpp = "?";
    try {
        llamaCpp = JSON.parse(readFileSync(new URL("llama/llama.cpp.info.json", base), "utf8")).tag;
    } catch { /* older layouts */ }
    return { node_llama_cpp: pkg.version, llama_cpp_release: llamaCpp };
}

async function open(a, contextSize) {
    const llama = await getLlama({
        gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
        progressLogs: false, logLevel: LlamaLogLevel.error, maxThreads: a.threads,
    });
    const model = await llama.loadModel({ modelPath: a.model, gpuLayers: 0 });
    const context = await model.createContext({
        contextSize, batchSize: Math.min(512, contextSize), threads: { ideal: a.threads, min: a.threads },
        sequences: 1,
    });
    return { llama, model, context, sequence: context.getSequence() };
}

async function bench(a) {
    const t0 = performance.now();
    const ctxSize = a.promptTokens + a.genTokens + 8;
    const { llama, model, context, sequence } = await open(a, ctxSize);
    const loadS = (performance.now() - t0) / 1000;
    const md = model.fileInfo.metadata;
    const nVocab = Number(md[md.general.architecture]?.vocab_size ?? 0);
    if (!nVocab) throw new Error("the GGUF has no <arch>.vocab_size (tools/gguf-export writes it)");
    const prompt = benchPrompt(a.promptTokens, nVocab);
    const start = performance.now();
    let first = 0;
    let n = 0;
    const it = sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true });
    for (;;) {
        const r = await it.next();
        if (r.done) break;
        n++;
        if (n === 1) first = performance.now();
        if (n >= a.genTokens) break;
    }
    const end = performance.now();
    await it.return();
    const prefillS = (first - start) / 1000;
    const decodeS = (end - first) / 1000;
    const out = {
        engine: "llama.cpp", ...versions(), model: a.model, threads: a.threads,
        prompt_tokens: a.promptTokens, gen_tokens: n,
        prefill_s: +prefillS.toFixed(4), decode_s: +decodeS.toFixed(4),
        prefill_tok_s: +(a.promptTokens / prefillS).toFixed(2),
        decode_tok_s: n > 1 ? +((n - 1) / decodeS).toFixed(2) : 0,
        load_s: +loadS.toFixed(3), context_size: context.contextSize, batch_size: context.batchSize,
        flash_attention: context.flashAttention,
    };
    console.log(JSON.stringify(out));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

async function greedy(a) {
    if (!a.tokens) throw new Error("--tokens is required");
    const { llama, model, context, sequence } = await open(a, a.tokens.length + a.n + 8);
    const tokens = [];
    const logprobs = [];
    const it = sequence.evaluateWithMetadata(a.tokens, { probabilities: a.probs }, { temperature: 0, yieldEogToken: true });
    for (;;) {
        const r = await it.next();
        if (r.done) break;
        tokens.push(r.value.token);
        if (a.probs) {
            const row = {};
            for (const [t, p] of r.value.probabilities) row[t] = p > 0 ? Math.log(p) : null;
            logprobs.push(row);
        }
        if (tokens.length >= a.n) break;
    }
    await it.return();
    console.log(JSON.stringify(a.probs ? { tokens, logprobs } : { tokens }));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

async function logprobs(a) {
    if (!a.tokens || !a.out) throw new Error("--tokens and --out are required");
    const { llama, model, context, sequence } = await open(a, a.tokens.length + 8);
    const md = model.fileInfo.metadata;
    const V = Number(md[md.general.architecture]?.vocab_size ?? 0);
    if (!V) throw new Error("the GGUF has no <arch>.vocab_size (tools/gguf-export writes it)");
    const input = a.tokens.map((t) => [t, { generateNext: { probabilities: true } }]);
    const res = await sequence.controlledEvaluate(input);
    const out = new Float32Array(a.tokens.length * V).fill(-Infinity);
    for (let i = 0; i < a.tokens.length; i++) {
        const pr = res[i]?.next?.probabilities;
        if (!pr) throw new Error(`no probabilities at position ${i}`);
        for (const [t, p] of pr) if (t >= 0 && t < V && p > 0) out[i * V + t] = Math.log(p);
    }
    writeFileSync(a.out, Buffer.from(out.buffer));
    console.log(JSON.stringify({ ...versions(), tokens: a.tokens.length, vocab: V }));
    await context.dispose();
    await model.dispose();
    await llama.dispose();
}

async function info() {
    const llama = await getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
        progressLogs: false, logLevel: LlamaLogLevel.error });
    console.log(JSON.stringify({ ...versions(), gpu: llama.gpu, build: llama.buildType,
        cpu_math_cores: llama.cpuMathCores, system_info: llama.systemInfo }));
    await llama.dispose();
}

const a = parse(process.argv.slice(2));
const run = { bench, greedy, logprobs, info }[a.cmd];
if (!run) {
    console.error("usage: node llama.mjs bench|greedy|logprobs|info --model F.gguf ...");
    process.exit(2);
}
if (a.cmd !== "info" && !a.model) {
    console.error("llama.mjs: --model is required");
    process.exit(2);
}
await run(a);
