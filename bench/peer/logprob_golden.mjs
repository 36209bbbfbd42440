// logprob_golden.mjs — llama.cpp's next-token log-probabilities on a GGUF file at chosen positions, as JSON:
// the golden data of tests/test_gemma.c (tests/data/gemma_golden.json), made with
//
//   for a in gemma2 gemma3; do for t in f32 q8_0 q4_k_m; do
//     reprise synth --arch $a --preset tiny --type $t -o /tmp/$a-$t.gguf; done; done
//   node bench/peer/logprob_golden.mjs --label gemma2-tiny-f32 -m /tmp/gemma2-f32.gguf \
//     --label gemma3-tiny-f32 -m /tmp/gemma3-f32.gguf --label gemma2-tiny-q8_0 -m /tmp/gemma2-q8_0.gguf \
//     --label gemma3-tiny-q8_0 -m /tmp/gemma3-q8_0.gguf --label gemma2-tiny-q4_k_m -m /tmp/gemma2-q4_k_m.gguf \
//     --label gemma3-tiny-q4_k_m -m /tmp/gemma3-q4_k_m.gguf > tests/data/gemma_golden.json
//
// The prompt is a fixed pseudo-random token sequence (BOS, then ids in [259, 509): the byte-level pieces of
// synth's built-in vocabulary), longer than the tiny gemma shapes' 32-position window. For each recorded
// position the whole distribution comes back (node-llama-cpp's controlledEvaluate with temperature 1 and
// no top-k / top-p / min-p truncation, i.e. softmax of llama.cpp's logits) and is stored as log-probabilities
// (shift-free: comparable to any engine's logits after a log-softmax). CPU only, flash attention off.
// Needs `npm ci --omit=optional` in bench/peer first.
import { loadLlama, loadModel, describeBuild, vocabSize, die } from "./common.mjs";
import { nextTokenProbs, logProbs } from "./logits.mjs";

const args = process.argv.slice(2);
const models = [];
let label = null, nTokens = 160, positions = [0, 1, 31, 32, 33, 64, 100, 159];
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--label") label = args[++i];
    else if (a === "-m") models.push({ label: label ?? args[i + 1], path: args[++i] });
    else if (a === "-n") nTokens = Number(args[++i]);
    else if (a === "--positions") positions = args[++i].split(",").map(Number);
    else if (a === "-h" || a === "--help") {
        console.log("usage: node logprob_golden.mjs [--label L] -m MODEL.gguf [...] [-n TOKENS] [--positions 0,1,31,...]");
        process.exit(0);
    } else die(`unknown argument '${a}'`);
}
if (models.length === 0) die("-m MODEL.gguf is required");

// the same sequence as tests/test_gemma.c's golden_tokens()
function tokens(n) {
    const t = [1];
    let s = 12345n;
    const M = (1n << 64n) - 1n;
    while (t.length < n) {
        s = (s * 6364136223846793005n + 1442695040888963407n) & M;
        t.push(259 + Number((s >> 33n) % 250n));
    }
    return t;
}

const { llama, info } = await loadLlama();
const out = { engine: describeBuild(info), n_tokens: nTokens, positions, models: [] };
const toks = tokens(nTokens);
for (const m of models) {
    const model = await loadModel(llama, m.path);
    const V = vocabSize(model);
    const dists = await nextTokenProbs(model, toks, positions,
        { context: { contextSize: Math.max(256, nTokens), threads: 2, flashAttention: false } })
        .catch((err) => die(err.message, 1));
    // 5 decimals; null where the probability is 0 (or the token absent)
    const rows = positions.map((p, i) => ({
        pos: p, logprob: Array.from(logProbs(dists[i], V), (v) => v === -Infinity ? null : Number(v.toFixed(5)))
    }));
    out.models.push({ label: m.label, n_vocab: V, logprobs: rows });
    await model.dispose();
}
process.stdout.write(JSON.stringify(out) + "\n");
