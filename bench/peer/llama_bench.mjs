#!/usr/bin/env node
// llama_bench.mjs — llama-bench-style prefill (ppN) / decode (tgN) throughput of
// llama.cpp, through node-llama-cpp's prebuilt CPU binaries, on the same GGUF
// files and (by default) the same prompt tokens as `reprise bench model`.
import { spawn } from "node:child_process";
import os from "node:os";
import path from "node:path";
import {
    die, note, parseArgs, parseIntList, parsePositiveInt, stats, nowNs, secondsSince, reprisePromptTokens,
    readTokenFile, loadLlama, describeBuild, loadModel, vocabSize, mainWeightType, listCpuVariants
} from "./common.mjs";
import { ensureShim } from "./shim.mjs";

const USAGE = `usage: node bench/peer/llama_bench.mjs -m MODEL.gguf [-p 128,512] [-n 64] [-t 1,2] [-r 5]
                                   [-b 512] [-d 0,4096] [--busy N] [--tg-depth 0] [--tg-feed greedy|tokens] [--fa 0|1|auto]
                                   [--tokens FILE.json] [--cpu-variant NAME] [--threadpool persistent|disposable] [--pin]
                                   [--json] [--verbose]
  ppN  N prompt tokens evaluated from an empty KV cache in batches of -b (one batch when
       N <= -b; default -b is 512, like reprise bench model), logits for the last token
       only, which is then sampled greedily.
  tgN  N single-token evaluations, each followed by a greedy sample, from an empty KV cache
       (or after --tg-depth K prompt tokens evaluated untimed). The first evaluated token is
       prompt token K; the next ones are the sampled tokens (--tg-feed greedy, default) or
       the following prompt tokens (--tg-feed tokens, as reprise bench model does).
  -d D,...  each test after D tokens of context (evaluated untimed), as llama-bench's -d and
       'reprise bench model -d' (the same context token ids); rows read "pp512 @ d4096".
  --busy N  every run twice, alternating: quiet, then with another process spinning N threads
       (as 'reprise bench model --busy'); the busy rows give their paired median ratio to quiet.
  Median, min and max tok/s over -r runs after one warm-up run of each test.
  Prompt tokens: the same fixed xorshift64 sequence as 'reprise bench model' (ids in
  [0, n_vocab)), or the JSON array of token ids in --tokens.
  --cpu-variant NAME loads libggml-cpu-NAME.so instead of ggml's best-scoring one (shim.mjs)
  (available: ${listCpuVariants().join(", ") || "(package not installed)"}).
  --threadpool persistent (default) gives each context a persistent ggml threadpool, as
  llama-bench/llama-cli/llama-server do (an LD_PRELOAD shim, see shim.mjs);
  'disposable' measures node-llama-cpp as shipped (a new pool per llama_decode).
  --pin pins the pool to the first -t CPUs and the decoding thread to the last of them.
  --json prints a JSON array of {"engine","model","type","test","threads","tok_s_median",
  "tok_s_min","tok_s_max"}; build details go to stderr as '# ' lines.
`;

const opts = parseArgs(process.argv.slice(2), {
    "-m": { key: "model", arg: true }, "--model": { key: "model", arg: true },
    "-p": { key: "pp", arg: true }, "--n-prompt": { key: "pp", arg: true },
    "-n": { key: "tg", arg: true }, "--n-gen": { key: "tg", arg: true },
    "-t": { key: "threads", arg: true }, "--threads": { key: "threads", arg: true },
    "-r": { key: "reps", arg: true }, "--repetitions": { key: "reps", arg: true },
    "-b": { key: "batch", arg: true }, "--batch-size": { key: "batch", arg: true },
    "--tg-depth": { key: "tgDepth", arg: true },
    "-d": { key: "depth", arg: true }, "--n-depth": { key: "depth", arg: true },
    "--busy": { key: "busy", arg: true },
    "--tg-feed": { key: "tgFeed", arg: true },
    "--fa": { key: "fa", arg: true },
    "--tokens": { key: "tokens", arg: true },
    "--cpu-variant": { key: "cpuVariant", arg: true },
    "--threadpool": { key: "threadpool", arg: true },
    "--pin": { key: "pin", arg: false },
    "--json": { key: "json", arg: false },
    "--verbose": { key: "verbose", arg: false }
}, USAGE);

