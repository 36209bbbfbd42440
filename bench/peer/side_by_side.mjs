// side_by_side.mjs — Reprise and llama.cpp on the same GGUF files, runs interleaved A/B/B/A, paired ratios.
//
// Why interleave: on a shared VM the memory bandwidth a process gets drifts by
// ±30 % over tens of seconds (measured here: decode of one model at 37-60 tok/s
// across back-to-back runs). Two engines measured one after the other can then
// differ by more than their real difference. Each round runs both engines on
// the same tests, in alternating order (Reprise first in odd rounds, llama.cpp
// first in even ones), and the ratio is taken within the round; the summary is
// the median of those paired ratios, with their spread.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { die, note, parseArgs, parseIntList, parsePositiveInt } from "./common.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const USAGE = `usage: node bench/peer/side_by_side.mjs -m MODEL.gguf[,MODEL2.gguf...] [-p 512] [-n 64] [-t 2]
                                        [-d 0,4096] [--busy N] [-r 1] [--rounds 5] [--reprise PATH]
                                        [--peer-arg ARG]... [--json]
  Runs 'reprise bench model' and 'node bench/peer/llama_bench.mjs' with the same -m/-p/-n/-t/-r
  (same prompt token ids, same threads) --rounds times, alternating which engine goes first,
  and prints per test: both engines' median tok/s over the rounds and the median, min and max
  of the per-round ratios Reprise / llama.cpp.
  -d / --busy go to both engines (depths of context before each test; quiet and busy runs paired
  inside each engine, whose busy rows carry vs_quiet_median).
  -r is the number of timed runs inside each engine process per round (after its warm-up).
  --reprise PATH: the reprise binary (default: build/reprise at the repository root, or $RP_BIN).
  --peer-arg ARG: passed on to llama_bench.mjs (repeatable), e.g. --peer-arg=--cpu-variant=icelake.
  --json prints one JSON array of {"model","type","test","threads","rounds","reprise_tok_s",
  "llama_tok_s","ratio_median","ratio_min","ratio_max","reprise_rounds","llama_rounds"}.
