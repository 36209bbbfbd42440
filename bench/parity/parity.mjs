// parity.mjs — next-token logits of Reprise against llama.cpp on the same peaked synthetic models,
// for each architecture x weight type, at fixed positions of one token sequence.
//
// llama.cpp comes from node-llama-cpp's prebuilt CPU binaries installed in bench/peer
// (cd bench/peer && npm ci --omit=optional); Reprise from the build's `reprise` (synth) and
// libreprise.so, through bench/parity/reprise_logits.c (compiled here on first use, public API only).
// See bench/parity/README.md for the measures and the pass bars.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { die, note, parseArgs, parseIntList, parsePositiveInt, loadLlama, describeBuild, loadModel, vocabSize } from "../peer/common.mjs";
import { nextTokenProbs, logProbs } from "../peer/logits.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");

// One entry per architecture: the synth --arch and --preset. An architecture whose synth fails (not yet
// implemented) is skipped with a note, so adding one is adding a line here.
export const ARCHES = {
    llama3: { arch: "llama", preset: "tiny-llama3" },   // Llama 3 RoPE (base 500000, llama3 scaling in rope_freqs)
    qwen3: { arch: "qwen3", preset: "tiny" },
    qwen2: { arch: "qwen2", preset: "tiny" },
    phi3: { arch: "phi3", preset: "tiny" },
    // Phi-4-mini's partial rotary + LongRoPE: a context past 4096 (e.g. with position 8500) takes the long factors
    "phi3-longrope": { arch: "phi3", preset: "tiny-longrope" },
    gemma2: { arch: "gemma2", preset: "tiny" },
    gemma3: { arch: "gemma3", preset: "tiny" },
};
// synth --type names (pure types where synth has them; q2_k, q6_k, q8_0, iq4_nl, iq4_xs are llama.cpp's mixes)
export const TYPES = ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"];

const usage = `usage: node bench/parity/parity.mjs [options]
  --archs LIST      ${Object.keys(ARCHES).join(",")} (default: all; one whose synth fails is skipped)
  --types LIST      synth --type names (default: ${TYPES.join(",")})
  --positions LIST  positions whose next-token logits are compared (default 1,100,1000,8500)
  --peak F          synth --peak (default 3: logits of std ~3 units)
  --seed S          synth --seed (default 1); the tokens are fixed (xorshift64, as reprise bench model)
  -t N              threads for both engines (default 2)
  --reprise BIN     the reprise binary (default build/reprise; libreprise.so is taken from its directory)
  --json FILE       write the results as JSON
  --md FILE         write the markdown table (it is also printed)
  --keep DIR        keep the synthetic models in DIR (default: a temp dir, removed)
  --reprise-synth-extra ARGS
                    a self-test hook: Reprise runs a model made with these extra synth arguments (e.g. "--peak 3.05"),
                    llama.cpp the true one; the comparison must then FAIL (tests/cli/parity_llamacpp.sh checks it)
  --from-json LIST  compare nothing: judge and tabulate the results of earlier --json files (comma-separated;
                    an arch x type in a later file replaces the earlier one's), e.g. to merge runs
  --no-fa-floor     skip llama.cpp's FA-on run (no noise floor: the KL bar is then not judged)
Exit status: 0 when every judged cell passes, 1 on a parity failure, 2 on a usage or setup error.
`;
const opts = parseArgs(process.argv.slice(2), {
    "--archs": { key: "archs", arg: true }, "--types": { key: "types", arg: true },
    "--positions": { key: "positions", arg: true }, "--peak": { key: "peak", arg: true },
    "--seed": { key: "seed", arg: true }, "-t": { key: "threads", arg: true },
    "--reprise": { key: "reprise", arg: true }, "--json": { key: "json", arg: true },
    "--md": { key: "md", arg: true }, "--keep": { key: "keep", arg: true },
    "--no-fa-floor": { key: "noFa", arg: false }, "--from-json": { key: "fromJson", arg: true }, "--reprise-synth-extra": { key: "repExtra", arg: true },
}, usage);

