#!/usr/bin/env node
// prompt_cache.mjs — time-to-first-token (TTFT) of a sequence of prompts on llama.cpp
// (through node-llama-cpp), with and without reuse of the KV cache of the common
// prefix with the previous prompt — what llama-server does with cache_prompt: true.
import fs from "node:fs";
import path from "node:path";
import {
    die, note, parseArgs, parsePositiveInt, stats, nowNs, secondsSince, readJson,
    loadLlama, describeBuild, loadModel, vocabSize, mainWeightType, listCpuVariants
} from "./common.mjs";
import { ensureShim } from "./shim.mjs";

const USAGE = `usage: node bench/peer/prompt_cache.mjs -m MODEL.gguf --prompts PROMPTS.json [-t 2] [-r 1]
                                     [--mode both|reuse|fresh] [--only-previous] [-b 512] [-c CTX]
                                     [--fa 0|1|auto] [--cpu-variant NAME] [--threadpool persistent|disposable]
                                     [--pin] [--json [OUT.json]] [--verbose]
  PROMPTS.json: {"prompts": [{"query": i, "timed": true|false, "tokens": [ids...]}, ...]} as
  \`reprise bench reuse --export-prompts\` writes it (per query its warm-up prompts, then the timed
  one), or a plain JSON array whose items are token-id arrays (used as is) or strings (tokenized by
  llama.cpp with the model's BOS/special-token rules, as llama-server does); every prompt of a plain
  array counts as timed.
  Prompts are processed in order on one context sequence. TTFT of a prompt = time from
  submitting it to having the first generated token (prefill with logits for the last
  prompt token + one greedy sample).
  reuse  keep the sequence's KV cache; drop the cells after the longest common prefix with
         what the sequence holds (the previous prompt; generated tokens are not kept), then
         evaluate the rest. At least one token is always evaluated, so a repeated prompt
         reuses n-1 tokens — llama-server's cache_prompt behaviour (without n_cache_reuse
         chunk shifting).
  fresh  clear the sequence before each prompt (untimed) and evaluate the whole prompt
         (cache_prompt: false); only the timed prompts are run.
  --only-previous runs, before each timed prompt, only the prompt just before it: a single-slot
  prompt cache keeps nothing older, so the other warm-ups cannot change the timed prompt's TTFT
  (they only cost time).
  -r N repeats the whole prompt sequence N times (after one untimed warm-up pass) and
  reports the median/min/max TTFT of each prompt. -c defaults to the longest prompt + 1.
  --cpu-variant (${listCpuVariants().join(", ") || "?"}), --threadpool and --pin are as in llama_bench.mjs.
  Prints a per-prompt table and, per mode, the timed prompts' mean / p50 / p95 TTFT and mean
  reused tokens. --json prints a JSON array of {"engine","model","type","threads","mode","prompt",
  "query","timed","n_tokens","n_reused","n_evaluated","ttft_ms_median","ttft_ms_min","ttft_ms_max"};
  --json OUT.json writes {"engine","model","type","threads","only_previous","summary": [{"mode",
  "timed","ttft_mean_ms","ttft_p50_ms","ttft_p95_ms","reused_mean","tokens_mean"}],"rows": [...]}.
`;

// "--json OUT" / "--json=OUT" write the JSON to a file; a bare --json prints it.
const argv = [];
for (let i = 2; i < process.argv.length; i++) {
    const a = process.argv[i];
    if (a === "--json" && i + 1 < process.argv.length && !process.argv[i + 1].startsWith("-")) argv.push(`--json-out=${process.argv[++i]}`);
    else if (a.startsWith("--json=")) argv.push(`--json-out=${a.slice(7)}`);
    else argv.push(a);
}
const opts = parseArgs(argv, {
    "-m": { key: "model", arg: true }, "--model": { key: "model", arg: true },
    "--prompts": { key: "prompts", arg: true },
    "-t": { key: "threads", arg: true }, "--threads": { key: "threads", arg: true },
    "-r": { key: "reps", arg: true }, "--repetitions": { key: "reps", arg: true },
    "-b": { key: "batch", arg: true }, "--batch-size": { key: "batch", arg: true },
    "-c": { key: "ctx", arg: true }, "--ctx-size": { key: "ctx", arg: true },
    "--mode": { key: "mode", arg: true },
    "--fa": { key: "fa", arg: true },
    "--cpu-variant": { key: "cpuVariant", arg: true },
    "--threadpool": { key: "threadpool", arg: true },
    "--pin": { key: "pin", arg: false },
    "--json": { key: "json", arg: false },
    "--json-out": { key: "jsonOut", arg: true },
    "--only-previous": { key: "onlyPrevious", arg: false },
    "--verbose": { key: "verbose", arg: false }
}, USAGE);

