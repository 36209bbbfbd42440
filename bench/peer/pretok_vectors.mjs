// pretok_vectors.mjs — pre-tokenizer test vectors from llama.cpp (via node-llama-cpp), for tests/test_tokenizer.c.
//
// The regex split of a byte-level BPE tokenizer does not depend on the vocab, so one real vocab
// (../shared/models/vocab/llama3-bpe.vocab.gguf: byte-level, 128k tokens, multi-digit number tokens)
// is relabelled with each `tokenizer.ggml.pre` name (and its tokenizer.ggml.add_bos_token key dropped,
// so llama.cpp's add-BOS default for that name shows) and loaded vocab-only in llama.cpp; the token
// ids it gives for a fixed set of texts are the vectors. Reprise's test relabels the same vocab the same
// way and must reproduce every id.
//
// Not run by CI. Usage (from the repository root, node_modules linked into bench/peer):
//   node bench/peer/pretok_vectors.mjs [--vocab PATH] [--out tests/data/pretok_vectors.json]
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { die, note, loadLlama, describeBuild, parseArgs } from "./common.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

// The `tokenizer.ggml.pre` names to record (llama.cpp spellings). Each must load in llama.cpp.
const PRE_NAMES = [
    // GPT-2 regex
    "default", "gpt-2", "phi-2", "mpt", "olmo", "jais", "gigachat", "a.x-4.0", "mellum", "exaone4", "trillion",
    "granite-docling",
    // Llama 3 regex
    "llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx", "smaug-bpe",
    // Qwen 2 regex
    "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open", "grok-2",
    // single digits, then GPT-2
    "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2",
    // o200k-style (GPT-4o)
    "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2",
    "tekken",
    "deepseek-llm", "deepseek-coder", "deepseek-v3", "hunyuan-dense", "joyai-llm",
    "falcon",
    "qwen35",
    "poro-chat", "bloom", "gpt3-finnish", "viking",
    "seed-coder", "bailingmoe", "bailingmoe2", "llada-moe", "exaone-moe", "minicpm5", "jais-2", "laguna",
];

// Texts beyond the ggml-vocab .inp cases: digits, contractions, case runs, CJK, emoji, combining
// marks (NFC-stable), whitespace runs, newlines, punctuation, code.
const EXTRA_TEXTS = [
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 0x1F 2024-06-01",
    "Phone: +1 (555) 010-9999, ext. 42; 10%/20% ~ $3.50",
    "I'm you're he's we've they'll she'd IT'S I'M YOU'RE 'tis rock'n'roll don't",
    "HelloWorld helloWorld HELLOworld XMLHttpRequest iPhone McDonald's CamelCaseX",
    "ÉCOLE École éCOLE aÉb ÀÖØ øÿ straße STRASSE İstanbul ǅemal",
    "中文测试：你好，世界！这是一个句子。",
    "日本語のテキスト、カタカナとひらがな。漢字も。",
    "한국어 텍스트 입니다. 안녕하세요!",
    "Здравствуй, мир! Привет 123 мир.",
    "हिन्दी भाषा में पाठ। ภาษาไทย ที่นี่ مرحبا بالعالم، كيف حالك؟",
    "emoji 🦙🦙 🚀 👍🏽 👨‍👩‍👧 ❤️ ✨done✨",
    "tabs\tand\t\tspaces    here  \t \n  \n\n\n   x",
    "line1\nline2\r\nline3\rline4\n\n",
    "   leading and trailing   ",
    "  \u00a0 nbsp\u3000ideographic\u2003em space",
    "...!!!???---___***~~~|||```'''\"\"\"(((]]]{{{}}}",
    "a.b,c;d:e!f?g'h\"i(j)k[l]m{n}o<p>q=r+s-t*u/v\\w|x^y~z`",
    "def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
    "int main(void) { return a[i] >= 0 && b != c ? 1 : -1; } // done",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    "https://example.com/path/to?q=1&r=two#frag user@mail.org",
    "ＡＢＣ ａｂｃ １２３ ！？ 全角テスト",
    "µs Ωmega K-ℵ ℂℕ № ⅓ ² ³ ① ½",
    "mixed中文English123日本語テスト한국어",
    "x\u0301 e\u0301 ",
];