if (!opts.model) die("-m MODEL.gguf is required (see --help)");
const pps = parseIntList("-p", opts.pp ?? "512");
const tgs = parseIntList("-n", opts.tg ?? "64");
const threadList = parseIntList("-t", opts.threads ?? "2");
const reps = parsePositiveInt("-r", opts.reps ?? "5");
const nBatch = parsePositiveInt("-b", opts.batch ?? "512");
const tgDepth = opts.tgDepth == null ? 0 : (opts.tgDepth === "0" ? 0 : parsePositiveInt("--tg-depth", opts.tgDepth));
const depths = (opts.depth ?? "0").split(",").map((d) => {
    if (!/^\d+$/.test(d)) die(`-d expects comma-separated depths >= 0, got '${opts.depth}'`);
    return Number(d);
});
const busy = opts.busy == null ? 0 : parsePositiveInt("--busy", opts.busy);
if (tgDepth > 0 && depths.some((d) => d > 0)) die("--tg-depth and -d exclude each other");
const maxDepth = Math.max(...depths);
const tgFeed = opts.tgFeed ?? "greedy";
if (tgFeed !== "greedy" && tgFeed !== "tokens") die("--tg-feed must be 'greedy' or 'tokens'");
const fa = opts.fa ?? "0";
if (!["0", "1", "auto"].includes(fa)) die("--fa must be 0, 1 or auto");
const flashAttention = fa === "auto" ? "auto" : fa === "1";
const shim = ensureShim({ threadpool: opts.threadpool ?? "persistent", cpuVariant: opts.cpuVariant, pin: !!opts.pin }); // may re-execute under LD_PRELOAD
const modelPath = path.resolve(opts.model);
const tokensPath = opts.tokens ? path.resolve(opts.tokens) : null;

const { llama, info } = await loadLlama({ cpuVariant: opts.cpuVariant, verbose: !!opts.verbose });
const { GgmlType } = await import("node-llama-cpp");
const model = await loadModel(llama, modelPath);
const nVocab = vocabSize(model);
const mname = path.basename(modelPath);
const mtype = mainWeightType(llama, model, GgmlType);

const maxPp = pps.length ? Math.max(...pps) : 0;
const maxTg = tgs.length ? Math.max(...tgs) + tgDepth : 0;
const maxTok = Math.max(1, maxPp, maxTg) + maxDepth;
// tokens needed: pp uses toks[0..N); tg uses toks[0..depth] (+ toks[depth..depth+N) with --tg-feed tokens)
const needTok = Math.max(1, maxPp, tgs.length ? tgDepth + (tgFeed === "tokens" ? Math.max(...tgs) : 1) : 0);
let toks;
if (tokensPath) {
    toks = readTokenFile(tokensPath, nVocab);
    if (toks.length < needTok) die(`--tokens: '${opts.tokens}' holds ${toks.length} tokens, the tests need ${needTok}`);
} else {
    toks = reprisePromptTokens(needTok, nVocab);
}
// -d context tokens: reprise bench model's, its xorshift64 stream after its max(1, -p, -n) test tokens
const reprTok = Math.max(1, maxPp, tgs.length ? Math.max(...tgs) : 0);
const dtoks = maxDepth > 0 ? reprisePromptTokens(reprTok + maxDepth, nVocab).slice(reprTok) : [];
const batchSize = Math.min(nBatch, maxTok);

note(describeBuild(info));
note(`system_info: ${info.systemInfo}`);
note(`load average at start: ${os.loadavg().map((l) => l.toFixed(2)).join(" ")} on ${os.cpus().length} CPUs`);
note(`model: ${modelPath} (${mtype}, n_vocab ${nVocab}, ${(model.size / 2 ** 20).toFixed(1)} MiB)`);
note(`threadpool: ${shim.threadpool === "persistent" ? "persistent per context (as llama-bench)" : "disposable (node-llama-cpp as shipped: a new ggml threadpool per decode)"}` +
    `${shim.pin ? ", pinned" : ""}` +
    `${shim.shim ? `; LD_PRELOAD shim ${shim.shim}` : ""}${opts.cpuVariant ? `; CPU variant forced to ${opts.cpuVariant}` : ""}`);
