// common.mjs — shared helpers for the llama.cpp peer benchmarks (bench/peer/).
//
// llama.cpp is reached only through node-llama-cpp's prebuilt CPU binaries
// (npm package @node-llama-cpp/linux-x64). Nothing here is ever built from
// source or downloaded at run time: getLlama() is called with build: "never",
// skipDownload: true and gpu: false.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export function die(msg, code = 2) {
    process.stderr.write(`${msg}\n`);
    process.exit(code);
}

export function note(msg) {
    process.stderr.write(`# ${msg}\n`);
}

// "128,512" -> [128, 512]; "0" -> [].
export function parseIntList(flag, s) {
    if (s === "0") return [];
    const out = String(s).split(",").map((v) => v.trim()).filter((v) => v !== "").map((v) => {
        if (!/^\d+$/.test(v) || Number(v) < 1) die(`${flag}: expected a comma-separated list of positive integers, got '${s}'`);
        return Number(v);
    });
    if (out.length === 0) die(`${flag}: empty list`);
    return out;
}

export function parsePositiveInt(flag, s) {
    if (!/^\d+$/.test(String(s)) || Number(s) < 1) die(`${flag}: expected a positive integer, got '${s}'`);
    return Number(s);
}

// Simple argv parser: spec maps flag -> {key, arg: bool}. Returns opts.
export function parseArgs(argv, spec, usage) {
    const opts = {};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "-h" || a === "--help") {
            process.stdout.write(usage);
            process.exit(0);
        }
        let flag = a, val;
        const eq = a.indexOf("=");
        if (a.startsWith("--") && eq > 0) {
            flag = a.slice(0, eq);
            val = a.slice(eq + 1);
        }
        const s = spec[flag];
        if (!s) die(`unknown option '${a}' (see --help)`);
        if (s.arg) {
            if (val === undefined) {
                if (i + 1 >= argv.length) die(`${flag} needs a value`);
                val = argv[++i];
            }
            opts[s.key] = val;
        } else {
            if (val !== undefined) die(`${flag} takes no value`);
            opts[s.key] = true;
        }
    }
    return opts;
}