function readInpCases(file) {
    const sep = "\n__ggml_vocab_test__\n";
    const s = fs.readFileSync(file, "utf8");
    const parts = s.split(sep);
    if (parts[parts.length - 1] === "") parts.pop();
    return parts;
}

// ---- minimal GGUF reader / writer: just enough to replace one string value ----

const GGUF_SIZES = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

function ggufRelabel(buf, newPre) {
    let o = 0;
    const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
    const u64 = () => { const v = Number(buf.readBigUInt64LE(o)); o += 8; return v; };
    const str = () => { const n = u64(); const s = buf.toString("utf8", o, o + n); o += n; return s; };
    const skipVal = (t) => {
        if (t === 8) { const n = u64(); o += n; return; }
        if (t === 9) {
            const et = u32(), n = u64();
            for (let i = 0; i < n; i++) skipVal(et);
            return;
        }
        if (!(t in GGUF_SIZES)) die(`gguf: unknown value type ${t}`, 1);
        o += GGUF_SIZES[t];
    };
    if (buf.toString("latin1", 0, 4) !== "GGUF") die("gguf: bad magic", 1);
    o = 4;
    const version = u32();
    if (version < 2) die(`gguf: version ${version} not supported`, 1);
    const nTensors = u64(), nKv = u64();
    const kvs = [];
    let alignment = 32, havePre = false;
    for (let i = 0; i < nKv; i++) {
        const start = o;
        const key = str();
        const t = u32();
        const vstart = o;
        if (key === "general.alignment" && t === 4) alignment = buf.readUInt32LE(o);
        skipVal(t);
        kvs.push({ key, t, start, vstart, end: o });
    }
    const kvEnd = o;
    for (let i = 0; i < nTensors; i++) {
        str();
        const nd = u32();
        o += nd * 8 + 4 + 8;
    }
    const tiEnd = o;
    const dataStart = Math.ceil(tiEnd / alignment) * alignment;

    const chunks = [];
    const head = Buffer.alloc(24);
    buf.copy(head, 0, 0, 24);
    const strBuf = (s) => {
        const b = Buffer.from(s, "utf8");
        const n = Buffer.alloc(8);
        n.writeBigUInt64LE(BigInt(b.length));
        return Buffer.concat([n, b]);
    };
    const preKv = (pre) => {
        const t = Buffer.alloc(4);
        t.writeUInt32LE(8);
        return Buffer.concat([strBuf("tokenizer.ggml.pre"), t, strBuf(pre)]);
    };
    let n = 0;
    for (const kv of kvs) {
        if (kv.key === "tokenizer.ggml.add_bos_token") continue;   // so add_bos is the pre's default
        if (kv.key === "tokenizer.ggml.pre") {
            havePre = true;
            chunks.push(preKv(newPre));
        } else {
            chunks.push(buf.subarray(kv.start, kv.end));
        }
        n++;
    }
    if (!havePre) {
        chunks.push(preKv(newPre));
        n++;
    }
    head.writeBigUInt64LE(BigInt(n), 16);
    chunks.unshift(head);
    chunks.push(buf.subarray(kvEnd, tiEnd));
    let len = chunks.reduce((a, c) => a + c.length, 0);
    if (nTensors > 0) {
        const pad = Math.ceil(len / alignment) * alignment - len;
        chunks.push(Buffer.alloc(pad));
        chunks.push(buf.subarray(dataStart));
    }
    return Buffer.concat(chunks);
}

