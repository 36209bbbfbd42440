#!/usr/bin/env python3
"""serve_fill.py — `reprise serve` throughput while its RAM chunk cache fills and evicts.

C concurrent clients send requests with unique prompts (a shared system prompt, then a user message no other
request has), so every request inserts new chunks and the cache grows until it evicts. Requests are counted in
windows of W; each window reports requests/s, p50 / p95 latency and the cache's chunk count and evictions from
/metrics. The figure of merit: throughput of the last windows (cache full and evicting) against the first
(empty cache).

    python3 bench/serve_fill.py -m MODEL.gguf [--bin build/reprise] [--clients 32] [--requests 20000]
                                [--window 1000] [--cache-ram MB] [--parallel 1] [--max-tokens 4] [--json OUT]

Starts the server itself (port 0, --quiet) and stops it at the end. Standard library only.
"""
import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

SYSTEM = ("You are a helpful assistant for a small company. Answer briefly and politely, and say when you do not "
          "know. The office is open from nine to five on weekdays.")
WORDS = ("apple river stone cloud garden window paper silver forest music table orange bridge candle rabbit "
         "mountain pencil summer winter yellow basket letter island market ocean pocket saddle thunder violet").split()


def unique_message(i, rng, n_words):
    return "Request %d: %s?" % (i, " ".join(rng.choice(WORDS) for _ in range(n_words)))


async def http(port, method, path, body=None, timeout=120):
    r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    data = json.dumps(body).encode() if body is not None else b""
    head = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % (method, path, len(data))).encode()
    w.write(head + data)
    await w.drain()
    raw = await asyncio.wait_for(r.read(), timeout)
    w.close()
    status = int(raw.split(b" ", 2)[1])
    return status, raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""


def metric(text, name):
    m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else float("nan")


async def main_async(a, port):
    rng = random.Random(a.seed)
    counter = {"next": 0}
    lat = []          # (finish time, latency, ok)
    t_start = time.monotonic()

    async def client():
        while True:
            i = counter["next"]
            if i >= a.requests:
                return
            counter["next"] = i + 1
            body = {"messages": [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": unique_message(i, rng, a.words)}],
                    "max_tokens": a.max_tokens, "temperature": 0}
            t0 = time.monotonic()
            try:
                st, _ = await http(port, "POST", "/v1/chat/completions", body)
            except Exception:
                st = -1
            t1 = time.monotonic()
            lat.append((t1, t1 - t0, st == 200))

    windows = []
    tasks = [asyncio.ensure_future(client()) for _ in range(a.clients)]
    done_w = 0
    t_w = t_start
    while True:
        await asyncio.sleep(0.2)
        finished = all(t.done() for t in tasks)
        while len(lat) >= (done_w + 1) * a.window or (finished and len(lat) > done_w * a.window):
            part = lat[done_w * a.window:(done_w + 1) * a.window]
            t_end = max(x[0] for x in part)
            ls = sorted(x[1] for x in part)
            _, mt = await http(port, "GET", "/metrics")
            mt = mt.decode()
            w = {"window": done_w, "requests": len(part), "ok": sum(1 for x in part if x[2]),
                 "req_per_s": len(part) / max(t_end - t_w, 1e-9),
                 "p50_ms": 1e3 * ls[len(ls) // 2], "p95_ms": 1e3 * ls[min(len(ls) - 1, int(len(ls) * 0.95))],
                 "cache_chunks": metric(mt, "reprise_cache_chunks"),
                 "cache_mib": metric(mt, "reprise_cache_bytes") / 2**20,
                 "evictions": metric(mt, "reprise_cache_evictions_total")}
            windows.append(w)
            print("window %3d: %5d req, %7.1f req/s, p50 %6.1f ms, p95 %6.1f ms, cache %6d chunks (%6.1f MiB), "
                  "%7d evictions" % (w["window"], w["requests"], w["req_per_s"], w["p50_ms"], w["p95_ms"],
                                     w["cache_chunks"], w["cache_mib"], w["evictions"]), flush=True)
            t_w = t_end
            done_w += 1
            if finished and len(lat) <= done_w * a.window:
                break
        if finished and len(lat) <= done_w * a.window:
            break
    return windows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "reprise"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--cache-ram", type=int, default=512, help="MiB")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--words", type=int, default=12, help="words of each unique user message")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the windows and the summary here")
    ap.add_argument("--extra", default="", help="more serve arguments")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="serve_fill.")
    port_file = os.path.join(tmp, "port")
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "--port-file", port_file, "--quiet", "-t", str(a.threads),
           "--parallel", str(a.parallel), "--cache-ram", str(a.cache_ram), "--queue", str(4 * a.clients)] + a.extra.split()
    srv = subprocess.Popen(cmd, stderr=open(os.path.join(tmp, "serve.log"), "w"))
    try:
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            if srv.poll() is not None:
                sys.exit("serve_fill: the server exited: " + open(os.path.join(tmp, "serve.log")).read())
            time.sleep(0.05)
        port = int(open(port_file).read())
        windows = asyncio.run(main_async(a, port))
    finally:
        srv.terminate()
        srv.wait(timeout=60)
    full = [w for w in windows if w["requests"] == a.window]
    first, last = full[0], full[-1]
    evicting = [w for w in full if w["evictions"] > 0]
    summary = {"first_req_per_s": first["req_per_s"], "last_req_per_s": last["req_per_s"],
               "last_over_first": last["req_per_s"] / first["req_per_s"],
               "min_over_first": min(w["req_per_s"] for w in full) / first["req_per_s"],
               "windows_evicting": len(evicting), "final_chunks": last["cache_chunks"],
               "first_p50_ms": first["p50_ms"], "last_p50_ms": last["p50_ms"],
               "errors": sum(w["requests"] - w["ok"] for w in windows)}
    print("summary: first window %.1f req/s, last %.1f req/s (%.2fx; worst window %.2fx), p50 %.1f -> %.1f ms, "
          "%d windows evicting, %d chunks at the end, %d errors" %
          (summary["first_req_per_s"], summary["last_req_per_s"], summary["last_over_first"],
           summary["min_over_first"], summary["first_p50_ms"], summary["last_p50_ms"], summary["windows_evicting"],
           summary["final_chunks"], summary["errors"]))
    if a.json:
        json.dump({"args": vars(a), "command": " ".join(cmd), "windows": windows, "summary": summary},
                  open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