const archs = (opts.archs ?? Object.keys(ARCHES).join(",")).split(",").filter(Boolean);
for (const a of archs) if (!ARCHES[a]) die(`--archs: unknown '${a}' (known: ${Object.keys(ARCHES).join(", ")})`);
const types = (opts.types ?? TYPES.join(",")).split(",").filter(Boolean);
const positions = parseIntList("--positions", opts.positions ?? "1,100,1000,8500").sort((a, b) => a - b);
const peak = opts.peak ?? "3";
if (!(Number(peak) > 0)) die(`--peak: expected a positive number, got '${peak}'`);
const seed = opts.seed ?? "1";
const threads = parsePositiveInt("-t", opts.threads ?? "2");
const reprise = path.resolve(opts.reprise ?? path.join(root, "build", "reprise"));
if (!fs.existsSync(reprise)) die(`reprise binary '${reprise}' not found (build it, or pass --reprise)`);
const libDir = path.dirname(reprise);
if (!fs.existsSync(path.join(libDir, "libreprise.so"))) die(`libreprise.so not found next to ${reprise}`);
const maxPos = positions[positions.length - 1];
const nCtx = Math.ceil((maxPos + 1) / 256) * 256;

// ---- the Reprise driver ----
function buildDriver() {
    const src = path.join(here, "reprise_logits.c");
    const dir = path.join(os.tmpdir(), `reprise-parity-${process.getuid?.() ?? 0}`);
    fs.mkdirSync(dir, { recursive: true });
    const bin = path.join(dir, "reprise_logits");
    const lib = path.join(libDir, "libreprise.so");
    const newest = Math.max(fs.statSync(src).mtimeMs, fs.statSync(lib).mtimeMs, fs.statSync(path.join(root, "include", "reprise.h")).mtimeMs);
    if (fs.existsSync(bin) && fs.statSync(bin).mtimeMs > newest && fs.readFileSync(bin + ".lib", "utf8") === lib) return bin;
    const cc = process.env.CC || "cc";
    const r = spawnSync(cc, ["-O2", "-Wall", "-Wextra", "-I", path.join(root, "include"), src, "-o", bin,
        "-L", libDir, "-lreprise", `-Wl,-rpath,${libDir}`], { encoding: "utf8" });
    if (r.status !== 0) die(`cannot compile ${src} with ${cc}:\n${r.stderr ?? r.error}`);
    fs.writeFileSync(bin + ".lib", lib);
    return bin;
}

// xorshift64 as `reprise bench model`, kept off the first 3 ids (unk/bos/eos of the built-in vocabulary)
function tokenSequence(n, nVocab) {
    const M = (1n << 64n) - 1n;
    let x = 0x9e3779b97f4a7c15n;
    const out = new Int32Array(n);
    for (let i = 0; i < n; i++) {
        x ^= (x << 13n) & M; x ^= x >> 7n; x ^= (x << 17n) & M;
        out[i] = 3 + Number(x % BigInt(nVocab - 3));
    }
    return out;
}

function logSoftmax(x) {
    let mx = -Infinity;
    for (const v of x) if (v > mx) mx = v;
    let s = 0;
    for (const v of x) s += Math.exp(v - mx);
    const ls = Math.log(s) + mx;
    const out = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) out[i] = x[i] - ls;
    return out;
}

// llama.cpp gives probabilities (softmax of the raw logits at temperature 0, float32): log p are the logits
// up to a constant, i.e. a log-softmax. Tokens whose probability underflowed to 0 stay -Infinity.
function probsToLogp(map, nVocab) {
    if (map.size !== nVocab) throw new Error(`llama.cpp returned ${map.size} probabilities for a vocabulary of ${nVocab} (a sampler truncated them)`);
    return logProbs(map, nVocab);
}

function compare(ref, got) {   // both log-softmax
    let kl = 0, maxd = 0, n = 0, mean = 0, m2 = 0;
    for (let i = 0; i < ref.length; i++) {
        if (ref[i] === -Infinity) continue;
        const p = Math.exp(ref[i]);
        kl += p * (ref[i] - got[i]);
        maxd = Math.max(maxd, Math.abs(ref[i] - got[i]));
        n++;
        const d = ref[i] - mean; mean += d / n; m2 += d * (ref[i] - mean);
    }
    return { kl: Math.max(kl, 0), maxAbs: maxd, spread: Math.sqrt(m2 / n) };
}