if (!opts.model) die("-m MODEL.gguf is required (see --help)");
if (!opts.prompts) die("--prompts PROMPTS.json is required (see --help)");
const threads = parsePositiveInt("-t", opts.threads ?? "2");
const reps = parsePositiveInt("-r", opts.reps ?? "1");
const nBatch = parsePositiveInt("-b", opts.batch ?? "512");
const mode = opts.mode ?? "both";
if (!["both", "reuse", "fresh"].includes(mode)) die("--mode must be both, reuse or fresh");
const fa = opts.fa ?? "0";
if (!["0", "1", "auto"].includes(fa)) die("--fa must be 0, 1 or auto");
const flashAttention = fa === "auto" ? "auto" : fa === "1";
const shim = ensureShim({ threadpool: opts.threadpool ?? "persistent", cpuVariant: opts.cpuVariant, pin: !!opts.pin });
const modelPath = path.resolve(opts.model);
const promptsPath = path.resolve(opts.prompts);
const rawFile = readJson(promptsPath, "--prompts");
// {"prompts": [{query, timed, tokens}]} (bench reuse --export-prompts) or a plain array (every prompt timed)
const tagged = rawFile && !Array.isArray(rawFile) && Array.isArray(rawFile.prompts);
const rawPrompts = tagged ? rawFile.prompts.map((p) => p.tokens) : rawFile;
if (!Array.isArray(rawPrompts) || rawPrompts.length === 0) die("--prompts: expected {\"prompts\": [...]} or a non-empty JSON array");
const timed = tagged ? rawFile.prompts.map((p) => p.timed !== false) : rawPrompts.map(() => true);
const queryOf = tagged ? rawFile.prompts.map((p, i) => (Number.isInteger(p.query) ? p.query : i)) : rawPrompts.map((_, i) => i);
if (!timed.some((t) => t)) die("--prompts: no prompt is marked timed");

const { llama, info } = await loadLlama({ cpuVariant: opts.cpuVariant, verbose: !!opts.verbose });
const { GgmlType } = await import("node-llama-cpp");
const model = await loadModel(llama, modelPath);
const nVocab = vocabSize(model);
const mname = path.basename(modelPath);
const mtype = mainWeightType(llama, model, GgmlType);

const prompts = rawPrompts.map((p, i) => {
    let toks;
    if (typeof p === "string") {
        toks = model.tokenize(p, true);
        if (model.tokens.shouldPrependBosToken && model.tokens.bos != null && toks[0] !== model.tokens.bos)
            toks = [model.tokens.bos, ...toks];
    } else if (Array.isArray(p) && p.every((t) => Number.isInteger(t))) {
        toks = p.slice();
        const bad = toks.find((t) => t < 0 || t >= nVocab);
        if (bad !== undefined) die(`--prompts: prompt ${i}: token id ${bad} is outside [0, ${nVocab})`);
    } else {
        die(`--prompts: prompt ${i} must be a string or an array of integer token ids`);
    }
    if (toks.length === 0) die(`--prompts: prompt ${i} is empty`);
    return toks;
});
const maxLen = Math.max(...prompts.map((p) => p.length));
const ctxSize = opts.ctx ? parsePositiveInt("-c", opts.ctx) : maxLen + 1;
if (ctxSize < maxLen) die(`-c ${ctxSize} is shorter than the longest prompt (${maxLen} tokens)`);

