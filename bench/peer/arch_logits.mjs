// arch_logits.mjs — llama.cpp's next-token distributions on a GGUF, for Reprise's architecture parity test.
//
//   node bench/peer/arch_logits.mjs -m MODEL.gguf [-n 1100] [--positions 0,1,100,1000,1099] [-k 8] [-t 2]
//
// Evaluates the same pseudo-random prompt `reprise bench model` uses (reprisePromptTokens: n ids) in one
// sequence and prints JSON: the token ids, and at each position the top-k next tokens with their log
// probabilities (temperature 1, no top-k/top-p/min-p: log softmax of the raw logits, so logit differences
// are exact differences of these values). tests/test_arch.c compares Reprise against the files
// bench/peer/arch_golden.sh makes with this script (tests/data/arch/*.json).
import { parseArgs, parsePositiveInt, die, loadLlama, loadModel, vocabSize, reprisePromptTokens, describeBuild } from "./common.mjs";
import { nextTokenProbs } from "./logits.mjs";

const usage = "usage: node arch_logits.mjs -m MODEL.gguf [-n N] [--positions P,..] [-k K] [-t THREADS]\n";
const o = parseArgs(process.argv.slice(2), {
    "-m": { key: "model", arg: true }, "-n": { key: "n", arg: true }, "--positions": { key: "positions", arg: true },
    "-k": { key: "k", arg: true }, "-t": { key: "threads", arg: true }
}, usage);
if (!o.model) die(usage);
const n = o.n ? parsePositiveInt("-n", o.n) : 1100;
const k = o.k ? parsePositiveInt("-k", o.k) : 8;
const threads = o.threads ? parsePositiveInt("-t", o.threads) : 2;
const positions = o.positions ? String(o.positions).split(",").map((v) => {
    if (!/^\d+$/.test(v.trim())) die(`--positions: expected a comma-separated list of integers >= 0, got '${o.positions}'`);
    return Number(v);
}) : [0, 1, 100, 1000, n - 1];
for (const p of positions) if (p >= n) die(`--positions: ${p} is not below -n ${n}`);

const { llama, info } = await loadLlama();
const model = await loadModel(llama, o.model);
const tokens = reprisePromptTokens(n, vocabSize(model));
const dists = await nextTokenProbs(model, tokens, positions, {
    context: {
        contextSize: n + 16, sequences: 1, threads: { ideal: threads, min: threads },
        ignoreMemorySafetyChecks: true, failedCreationRemedy: false
    }
}).catch((err) => die(err.message, 1));
const res = [];
for (const [i, p] of positions.entries()) {
    const probs = dists[i];
    const top = [];
    for (const [tok, pr] of probs) {
        if (top.length >= k) break;
        top.push([tok, Math.log(pr)]);
    }
    res.push({ pos: p, n_probs: probs.size, top });
}
process.stdout.write(JSON.stringify({ engine: describeBuild(info), n_tokens: n, positions: res }) + "\n");
await model.dispose();