async function main() {
    const opts = parseArgs(process.argv.slice(2), {
        "--vocab": { key: "vocab", arg: true },
        "--out": { key: "out", arg: true },
    }, "usage: node bench/peer/pretok_vectors.mjs [--vocab PATH] [--out FILE]");
    const vocabRel = "models/vocab/llama3-bpe.vocab.gguf";
    const vocab = opts.vocab ?? path.join(root, "..", "shared", vocabRel);
    const out = opts.out ?? path.join(root, "tests", "data", "pretok_vectors.json");
    if (!fs.existsSync(vocab)) die(`vocab '${vocab}' not found`, 1);
    const inp = path.join(path.dirname(vocab), "ggml-vocab-llama-bpe.gguf.inp");
    if (!fs.existsSync(inp)) die(`'${inp}' not found`, 1);
    const texts = [...readInpCases(inp), ...EXTRA_TEXTS];

    const { llama, info } = await loadLlama();
    note(describeBuild(info));
    const src = fs.readFileSync(vocab);
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "pretok-"));
    const result = {
        about: "token ids llama.cpp gives for each text with the vocab relabelled to each tokenizer.ggml.pre " +
            "(no BOS, special tokens not parsed; add_bos: llama.cpp's default with no add_bos_token key): pre[name].result indexes results, one id list per text; made by bench/peer/pretok_vectors.mjs",
        llama_cpp: info.llamaCppRelease,
        node_llama_cpp: info.nodeLlamaCpp,
        vocab: vocabRel,
        texts,
        results: [],   // distinct id lists (one per text), shared by the pre names that agree
        pre: {},
    };
    for (const pre of PRE_NAMES) {
        const file = path.join(tmp, `vocab-${pre}.gguf`);
        fs.writeFileSync(file, ggufRelabel(src, pre));
        let model;
        try {
            model = await llama.loadModel({ modelPath: file, vocabOnly: true, gpuLayers: 0 });
        } catch (err) {
            die(`llama.cpp refused pre '${pre}': ${err?.message ?? err}`, 1);
        }
        const ids = texts.map((t) => Array.from(model.tokenize(t, false)));
        for (let i = 0; i < texts.length; i++) {
            const back = model.detokenize(ids[i], false);
            if (back !== texts[i]) note(`${pre}: text ${i} does not round-trip in llama.cpp (kept as is)`);
        }
        const bos = model.tokens.shouldPrependBosToken;
        if (typeof bos !== "boolean") die(`${pre}: llama.cpp gave no add-BOS flag`, 1);
        const key = JSON.stringify(ids);
        let r = result.results.findIndex((x) => JSON.stringify(x) === key);
        if (r < 0) {
            r = result.results.length;
            result.results.push(ids);
        }
        result.pre[pre] = { add_bos: bos, result: r };
        await model.dispose();
        fs.rmSync(file);
        note(`${pre}: ${ids.reduce((a, x) => a + x.length, 0)} tokens over ${texts.length} texts`);
    }
    fs.rmSync(tmp, { recursive: true, force: true });
    // one line per id list keeps the file diffable
    let s = "{\n";
    s += `  "about": ${JSON.stringify(result.about)},\n`;
    s += `  "llama_cpp": ${JSON.stringify(result.llama_cpp)},\n`;
    s += `  "node_llama_cpp": ${JSON.stringify(result.node_llama_cpp)},\n`;
    s += `  "vocab": ${JSON.stringify(result.vocab)},\n`;
    s += `  "texts": [\n${texts.map((t) => "    " + JSON.stringify(t)).join(",\n")}\n  ],\n`;
    s += `  "results": [\n` + result.results.map((r) =>
        "    [\n" + r.map((x) => "      " + JSON.stringify(x)).join(",\n") + "\n    ]").join(",\n") + "\n  ],\n";
    s += `  "pre": {\n`;
    s += Object.entries(result.pre).map(([k, v]) =>
        `    ${JSON.stringify(k)}: {"add_bos": ${v.add_bos}, "result": ${v.result}}`).join(",\n");
    s += "\n  }\n}\n";
    fs.writeFileSync(out, s);
    note(`wrote ${out}`);
}

main().catch((err) => die(err?.stack ?? String(err), 1));