note(describeBuild(info));
note(`model: ${modelPath} (${mtype}, n_vocab ${nVocab})`);
note(`threadpool: ${shim.threadpool}${shim.pin ? ", pinned" : ""}${opts.cpuVariant ? `; CPU variant forced to ${opts.cpuVariant}` : ""}; ` +
    `threads ${threads}, batch ${Math.min(nBatch, ctxSize)}, ctx ${ctxSize}, flash_attn ${fa}, ` +
    `${prompts.length} prompts (${prompts.map((p) => p.length).join(", ")} tokens)`);

const ctx = await model.createContext({
    contextSize: ctxSize,
    batchSize: Math.min(nBatch, ctxSize),
    sequences: 1,
    threads: { ideal: threads, min: threads },
    flashAttention,
    ignoreMemorySafetyChecks: true,
    failedCreationRemedy: false
});
const seq = ctx.getSequence();
if (seq.needsCheckpoints)
    note("warning: this model's KV cache cannot be trimmed to a prefix (SWA/recurrent); reuse will re-evaluate");

// Prefill `tokens` at the end of the sequence and sample one token greedily; returns seconds.
async function firstToken(tokens) {
    const t0 = nowNs();
    const gen = seq.evaluate(tokens, { temperature: 0, yieldEogToken: true });
    const r = await gen.next();
    const dt = secondsSince(t0);
    await gen.return();
    if (r.done) throw new Error("prefill produced no token");
    return dt;
}

// The prompts a pass runs, in order: all of them, or (--only-previous) each timed one after the
// prompt just before it; fresh passes run only the timed prompts.
function schedule(reuse) {
    const out = [];
    prompts.forEach((_, i) => {
        if (!timed[i] && (!reuse || opts.onlyPrevious)) return;
        if (reuse && opts.onlyPrevious && i > 0 && out[out.length - 1] !== i - 1) out.push(i - 1);
        out.push(i);
    });
    return out;
}

// One pass over the scheduled prompts; returns per-prompt {n_reused, n_evaluated, seconds} (index = prompt).
async function pass(reuse, order) {
    await seq.clearHistory();
    const out = [];
    for (const i of order) {
        const toks = prompts[i];
        if (!reuse) {
            await seq.clearHistory(); // untimed: a fresh sequence
            out[i] = { n_reused: 0, n_evaluated: toks.length, seconds: await firstToken(toks) };
            continue;
        }
        const t0 = nowNs();
        const { firstDifferentIndex } = seq.compareContextTokens(toks);
        const keep = Math.min(firstDifferentIndex, toks.length - 1);
        // Drop the KV cells after the kept prefix (llama_memory_seq_rm); never re-evaluates behind our back.
        if (seq.nextTokenIndex > keep) await seq.adaptStateToTokens(toks.slice(0, keep), false);
        const kept = seq.nextTokenIndex; // less than keep only if llama.cpp could not trim the cache
        const gen = seq.evaluate(toks.slice(kept), { temperature: 0, yieldEogToken: true });
        const r = await gen.next();
        const dt = secondsSince(t0);
        await gen.return();
        if (r.done) throw new Error("prefill produced no token");
        out[i] = { n_reused: kept, n_evaluated: toks.length - kept, seconds: dt };
    }
    return out;
}

function pctSorted(v, p) {
    if (v.length === 0) return 0;
    const x = p * (v.length - 1), lo = Math.floor(x), hi = Math.ceil(x);
    return v[lo] + (v[hi] - v[lo]) * (x - lo);
}

