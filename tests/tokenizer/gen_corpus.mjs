#!/usr/bin/env node
// gen_corpus.mjs OUT.json — writes kiln's tokenizer test corpus: a JSON array of
// strings (deterministic: a fixed seed). Categories: many scripts, emoji with ZWJ,
// skin tones and flags, CJK, RTL, combining marks, whitespace runs, digits, code,
// special-token text, and U+FFFD markers that the C test turns into invalid UTF-8.
// Avoided on purpose (the JS reference and HF Rust/Oniguruma disagree there):
// U+FEFF and U+0085 (JS \s vs Unicode White_Space), U+017F and U+212A (ASCII-only
// case folding of (?i:'s) in the JS rewrite), lone surrogates.
import fs from "node:fs";

let seed = 0x6b696c6e; // "kiln"
const rnd = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const pick = (a) => a[Math.floor(rnd() * a.length)];

const fixed = [
  "Hello world", " Hello world", "Hello, y'all! I'm sure we'll do it; they've said they'd DON'T.",
  "IT'S THE CAT'S 'RE 'VE 'LL 'D 'M 'T", "", " ", "  ", "   leading spaces", "trailing spaces   ",
  "\t", "\n", "\n\n\n", "\r\n", " \n \n", "tabs\tand\t\tmore\ttabs", "line1\nline2\n\nline4\r\nCRLF",
  "    indented code\n        deeper\n", "1234567890 3.14159 -42 1e10 2024-06-01 100000000000",
  "1 12 123 1234 12345 123456 1234567", "٣٤٥ ١٢ ۱۲۳ ४५६ 五六七", "héllo wörld ñ ç ß",
  "e\u0301 (decomposed) vs \u00e9 (composed)", "a\u0300\u0301\u0302\u0303 o\u0308 n\u0303",
  "Å Å Å", "ﬁ ﬂ ① ㎏ ｆｕｌｌ ｗｉｄｔｈ", "中文测试：你好，世界！", "日本語のテキスト、カタカナ、ひらがな",
  "한국어 텍스트 입니다", "Ελληνικά Русский текст Українська", "العربية: مرحبا بالعالم",
  "עברית: שלום עולם", "हिन्दी: नमस्ते दुनिया", "ภาษาไทย สวัสดีชาวโลก", "ქართული ენა", "Հայերեն",
  "emoji: 😀 🚀 🦙 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️", "👩🏾‍💻👨‍🚀🏳️‍🌈🧑🏻‍🤝‍🧑🏿", "🇺🇸🇬🇧🇯🇵", "#️⃣ 1️⃣ ©️ ®️ ™️",
  "def f(x):\n    return x ** 2  # square\n", "int main(void) { return printf(\"%d\\n\", 42); }",
  "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}", "<div class=\"x\">a &amp; b</div>",
  "SELECT * FROM t WHERE a >= 10 AND b <> 'x';", "x+=1;y-=2;z*=3;w/=4;", "a=>b, c->d, e::f, g!=h",
  "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Users\\name\\file.txt",
  "<|im_start|>user\nhi<|im_end|> <|begin_of_text|> <s> </s> <bos> <end_of_turn>",
  "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  "<s>[INST] hello [/INST]", "</s><s></s>", "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<tool_call>{\"name\": \"f\"}</tool_call>", "<|endoftext|>", "<unk><pad><mask>", "<table><tr><td>x</td></tr></table>",
  "\u2581already\u2581has\u2581metaspace", "▁▁▁ ▁", "bad \uFFFD byte", "\uFFFD", "\uFFFD\uFFFD\uFFFD start",
  "end \uFFFD", "mixed \uFFFD 中文 \uFFFD emoji 😀 \uFFFD", "The quick brown fox jumps over the lazy dog.",
  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
  "                                                                 ", "!!!!!!!????....,,,,;;;;",
  "\u00a0non-breaking\u00a0spaces\u3000ideographic\u2003em", "zero\u200Bwidth\u200Cjoiner\u200Dtest",
  "I'm a 'quoted' \"string\" with `backticks` and «guillemets» and „low“ quotes",
  "MiXeD CaSe WoRdS AND ALLCAPS and lowercase", "snake_case camelCase PascalCase kebab-case",
  "$100.00 €50 £30 ¥1000 ₹500", "½ ¼ ¾ ² ³ ⁴ ₁ ₂", "∀x∈ℝ: x² ≥ 0 ∧ √4 = 2", "→ ← ↑ ↓ ⇒ ⇔",
];

const words = ["the", "quick", "brown", "fox", "tokenizer", "kiln", "inference", "server", "don't",
  "it's", "we'll", "UPPER", "Mixed", "x", "a", "I", "hello", "world", "naïve", "café", "résumé",
  "straße", "Привет", "мир", "γειά", "σου", "你好", "世界", "こんにちは", "안녕하세요", "مرحبا",
  "שלום", "नमस्ते", "สวัสดี", "😀", "👨‍👩‍👧", "🇩🇪", "👍🏻", "e\u0301", "n\u0303", "٣", "42",
  "3.14", "1000000", "0x1F", "foo()", "bar[0]", "{}", "=>", "#include", "<stdio.h>", "\uFFFD"];
const seps = [" ", " ", " ", "  ", "\t", "\n", "\n\n", ", ", ". ", "!", "?", "", "   ", "\u3000", "\u00a0", " - ", "\r\n"];
const specials = ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<bos>", "<eos>", "<|begin_of_text|>",
  "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<think>", "</think>", "<|endoftext|>"];

const out = [...fixed];
while (out.length < 260) {
  const n = 1 + Math.floor(rnd() * 12);
  let s = rnd() < 0.3 ? pick(seps) : "";
  for (let i = 0; i < n; i++) {
    s += pick(words);
    if (rnd() < 0.08) s += pick(specials);
    s += pick(seps);
  }
  out.push(s);
}
fs.writeFileSync(process.argv[2], JSON.stringify(out, null, 0) + "\n");
console.error(`gen_corpus: ${out.length} strings`);
