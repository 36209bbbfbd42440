#!/usr/bin/env python3
"""serve_reuse.py — TTFT of `reprise serve` on documents reused in another order, per reuse mode and --parallel.

For each --parallel value, starts `reprise serve`, sends a warm-up request with the HotpotQA documents of
question 1 (documents as `reprise_documents`, so each is a chunk), then --queries rounds of one request per
reuse mode (`reprise_cache.mode`), in rotating order. Each request carries question 1's documents together
with half as many documents of a question of its own (new to the cache), shuffled, and that question; with
max_tokens 1 the wall time is TTFT plus one token. The usage counters say what was reused.

usage: bench/serve_reuse.py -m MODEL.gguf [--bin build/reprise] [--parallel 1,2] [--queries 4] [--docs 4] [-t 2]
                            [--data ../shared/data/hotpotqa/hotpot_dev_distractor_first100.json] [--json OUT]
"""
import argparse
import json
import os
import random
import statistics
import sys
import tempfile

from serve_lib import post, start_server

MODES = ["none", "prefix", "blend"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.environ.get("RP_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "reprise")))
    ap.add_argument("--data", default=os.path.join(os.environ.get("RP_SHARED_DIR", "../shared"), "data", "hotpotqa",
                                                   "hotpot_dev_distractor_first100.json"))
    ap.add_argument("--parallel", default="1,2")
    ap.add_argument("--queries", type=int, default=4, help="rounds (3 requests each; at most 33)")
    ap.add_argument("--docs", type=int, default=4, help="documents per question")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not os.path.exists(args.data):
        print(f"SKIP: no HotpotQA sample at {args.data} (set RP_SHARED_DIR)")
        return 0
    data = json.load(open(args.data))
    if 1 + args.queries * len(MODES) > len(data):
        sys.exit(f"--queries {args.queries} needs {1 + args.queries * len(MODES)} questions, the data has {len(data)}")
    rng = random.Random(7)

    def docs_of(i):
        c = data[i]["context"]
        return [t + ": " + "".join(s) for t, s in zip(c["title"], c["sentences"])][: args.docs]

    base = docs_of(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for par in [int(x) for x in args.parallel.split(",")]:
            p, port = start_server(args.bin, args.model, par, args.threads, args.ctx, tmp, wait_s=60)
            try:
                def ask(docs, q, mode):
                    body = {"messages": [{"role": "user", "content": q}], "max_tokens": 1, "temperature": 0,
                            "reprise_documents": docs, "reprise_cache": {"mode": mode}}
                    return post(port, body)
                ask(base, data[0]["question"], "blend")   # warm-up: question 1's documents enter the cache
                for qi in range(1, args.queries + 1):
                    order = MODES[qi % len(MODES):] + MODES[: qi % len(MODES)]
                    for mode in order:
                        # each request: question 1's documents (cached by the warm-up) and the documents of a
                        # question of its own (new to the cache), in an order of its own: every mode gets the
                        # same kind of prompt, and none reuses what another mode's request just cached
                        own = 1 + (qi - 1) * len(MODES) + MODES.index(mode)
                        docs = base[:] + docs_of(own)[: max(1, args.docs // 2)]
                        rng.shuffle(docs)
                        ms, out = ask(docs, data[own]["question"], mode)
                        u = out["usage"]
                        r = u.get("reprise", {})
                        rows.append({"parallel": par, "query": qi, "mode": mode, "ms": ms,
                                     "prompt_tokens": u["prompt_tokens"],
                                     "reused_prefix": r.get("reused_prefix", 0),
                                     "reused_nonprefix": r.get("reused_nonprefix", 0),
                                     "computed": r.get("computed", 0)})
                        print(f"\r--parallel {par}: query {qi}/{args.queries} {mode:6s} {ms:8.1f} ms", end="",
                              file=sys.stderr, flush=True)
            finally:
                p.terminate()
                p.wait(timeout=60)
            print(file=sys.stderr)
    print("| --parallel | mode | prompt tokens (mean) | reused prefix | reused non-prefix | computed | TTFT+1 tok mean ms | median ms | vs none |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for par in sorted({r["parallel"] for r in rows}):
        none_ms = statistics.mean(r["ms"] for r in rows if r["parallel"] == par and r["mode"] == "none")
        for mode in MODES:
            rs = [r for r in rows if r["parallel"] == par and r["mode"] == mode]
            mean = statistics.mean(r["ms"] for r in rs)
            s = {"parallel": par, "mode": mode, "n": len(rs), "ms_mean": mean, "ms_median": statistics.median(r["ms"] for r in rs),
                 "prompt_tokens": statistics.mean(r["prompt_tokens"] for r in rs),
                 "reused_prefix": statistics.mean(r["reused_prefix"] for r in rs),
                 "reused_nonprefix": statistics.mean(r["reused_nonprefix"] for r in rs),
                 "computed": statistics.mean(r["computed"] for r in rs), "speedup_vs_none": none_ms / mean}
            summary.append(s)
            print(f"| {par} | {mode} | {s['prompt_tokens']:.0f} | {s['reused_prefix']:.0f} | {s['reused_nonprefix']:.0f} | "
                  f"{s['computed']:.0f} | {mean:.1f} | {s['ms_median']:.1f} | {s['speedup_vs_none']:.2f}x |")
    if args.json:
        json.dump({"model": os.path.basename(args.model), "rows": rows, "summary": summary}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
