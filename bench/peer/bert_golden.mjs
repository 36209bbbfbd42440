// bert_golden.mjs — llama.cpp's WordPiece ids and pooled embeddings on a bert / nomic-bert GGUF, for Reprise's
// encoder parity test (tests/test_bert.c reads what bench/peer/bert_golden.sh stores in tests/data/bert/).
//
//   node bench/peer/bert_golden.mjs -m MODEL.gguf [-t 2] [--long N]
//
// Prints JSON: for each text of TEXTS, the ids llama.cpp's tokenizer gives without special tokens (node-llama-cpp's
// model.tokenize: llama_tokenize with add_special = false, parse_special = false); and for each text the pooled,
// unnormalized embedding llama.cpp's embedding mode computes (createEmbeddingContext, the model's pooling type) of
// [CLS] ids [SEP] — the input is given as those token ids, so Reprise can embed exactly the same sequence —, plus
// one pseudo-random sequence of --long tokens (default: the context length minus 8) to cover long inputs.
import { parseArgs, parsePositiveInt, die, loadLlama, loadModel, vocabSize, reprisePromptTokens, describeBuild } from "./common.mjs";

// lowercase, accents (composed and combining), punctuation, CJK and kana, unknown words, long words, whitespace
export const TEXTS = [
    "Hello World",
    "HELLO, World! How are you?",
    "The capital of France is Paris.",
    "Café résumé naïve Über straße École MÜNCHEN Zürich São Paulo",
    "cafe\u0301 re\u0301sume\u0301 A\u030a \u00c5ngstr\u00f6m",
    "Hello... (world) [brackets] {braces} <angle> \"quotes\" 'single' #hash $dollar %percent &and *star",
    "a-b_c+d=e/f\\g|h~i`j^k@l",
    "中文测试：你好，世界！这是一个句子。",
    "日本語のテキスト、カタカナとひらがな。漢字も。",
    "한국어 텍스트 입니다. 안녕하세요!",
    "Здравствуй, мир! Привет мир. αβγ δ πω",
    "unbelievable misunderstanding retrievals documentation internationalization",
    "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis",
    "qzxv jjjkkk xqzzy wwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwwww",
    "tabs\tand\nnewlines\r\n  multiple   spaces  ",
    "numbers 3.14159 1,000,000 2024-06-01 +1 (555) 010-9999",
    "emoji 🦙 🚀 👍🏽 ❤️ done",
    "\u00a0nbsp\u3000ideographic\u2003em\u200bzero-width\u00adsoft-hyphen",
    "控制\u0007字符\u001b[0m and \u0000 nul",
    "What is the capital of France? The capital of France is Paris, a city known for its history, music and science.",
];

const usage = "usage: node bert_golden.mjs -m MODEL.gguf [-t THREADS] [--long N]\n";
const o = parseArgs(process.argv.slice(2), {
    "-m": { key: "model", arg: true }, "-t": { key: "threads", arg: true }, "--long": { key: "long", arg: true }
}, usage);
if (!o.model) die(usage);
const threads = o.threads ? parsePositiveInt("-t", o.threads) : 2;

const { llama, info } = await loadLlama();
const model = await loadModel(llama, o.model);
const meta = model.fileInfo.metadata;
const arch = meta?.general?.architecture;
const nCtx = Number(meta?.[arch]?.context_length);
if (!(nCtx > 16)) die(`cannot read ${arch}.context_length`, 1);
const nLong = o.long ? parsePositiveInt("--long", o.long) : nCtx - 8;
const cls = model.tokens.bos, sep = model.tokens.sep;
if (cls == null || sep == null) die("the model has no [CLS] / [SEP] tokens (not a WordPiece vocabulary?)", 1);

const wpm = TEXTS.map((text) => ({ text, ids: Array.from(model.tokenize(text, false)) }));
const ctx = await model.createEmbeddingContext({ contextSize: nCtx, batchSize: nCtx, threads, ignoreMemorySafetyChecks: true })
    .catch((err) => die(`createEmbeddingContext: ${err.message}`, 1));
const seqs = wpm.map((w) => [cls, ...w.ids, sep]);
// a long input: [CLS], pseudo-random ids past the special ones, [SEP]
const V = vocabSize(model);
seqs.push([cls, ...reprisePromptTokens(nLong - 2, V - 1000).map((t) => t + 1000), sep]);
const embed = [];
for (const ids of seqs) {
    const e = await ctx.getEmbeddingFor(ids).catch((err) => die(`getEmbeddingFor: ${err.message}`, 1));
    embed.push({ ids, vec: Array.from(e.vector).map((x) => Number(x.toPrecision(8))) });
}
process.stdout.write(JSON.stringify({ engine: describeBuild(info), arch, n_ctx: nCtx, wpm, embed }) + "\n");
await ctx.dispose();
await model.dispose();