function top2(lp) {
    let a = -1, b = -1;
    for (let i = 0; i < lp.length; i++) {
        if (a < 0 || lp[i] > lp[a]) { b = a; a = i; } else if (b < 0 || lp[i] > lp[b]) b = i;
    }
    return { top1: a, margin: lp[a] - lp[b] };
}

async function llamaLogits(model, tokens, fa) {
    const dists = await nextTokenProbs(model, tokens.subarray(0, maxPos + 1), positions, {
        context: { contextSize: nCtx, threads, flashAttention: fa, sequences: 1 }, sampler: { temperature: 0 }
    });
    const nV = vocabSize(model);
    return dists.map((pr) => probsToLogp(pr, nV));
}

function repriseLogits(driver, modelPath, tokPath, nVocab) {
    const out = modelPath + ".logits";
    const r = spawnSync(driver, [modelPath, tokPath, out, "-p", positions.join(","), "-c", String(nCtx), "-t", String(threads)],
        { encoding: "utf8", env: process.env });
    if (r.status !== 0) throw new Error(`reprise_logits failed (${r.status}): ${(r.stderr || "").trim()}`);
    const buf = fs.readFileSync(out);
    fs.rmSync(out);
    const f = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    if (f.length !== nVocab * positions.length) throw new Error(`reprise_logits wrote ${f.length} floats, expected ${nVocab * positions.length}`);
    return positions.map((_, k) => logSoftmax(f.subarray(k * nVocab, (k + 1) * nVocab)));
}

const KL_EPS = 1e-9;   // an absolute floor for the KL bar (float32 rounding of the logits alone is ~1e-12)

// The bars, per cell (arch x type) and position:
// - top-1 must agree where llama.cpp's top-2 margin exceeds its own noise at that position (FA on/off
//   max |dlogit|; without a floor run, 1e-3 units);
// - KL(llama.cpp || Reprise) <= 2x llama.cpp's noise floor. llama.cpp is two references, FA off and FA on, whose
//   KL(FA off || FA on) at that position is the noise; Reprise must be within 2x of it from the nearer one
//   (on quantized files llama.cpp's FA-off run is the outlier: Reprise tracks FA on). The floor is that
//   position's FA KL or, when larger, its mean over the cell's positions (one position's FA difference is a
//   single draw: qwen3 F32 at position 1, two tokens of attention, gives exactly 0).
function judgeCell(cs) {
    const mean = cs.every((c) => c.faKl != null) ? cs.reduce((a, c) => a + c.faKl, 0) / cs.length : null;
    for (const c of cs) {
        c.floor = mean == null ? null : Math.max(c.faKl, mean);
        c.klNearest = c.klFaOn == null ? c.kl : Math.min(c.kl, c.klFaOn);
        c.top1Required = c.margin > (c.faMaxAbs ?? 1e-3);
        c.top1Pass = c.top1Agree || !c.top1Required;
        c.klPass = c.floor == null ? null : c.klNearest <= Math.max(2 * c.floor, KL_EPS);
        c.pass = c.top1Pass && c.klPass !== false;
    }
    return cs;
}

const fmt = (x, d = 3) => x == null ? "–" : x === 0 ? "0" : Math.abs(x) < 1e-3 || Math.abs(x) >= 1e4 ? x.toExponential(1) : x.toFixed(d);

function fromJson(list) {
    const byCell = new Map(), skipped = new Map(), meta = [];
    for (const f of list.split(",")) {
        const j = JSON.parse(fs.readFileSync(f, "utf8"));
        meta.push({ file: f, date: j.date, positions: j.positions, command: j.command, llamaCpp: j.llamaCpp });
        const cells = new Map();
        for (const c of j.results) {
            const k = `${c.arch} ${c.type}`;
            if (!cells.has(k)) cells.set(k, []);
            cells.get(k).push(c);
        }
        for (const [k, cs] of cells) { byCell.set(k, cs); skipped.delete(k); }
        for (const sk of j.skipped ?? []) if (!byCell.has(`${sk.arch} ${sk.type}`)) skipped.set(`${sk.arch} ${sk.type}`, sk);
    }
    const results = [];
    for (const cs of byCell.values()) results.push(...judgeCell(cs));
    return { results, skipped: [...skipped.values()], meta };
}