note(`batch ${batchSize} (ubatch = batch in node-llama-cpp), flash_attn ${fa}, kv f16, ` +
    `tg from depth ${tgDepth}, tg feed ${tgFeed}, prompt tokens ${tokensPath ? "from " + opts.tokens : "reprise xorshift64"}`);

// The context a run starts from: -d tokens (untimed), or none.
// The depth's context is evaluated once and kept: a later run at the same depth erases only what the previous
// run added after it (as 'reprise bench model -d' prefills each depth once), so a 16k-token depth is not
// recomputed for every run.
async function atDepth(seq, depth) {
    const have = seq.contextTokens;
    const keep = depth > 0 && have.length >= depth && have.slice(0, depth).every((t, i) => t === dtoks[i]);
    if (keep) {
        if (have.length > depth) await seq.eraseContextTokenRanges([{ start: depth, end: have.length }]);
        return;
    }
    await seq.clearHistory();
    if (depth > 0) {
        // timed: a fill from an empty cache in batches of -b is a ppN of the context tokens (one sample)
        const t0 = nowNs();
        await seq.evaluateWithoutGeneratingNewTokens(dtoks.slice(0, depth));
        const dt = secondsSince(t0);
        note(`depth ${depth} evaluated from an empty cache in ${dt.toFixed(1)} s (${(depth / dt).toFixed(2)} tok/s)`);
    }
}

// One ppN run: clear the KV cache, evaluate `depth` context tokens (untimed), then time prefill of N tokens +
// greedy sample of the next.
async function runPp(seq, n, depth) {
    await atDepth(seq, depth);
    const prompt = toks.slice(0, n);
    const t0 = nowNs();
    const gen = seq.evaluate(prompt, { temperature: 0, yieldEogToken: true });
    const r = await gen.next();
    const dt = secondsSince(t0);
    await gen.return();
    if (r.done) throw new Error("prefill produced no token");
    return n / dt;
}

// One tgN run: clear the KV cache, evaluate tgDepth prompt tokens or `depth` context tokens (untimed), then
// time N single-token evaluations, each followed by a greedy sample.
async function runTg(seq, n, depth) {
    await atDepth(seq, depth);
    if (tgDepth > 0) await seq.evaluateWithoutGeneratingNewTokens(toks.slice(0, tgDepth));
    const t0 = nowNs();
    const gen = seq.evaluate([toks[tgDepth]], { temperature: 0, yieldEogToken: true });
    let r = await gen.next();
    for (let i = 1; i < n && !r.done; i++)
        r = await gen.next(tgFeed === "tokens" ? toks[tgDepth + i] : undefined);
    const dt = secondsSince(t0);
    await gen.return();
    if (r.done) throw new Error("generation stopped early");
    return n / dt;
}

// --busy: another process spinning `n` threads until killed.
function busyStart(n) {
    const code = `const { Worker } = require("node:worker_threads");
for (let i = 1; i < ${n}; i++) new Worker("for (;;) {}", { eval: true });
for (;;) {}`;
    return spawn(process.execPath, ["-e", code], { stdio: "ignore" });
}
async function busyStop(child) {
    if (!child) return;
    await new Promise((resolve) => { child.once("exit", resolve); child.kill("SIGKILL"); });
}

