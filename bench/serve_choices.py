#!/usr/bin/env python3
"""serve_choices.py — n choices in one request against n separate requests, on `reprise serve`.

For each --parallel value, starts `reprise serve` with reuse off (--reuse none: nothing is cached between
requests, so every separate request computes its prompt), then --rounds times, in alternating order:
  one request with n = N (the prompt prefilled once, the choices generated from forks of it), and
  N requests with n = 1 sent at the same time (each prefills the prompt itself),
each with a prompt of --prompt-tokens words and max_tokens --gen, temperature 1, seeds s + i. Reports the wall
time of each, the prompt tokens the server computed (its /metrics reprise_reused_tokens_total{kind="computed"}),
and the ratio.

usage: bench/serve_choices.py -m MODEL.gguf [--bin build/reprise] [--parallel 1,4] [-n 4] [--prompt-tokens 1000]
                              [--gen 32] [--rounds 3] [-t 2] [--json OUT]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import tempfile
import time
import urllib.request

from serve_lib import post, start_server

WORDS = ("the cat sat on a mat while the dog ran across the green park and a bird sang in the old tree near "
         "the river where children played with a red ball all afternoon until the sun went down").split()


def computed(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('reprise_reused_tokens_total{kind="computed"}'):
                return float(line.split()[-1])
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.environ.get("RP_BIN", os.path.join(os.path.dirname(__file__), "..", "build", "reprise")))
    ap.add_argument("--parallel", default="1,4")
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    args.ctx = args.prompt_tokens * 2 + args.gen + 256
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for par in [int(x) for x in args.parallel.split(",")]:
            p, port = start_server(args.bin, args.model, par, args.threads, args.ctx, tmp,
                                   extra=("--reuse", "none", "--quiet"))
            try:
                row = {"parallel": par, "n": args.n, "one": [], "separate": [], "one_computed": [], "separate_computed": []}
                for rnd in range(args.rounds):
                    text = " ".join(WORDS[(rnd * 7 + i) % len(WORDS)] for i in range(args.prompt_tokens))
                    base = {"messages": [{"role": "user", "content": f"Round {rnd}: {text}"}], "max_tokens": args.gen,
                            "temperature": 1}
                    order = ["one", "separate"] if rnd % 2 == 0 else ["separate", "one"]
                    for kind in order:
                        c0, t0 = computed(port), time.monotonic()
                        if kind == "one":
                            r = post(port, dict(base, n=args.n, seed=100 * rnd))[1]
                            assert len(r["choices"]) == args.n
                        else:
                            with concurrent.futures.ThreadPoolExecutor(args.n) as ex:
                                futs = [ex.submit(post, port, dict(base, seed=100 * rnd + i)) for i in range(args.n)]
                                for f in futs:
                                    assert len(f.result()[1]["choices"]) == 1
                        row[kind].append(time.monotonic() - t0)
                        row[kind + "_computed"].append(computed(port) - c0)
                    print(f"--parallel {par} round {rnd}: n={args.n} {row['one'][-1]:.2f} s "
                          f"({row['one_computed'][-1]:.0f} prompt tokens computed), {args.n} requests "
                          f"{row['separate'][-1]:.2f} s ({row['separate_computed'][-1]:.0f})", flush=True)
                row["one_s"] = statistics.median(row["one"])
                row["separate_s"] = statistics.median(row["separate"])
                row["speedup"] = row["separate_s"] / row["one_s"]
                results.append(row)
                print(f"--parallel {par}: n={args.n} in one request {row['one_s']:.2f} s, as {args.n} requests "
                      f"{row['separate_s']:.2f} s: {row['speedup']:.2f}x; prompt tokens computed "
                      f"{statistics.median(row['one_computed']):.0f} vs {statistics.median(row['separate_computed']):.0f}")
            finally:
                p.terminate()
                p.wait(timeout=60)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "prompt_tokens": args.prompt_tokens, "gen": args.gen,
                       "threads": args.threads, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