export function median(sorted) {
    const n = sorted.length;
    return n % 2 ? sorted[(n - 1) / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

export function stats(samples) {
    const s = samples.slice().sort((a, b) => a - b);
    return { median: median(s), min: s[0], max: s[s.length - 1] };
}

export function nowNs() {
    return process.hrtime.bigint();
}

export function secondsSince(t0) {
    return Number(process.hrtime.bigint() - t0) / 1e9;
}

// The same fixed pseudo-random prompt as `reprise bench model` (xorshift64,
// seed 0x9e3779b97f4a7c15, token = x % n_vocab), so that by default both
// engines evaluate identical token ids.
export function reprisePromptTokens(n, nVocab, seed = 0x9e3779b97f4a7c15n) {
    const M = (1n << 64n) - 1n;
    let x = BigInt.asUintN(64, seed);
    const v = BigInt(nVocab);
    const out = new Array(n);
    for (let i = 0; i < n; i++) {
        x ^= (x << 13n) & M;
        x ^= x >> 7n;
        x ^= (x << 17n) & M;
        out[i] = Number(x % v);
    }
    return out;
}

export function readJson(file, what) {
    try {
        return JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (err) {
        die(`${what}: cannot read '${file}': ${err.message}`);
    }
}

export function readTokenFile(file, nVocab) {
    const arr = readJson(file, "--tokens");
    if (!Array.isArray(arr) || arr.length === 0 || !arr.every((t) => Number.isInteger(t)))
        die(`--tokens: '${file}' must hold a non-empty JSON array of integer token ids`);
    const bad = arr.find((t) => t < 0 || t >= nVocab);
    if (bad !== undefined) die(`--tokens: token id ${bad} is outside [0, ${nVocab})`);
    return arr;
}

// The installed directory of package `name` (their "exports" hide package.json from require.resolve).
export function packageDir(name) {
    for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
        const cand = path.join(dir, "node_modules", name);
        if (fs.existsSync(path.join(cand, "package.json"))) return cand;
        if (path.dirname(dir) === dir) throw new Error(`package ${name} is not installed (run: cd bench/peer && npm ci --omit=optional)`);
    }
}

export function binsDir() {
    return path.join(packageDir("@node-llama-cpp/linux-x64"), "bins", "linux-x64");
}

export function listCpuVariants() {
    try {
        return fs.readdirSync(binsDir())
            .map((f) => /^libggml-cpu-(.+)\.so$/.exec(f)?.[1])
            .filter((v) => v != null)
            .sort();
    } catch {
        return [];
    }
}

// Which ggml CPU variant library is mapped into this process.
export function loadedCpuVariant() {
    try {
        const maps = fs.readFileSync("/proc/self/maps", "utf8");
        const libs = new Set();
        for (const m of maps.matchAll(/\S*libggml-cpu-([A-Za-z0-9_]+)\.so/g)) libs.add(m[1]);
        return [...libs].join("+") || "unknown";
    } catch {
        return "unknown";
    }
}

export function packageVersion(name) {
    try {
        return JSON.parse(fs.readFileSync(path.join(packageDir(name), "package.json"), "utf8")).version;
    } catch {
        return "?";
    }
}

// Load llama.cpp through node-llama-cpp: CPU only, prebuilt only, no downloads.
// A forced CPU variant (--cpu-variant) is applied by the LD_PRELOAD shim (shim.mjs).
export async function loadLlama({ cpuVariant, verbose = false } = {}) {
    if (cpuVariant) {
        const variants = listCpuVariants();
        if (!variants.includes(cpuVariant))
            die(`--cpu-variant: unknown variant '${cpuVariant}'; available: ${variants.join(", ")}`);
    }
    const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
    let llama;
    try {
        llama = await getLlama({
            gpu: false,
            build: "never",
            usePrebuiltBinaries: true,
            skipDownload: true,
            progressLogs: false,
            maxThreads: 0, // the `threads` context option is then used verbatim
            logLevel: verbose ? LlamaLogLevel.debug : LlamaLogLevel.info,
            logger: (level, message) => {
                if (verbose || level === LlamaLogLevel.error || level === LlamaLogLevel.fatal ||
                    (level === LlamaLogLevel.warn && !/^(llama_context|llama_kv_cache|init)/.test(message)))
                    process.stderr.write(`[llama.cpp ${level}] ${message.trimEnd()}\n`);
            }
        });
    } catch (err) {
        if (cpuVariant)
            die(`--cpu-variant ${cpuVariant}: llama.cpp could not start with libggml-cpu-${cpuVariant}.so ` +
                `(ggml refuses variants this CPU does not support) [${err?.name ?? err}]`, 1);
        die(`node-llama-cpp found no usable prebuilt llama.cpp binary (${err?.message ?? err}); ` +
            "reinstall with: cd bench/peer && npm ci --omit=optional", 1);
    }
    const info = {
        nodeLlamaCpp: packageVersion("node-llama-cpp"),
        binaries: packageVersion("@node-llama-cpp/linux-x64"),
        llamaCppRelease: `${llama.llamaCppRelease.repo}@${llama.llamaCppRelease.release}`,
        buildType: llama.buildType,
        gpu: llama.gpu,
        cpuVariant: loadedCpuVariant(),
        systemInfo: llama.systemInfo.trim(),
        cpuMathCores: llama.cpuMathCores
    };
    if (info.gpu !== false) die(`expected a CPU-only llama.cpp, but node-llama-cpp loaded gpu=${info.gpu}`, 1);
    if (cpuVariant && info.cpuVariant !== cpuVariant)
        die(`--cpu-variant ${cpuVariant}: llama.cpp runs on '${info.cpuVariant}' instead`, 1);
    return { llama, info };
}

export function describeBuild(info) {
    return `llama.cpp ${info.llamaCppRelease} via node-llama-cpp ${info.nodeLlamaCpp} ` +
        `(@node-llama-cpp/linux-x64 ${info.binaries}, ${info.buildType}), gpu=${info.gpu}, ` +
        `cpu variant: ${info.cpuVariant}`;
}

export async function loadModel(llama, modelPath) {
    const abs = path.resolve(modelPath);
    if (!fs.existsSync(abs)) die(`model '${modelPath}' not found`, 1);
    try {
        return await llama.loadModel({ modelPath: abs, gpuLayers: 0, useMmap: true });
    } catch (err) {
        die(`llama.cpp failed to load '${modelPath}': ${err?.message ?? err}`, 1);
    }
}

// Number of vocabulary entries (n_vocab) as llama.cpp sees it.
export function vocabSize(model) {
    const n = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
    if (typeof n === "number" && n > 0) return n;
    const emb = model.fileInfo.fullTensorInfo?.find((t) => t.name === "token_embd.weight");
    if (emb) return Number(emb.dimensions[1]);
    die("cannot determine the model's vocabulary size", 1);
}

// The weight type holding most bytes ("q4_0", "f32", ...), as `reprise bench model` reports it.
export function mainWeightType(llama, model, GgmlType) {
    const bytes = new Map();
    for (const t of model.fileInfo.fullTensorInfo ?? model.fileInfo.tensorInfo ?? []) {
        const elems = t.dimensions.reduce((a, d) => a * Number(d), 1);
        const ts = llama._bindings.getTypeSizeForGgmlType?.(t.ggmlType);
        const bs = llama._bindings.getBlockSizeForGgmlType?.(t.ggmlType);
        const nbytes = ts != null && bs ? (elems / bs) * ts : elems;
        bytes.set(t.ggmlType, (bytes.get(t.ggmlType) ?? 0) + nbytes);
    }
    let best = null, bestBytes = -1;
    for (const [type, b] of bytes) if (b > bestBytes) { best = type; bestBytes = b; }
    return best == null ? "?" : String(GgmlType[best] ?? best).toLowerCase();
}

// Evaluate `tokens` on `seq` (appending at its current end) with logits for the
// last token only, and sample that token greedily — i.e. prefill up to the first
// generated token. Returns the sampled token.
export async function evalToFirstToken(seq, tokens) {
    const gen = seq.evaluate(tokens, { temperature: 0, yieldEogToken: true });
    const { value } = await gen.next();
    await gen.return();
    return value;
}