const results = [];
if (!opts.json) {
    process.stdout.write(`| ${"model".padEnd(28)} | ${"type".padEnd(6)} | threads | ${"test".padStart(8)} | tok/s median |        min |        max |\n`);
    process.stdout.write(`|${"-".repeat(30)}|${"-".repeat(8)}|${"-".repeat(9)}|${"-".repeat(10)}|${"-".repeat(14)}|${"-".repeat(12)}|${"-".repeat(12)}|\n`);
}
for (const threads of threadList) {
    const ctx = await model.createContext({
        contextSize: maxTok,
        batchSize,
        sequences: 1,
        threads: { ideal: threads, min: threads },
        flashAttention,
        ignoreMemorySafetyChecks: true,
        failedCreationRemedy: false
    });
    const seq = ctx.getSequence();
    const tests = [];
    for (const depth of depths)
        tests.push(...pps.map((n) => ["pp", n, depth]), ...tgs.map((n) => ["tg", n, depth]));
    for (const [kind, n, depth] of tests) {
        const run = kind === "pp" ? runPp : runTg;
        await run(seq, n, depth); // warm-up
        const variants = busy > 0 ? [0, busy] : [0];
        const samples = variants.map(() => []);
        const cpu0 = process.cpuUsage();
        const t0 = nowNs();
        for (let r = 0; r < reps; r++)
            for (let v = 0; v < variants.length; v++) {   // alternating quiet / busy: paired
                const child = variants[v] > 0 ? busyStart(variants[v]) : null;
                if (child) await new Promise((res) => setTimeout(res, 50)); // let it start spinning
                try { samples[v].push(await run(seq, n, depth)); } finally { await busyStop(child); }
            }
        const wall = secondsSince(t0);
        const cpu = process.cpuUsage(cpu0);
        const par = (cpu.user + cpu.system) / 1e6 / wall;
        const used = ctx.currentThreads; // llama_n_threads() of the context
        if (used !== threads) die(`context runs ${used} threads, ${threads} were requested`, 1);
        for (let v = 0; v < variants.length; v++) {
            const s = stats(samples[v]);
            const test = `${kind}${n}${depth > 0 ? ` @ d${depth}` : ""}${variants[v] > 0 ? ` busy=${variants[v]}` : ""}`;
            if (v === 0) {
                note(`${test} t=${threads}: llama_n_threads=${used}, process CPU time / wall time = ${par.toFixed(2)} over ${wall.toFixed(2)} s`);
                if (busy === 0 && par > threads + 0.5)
                    note(`warning: ${test} t=${threads} used more CPU than ${threads} thread(s) can`);
                else if (busy === 0 && par < 0.85 * threads)
                    note(`warning: ${test} t=${threads} ran on only ${par.toFixed(2)} CPUs on average (other load on the machine, ` +
                        `or threads sharing one CPU): this row is unreliable; load average now ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`);
            }
            const row = {
                engine: "llama.cpp", model: mname, type: mtype, test, threads,
                tok_s_median: +s.median.toFixed(3), tok_s_min: +s.min.toFixed(3), tok_s_max: +s.max.toFixed(3)
            };
            if (depth > 0) row.depth = depth;
            let ratio = null;
            if (variants[v] > 0) {
                ratio = stats(samples[v].map((x, i) => x / samples[0][i]));
                row.busy = variants[v];
                row.vs_quiet_median = +ratio.median.toFixed(4);
                row.vs_quiet_min = +ratio.min.toFixed(4);
                row.vs_quiet_max = +ratio.max.toFixed(4);
            }
            results.push(row);
            if (!opts.json) {
                process.stdout.write(`| ${mname.slice(0, 28).padEnd(28)} | ${mtype.padEnd(6)} | ${String(threads).padStart(7)} | ${test.padStart(8)} | ` +
                    `${s.median.toFixed(2).padStart(12)} | ${s.min.toFixed(2).padStart(10)} | ${s.max.toFixed(2).padStart(10)} |\n`);
                if (ratio)
                    process.stdout.write(`|   busy=${variants[v]} / quiet: ${ratio.median.toFixed(3)}x (median of ${reps} paired runs; ` +
                        `min ${ratio.min.toFixed(3)}x, max ${ratio.max.toFixed(3)}x)\n`);
            }
        }
    }
    await ctx.dispose();
}
if (opts.json) process.stdout.write(JSON.stringify(results, null, 2) + "\n");
await model.dispose();
await llama.dispose();