`;

const argv = process.argv.slice(2);
const peerArgs = [];
const rest = [];
for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--peer-arg") {
        if (i + 1 >= argv.length) die("--peer-arg needs a value");
        peerArgs.push(argv[++i]);
    } else if (argv[i].startsWith("--peer-arg=")) {
        peerArgs.push(argv[i].slice("--peer-arg=".length));
    } else {
        rest.push(argv[i]);
    }
}
const opts = parseArgs(rest, {
    "-m": { key: "model", arg: true }, "--model": { key: "model", arg: true },
    "-p": { key: "pp", arg: true }, "-n": { key: "tg", arg: true },
    "-t": { key: "threads", arg: true }, "-r": { key: "reps", arg: true },
    "-d": { key: "depth", arg: true }, "--busy": { key: "busy", arg: true },
    "--rounds": { key: "rounds", arg: true },
    "--reprise": { key: "reprise", arg: true },
    "--json": { key: "json", arg: false }
}, USAGE);

if (!opts.model) die("-m MODEL.gguf is required (see --help)");
const models = opts.model.split(",").filter((m) => m !== "").map((m) => path.resolve(m));
for (const m of models) if (!fs.existsSync(m)) die(`-m: no such file '${m}'`);
const pp = opts.pp ?? "512", tg = opts.tg ?? "64", threads = opts.threads ?? "2";
// validate here so a typo fails before the first (long) run
if (pp !== "0") parseIntList("-p", pp);
if (tg !== "0") parseIntList("-n", tg);
parseIntList("-t", threads);
const reps = String(parsePositiveInt("-r", opts.reps ?? "1"));
const rounds = parsePositiveInt("--rounds", opts.rounds ?? "5");
const reprise = path.resolve(opts.reprise ?? process.env.RP_BIN ?? path.join(HERE, "..", "..", "build", "reprise"));
if (!fs.existsSync(reprise)) die(`reprise binary not found at '${reprise}' (build it, or pass --reprise PATH)`);

// One engine run: returns its JSON rows; a failed run is fatal (a missing row would skew the pairing).
function runEngine(engine, model) {
    const common = ["-m", model, "-p", pp, "-n", tg, "-t", threads, "-r", reps, "--json"];
    if (opts.depth) common.push("-d", opts.depth);
    if (opts.busy) common.push("--busy", opts.busy);
    const [cmd, args] = engine === "reprise"
        ? [reprise, ["bench", "model", ...common]]
        : [process.execPath, [path.join(HERE, "llama_bench.mjs"), ...common, ...peerArgs]];
    const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20 });
    if (r.status !== 0) {
        process.stderr.write(r.stderr ?? "");
        die(`${engine} run failed (exit ${r.status ?? r.signal}): ${cmd} ${args.join(" ")}`, 1);
    }
    let rows;
    try {
        rows = JSON.parse(r.stdout);
    } catch (e) {
        die(`${engine}: output is not JSON (${e.message}): ${r.stdout.slice(0, 200)}`, 1);
    }
    if (!Array.isArray(rows)) die(`${engine}: expected a JSON array`, 1);
    return rows;
}

const med = (v) => {
    const s = [...v].sort((a, b) => a - b);
    const h = s.length >> 1;
    return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
};

const out = [];
for (const model of models) {
    const mname = path.basename(model);
    const per = new Map();   // key "test/threads" -> {type, r: [], l: []}
    for (let round = 0; round < rounds; round++) {
        const order = round % 2 === 0 ? ["reprise", "llama"] : ["llama", "reprise"];
        const got = {};
        for (const engine of order) {
            process.stderr.write(`\r${mname}: round ${round + 1}/${rounds}, ${engine === "reprise" ? "Reprise" : "llama.cpp"}   `);
            got[engine] = runEngine(engine, model);
        }
        for (const row of got.reprise) {
            const key = `${row.test}/${row.threads}`;
            const peer = got.llama.find((x) => x.test === row.test && x.threads === row.threads);
            if (!peer) die(`llama.cpp gave no row for ${row.test} at ${row.threads} threads`, 1);
            if (!per.has(key)) per.set(key, { type: row.type, test: row.test, threads: row.threads, r: [], l: [], rq: [], lq: [] });
            per.get(key).r.push(row.tok_s_median);
            per.get(key).l.push(peer.tok_s_median);
            if (row.vs_quiet_median != null) {   // busy rows: each engine's busy / quiet ratio in this round
                per.get(key).rq.push(row.vs_quiet_median);
                per.get(key).lq.push(peer.vs_quiet_median);
            }
        }
    }
    process.stderr.write("\n");
    for (const e of per.values()) {
        const ratios = e.r.map((x, i) => x / e.l[i]);
        out.push({
            model: mname, type: e.type, test: e.test, threads: e.threads, rounds,
            reprise_tok_s: med(e.r), llama_tok_s: med(e.l),
            ratio_median: med(ratios), ratio_min: Math.min(...ratios), ratio_max: Math.max(...ratios),
            reprise_rounds: e.r, llama_rounds: e.l,
            ...(e.rq.length ? { reprise_vs_quiet: med(e.rq), llama_vs_quiet: med(e.lq) } : {})
        });
    }
}

if (opts.json) {
    process.stdout.write(JSON.stringify(out, null, 1) + "\n");
} else {
    note(`reprise: ${reprise}; ${rounds} rounds, -r ${reps} per engine per round, order alternating`);
    const hdr = ["model", "type", "test", "threads", "Reprise tok/s", "llama.cpp tok/s", "ratio (median)", "ratio min-max",
        "busy/quiet R | L"];
    const rows = out.map((o) => [o.model, o.type, o.test, String(o.threads), o.reprise_tok_s.toFixed(2),
        o.llama_tok_s.toFixed(2), o.ratio_median.toFixed(2) + "x", `${o.ratio_min.toFixed(2)}-${o.ratio_max.toFixed(2)}`,
        o.reprise_vs_quiet != null ? `${o.reprise_vs_quiet.toFixed(2)} | ${o.llama_vs_quiet.toFixed(2)}` : ""]);
    const w = hdr.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const line = (r) => "| " + r.map((c, i) => (i < 3 ? c.padEnd(w[i]) : c.padStart(w[i]))).join(" | ") + " |";
    process.stdout.write(line(hdr) + "\n" + "|" + w.map((n) => "-".repeat(n + 2)).join("|") + "|\n");
    for (const r of rows) process.stdout.write(line(r) + "\n");
}