function finishRun(results, skipped, extra) {
    const md = table(results, skipped);
    process.stdout.write(md);
    if (opts.md) fs.writeFileSync(opts.md, md);
    if (opts.json) fs.writeFileSync(opts.json, JSON.stringify({ ...extra, results, skipped }, null, 1) + "\n");
    const failed = results.filter((c) => !c.pass);
    if (results.length === 0) die("parity: nothing was compared", 2);
    if (failed.length) {
        process.stderr.write(`parity: ${failed.length} of ${results.length} cells FAIL: ` +
            failed.map((c) => `${c.arch}/${c.type}@${c.pos}`).join(" ") + "\n");
        process.exit(1);
    }
}

async function main() {
    if (opts.fromJson) {
        const { results, skipped, meta } = fromJson(opts.fromJson);
        return finishRun(results, skipped, { date: new Date().toISOString(), mergedFrom: meta });
    }
    const driver = buildDriver();
    const { llama, info } = await loadLlama({});
    note(describeBuild(info));
    const dir = opts.keep ? path.resolve(opts.keep) : fs.mkdtempSync(path.join(os.tmpdir(), "reprise-parity-"));
    fs.mkdirSync(dir, { recursive: true });
    const results = [], skipped = [];
    try {
        for (const a of archs) {
            for (const type of types) {
                const { arch, preset } = ARCHES[a];
                const file = path.join(dir, `${a}-${type}-peak${peak}.gguf`);
                const t0 = Date.now();
                const synthArgs = ["synth", "--arch", arch, "--preset", preset, "--type", type, "--peak", peak,
                    "--seed", seed, "-t", String(threads)];
                const s = spawnSync(reprise, [...synthArgs, "-o", file], { encoding: "utf8" });
                let repFile = file;
                if (s.status === 0 && opts.repExtra) {
                    repFile = file.replace(/\.gguf$/, "-perturbed.gguf");
                    const s2 = spawnSync(reprise, [...synthArgs, ...opts.repExtra.split(/\s+/).filter(Boolean), "-o", repFile], { encoding: "utf8" });
                    if (s2.status !== 0) die(`--reprise-synth-extra: synth failed: ${(s2.stderr || "").trim()}`);
                }
                if (s.status !== 0) {
                    const why = (s.stderr || "").trim().split("\n").pop();
                    if (/arch/.test(why) && !/type/.test(why)) {   // the architecture itself is not there yet
                        note(`skip ${a}: synth failed: ${why}`);
                        skipped.push({ arch: a, type: "all", reason: why });
                        break;
                    }
                    note(`skip ${a} ${type}: synth failed: ${why}`);
                    skipped.push({ arch: a, type, reason: why });
                    continue;
                }
                const model = await loadModel(llama, file);
                let cells;
                try {
                    const nV = vocabSize(model);
                    const tokens = tokenSequence(maxPos + 1, nV);
                    const tokPath = file + ".tokens";
                    fs.writeFileSync(tokPath, Buffer.from(tokens.buffer));
                    const ref = await llamaLogits(model, tokens, false);
                    const fa = opts.noFa ? null : await llamaLogits(model, tokens, true);
                    const rep = repriseLogits(driver, repFile, tokPath, nV);
                    cells = positions.map((p, k) => {
                        const c = compare(ref[k], rep[k]);
                        const f = fa ? compare(ref[k], fa[k]) : null;
                        const t2 = top2(ref[k]);
                        return ({
                            arch: a, type, pos: p, spread: c.spread, maxAbs: c.maxAbs, relMaxAbs: c.maxAbs / c.spread, kl: c.kl,
                            top1Agree: top2(rep[k]).top1 === t2.top1, margin: t2.margin,
                            faKl: f ? f.kl : null, faMaxAbs: f ? f.maxAbs : null,
                            klFaOn: fa ? compare(fa[k], rep[k]).kl : null,   // KL(llama.cpp FA on || Reprise)
                        });
                    });
                    judgeCell(cells);
                } catch (err) {
                    note(`skip ${a} ${type}: ${err.message}`);
                    skipped.push({ arch: a, type, reason: err.message });
                    continue;
                } finally {
                    await model.dispose();
                    if (!opts.keep) for (const f of [file, file + ".tokens", repFile]) fs.rmSync(f, { force: true });
                }
                results.push(...cells);
                const bad = cells.filter((c) => !c.pass).map((c) => c.pos);
                note(`${a} ${type}: ${bad.length ? `FAIL at ${bad.join(",")}` : "pass"} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
            }
        }
    } finally {
        if (!opts.keep) fs.rmSync(dir, { recursive: true, force: true });
    }
    finishRun(results, skipped, {
        date: new Date().toISOString(), llamaCpp: describeBuild(info), positions, nCtx, peak: Number(peak), seed: Number(seed),
        threads, command: process.argv.slice(1).join(" "),
    });
}

// One row per arch x type: the worst figures over the positions, then the per-position detail.
function table(results, skipped) {
    const rows = [];
    rows.push(`| arch | type | max\\|Δlogit\\|/spread | KL(llama.cpp‖Reprise), FA off / nearer | llama.cpp FA on/off KL | worst KL / floor | top-1 agree | min top-2 margin (FA noise) | result |`);
    rows.push(`|---|---|---|---|---|---|---|---|---|`);
    const keys = [...new Set(results.map((c) => `${c.arch} ${c.type}`))];
    for (const k of keys) {
        const cs = results.filter((c) => `${c.arch} ${c.type}` === k);
        const worst = (f) => Math.max(...cs.map(f));
        const agree = cs.filter((c) => c.top1Agree).length;
        const fails = cs.filter((c) => !c.pass).map((c) => `${c.pos}${c.top1Pass ? "" : " top-1"}${c.klPass === false ? " KL" : ""}`);
        const mIdx = cs.reduce((b, c, i) => (c.margin < cs[b].margin ? i : b), 0);
        rows.push(`| ${cs[0].arch} | ${cs[0].type} | ${fmt(worst((c) => c.relMaxAbs), 4)} | ${fmt(worst((c) => c.kl))} / ${fmt(worst((c) => c.klNearest))} | ` +
            `${cs[0].faKl == null ? "–" : fmt(Math.min(...cs.map((c) => c.faKl))) + "–" + fmt(worst((c) => c.faKl))} | ` +
            `${cs[0].floor == null ? "–" : fmt(worst((c) => c.klNearest / Math.max(c.floor, KL_EPS)), 2)} | ` +
            `${agree}/${cs.length} | ${fmt(cs[mIdx].margin)} (${fmt(cs[mIdx].faMaxAbs)}) | ` +
            `${fails.length ? "**FAIL** at " + fails.join(", ") : cs.some((c) => c.klPass == null) ? "pass (top-1 only)" : "pass"} |`);
    }
    for (const s of skipped) rows.push(`| ${s.arch} | ${s.type} | – | – | – | – | – | – | skipped: ${s.reason.replace(/\|/g, "/")} |`);
    const det = [`\nPer position (spread = std of llama.cpp's logits; KL in nats):\n`,
        `| arch | type | pos | spread | max\\|Δ\\| | KL | FA KL | FA max\\|Δ\\| | KL vs FA on | top-2 margin | top-1 |`, `|---|---|---|---|---|---|---|---|---|---|---|`];
    for (const c of results)
        det.push(`| ${c.arch} | ${c.type} | ${c.pos} | ${fmt(c.spread)} | ${fmt(c.maxAbs)} | ${fmt(c.kl)} | ${fmt(c.faKl)} | ${fmt(c.faMaxAbs)} | ${fmt(c.klFaOn)} | ` +
            `${fmt(c.margin)} | ${c.top1Agree ? "=" : c.top1Required ? "**≠**" : "≠ (margin < noise)"} |`);
    return rows.join("\n") + "\n" + det.join("\n") + "\n";
}

await main();