const modes = mode === "both" ? ["fresh", "reuse"] : [mode];
const rows = [];
const summary = [];
for (const m of modes) {
    const order = schedule(m === "reuse");
    note(`${m}: ${order.length} prompts per pass (${order.filter((i) => timed[i]).length} timed)`);
    // warm-up (threads, allocations): the whole schedule, or with --only-previous its shortest prompt, fresh
    if (opts.onlyPrevious) await pass(false, [order.reduce((a, b) => (prompts[b].length < prompts[a].length ? b : a))]);
    else await pass(m === "reuse", order);
    const passes = [];
    for (let r = 0; r < reps; r++) passes.push(await pass(m === "reuse", order));
    const seen = new Set();
    for (const i of order) {
        if (seen.has(i)) continue;
        seen.add(i);
        const s = stats(passes.map((p) => p[i].seconds * 1e3));
        rows.push({
            engine: "llama.cpp", model: mname, type: mtype, threads, mode: m, prompt: i, query: queryOf[i], timed: timed[i],
            n_tokens: prompts[i].length, n_reused: passes[0][i].n_reused, n_evaluated: passes[0][i].n_evaluated,
            ttft_ms_median: +s.median.toFixed(3), ttft_ms_min: +s.min.toFixed(3), ttft_ms_max: +s.max.toFixed(3)
        });
    }
    const t = rows.filter((r) => r.mode === m && r.timed);
    const v = t.map((r) => r.ttft_ms_median).sort((a, b) => a - b);
    const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
    summary.push({
        mode: m, timed: t.length, ttft_mean_ms: +mean(v).toFixed(3), ttft_p50_ms: +pctSorted(v, 0.5).toFixed(3),
        ttft_p95_ms: +pctSorted(v, 0.95).toFixed(3), reused_mean: +mean(t.map((r) => r.n_reused)).toFixed(1),
        tokens_mean: +mean(t.map((r) => r.n_tokens)).toFixed(1)
    });
}

if (opts.jsonOut) {
    const doc = { engine: "llama.cpp", model: mname, type: mtype, threads, only_previous: !!opts.onlyPrevious,
                  prompts_file: promptsPath, summary, rows };
    fs.writeFileSync(opts.jsonOut, JSON.stringify(doc, null, 1) + "\n");
    note(`wrote ${opts.jsonOut}`);
}
if (opts.json) {
    process.stdout.write(JSON.stringify(rows, null, 2) + "\n");
} else {
    const fresh = new Map(rows.filter((r) => r.mode === "fresh").map((r) => [r.prompt, r]));
    process.stdout.write(`| prompt | tokens | mode  | reused | evaluated | TTFT ms median |      min |      max | vs fresh |\n`);
    process.stdout.write(`|--------|--------|-------|--------|-----------|----------------|----------|----------|----------|\n`);
    for (const r of rows) {
        const f = fresh.get(r.prompt);
        const speedup = r.mode === "reuse" && f ? `${(f.ttft_ms_median / r.ttft_ms_median).toFixed(2)}x` : "";
        process.stdout.write(`| ${String(r.prompt).padStart(6)} | ${String(r.n_tokens).padStart(6)} | ${r.mode.padEnd(5)} | ` +
            `${String(r.n_reused).padStart(6)} | ${String(r.n_evaluated).padStart(9)} | ${r.ttft_ms_median.toFixed(2).padStart(14)} | ` +
            `${r.ttft_ms_min.toFixed(2).padStart(8)} | ${r.ttft_ms_max.toFixed(2).padStart(8)} | ${speedup.padStart(8)} |\n`);
    }
    process.stdout.write(`\ntimed prompts:\n| mode  | timed | mean TTFT ms |  p50 ms |  p95 ms | reused tok | tokens |\n` +
        `|-------|-------|--------------|---------|---------|------------|--------|\n`);
    for (const x of summary)
        process.stdout.write(`| ${x.mode.padEnd(5)} | ${String(x.timed).padStart(5)} | ${x.ttft_mean_ms.toFixed(2).padStart(12)} | ` +
            `${x.ttft_p50_ms.toFixed(2).padStart(7)} | ${x.ttft_p95_ms.toFixed(2).padStart(7)} | ${x.reused_mean.toFixed(1).padStart(10)} | ` +
            `${x.tokens_mean.toFixed(1).padStart(6)} |\n`);
}
await ctx.dispose();
await model.dispose();
await llama.dispose();
