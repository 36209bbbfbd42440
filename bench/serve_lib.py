"""serve_lib.py — what the serve_*.py benchmarks share: starting `reprise serve` on a free port and posting to it."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request


def start_server(bin_path, model, parallel, threads, ctx, tmp, extra=(), wait_s=120):
    """`reprise serve` with --parallel `parallel` on a port it picks (written to a file in tmp), its stderr in
    tmp/serve-PARALLEL.log; returns (process, port), or exits naming the log when it does not come up."""
    port_file = os.path.join(tmp, f"port-{parallel}")
    cmd = [bin_path, "serve", "-m", model, "--port", "0", "--port-file", port_file, "-t", str(threads),
           "--parallel", str(parallel), "-c", str(ctx), "--no-spec", *extra]
    log = os.path.join(tmp, f"serve-{parallel}.log")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(int(wait_s * 10)):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return p, int(open(port_file).read().strip())
        if p.poll() is not None:
            sys.exit(f"reprise serve exited with {p.returncode}; see {log}")
        time.sleep(0.1)
    p.kill()
    sys.exit(f"reprise serve did not report its port within {wait_s} s")


def post(port, body, path="/v1/chat/completions", timeout=1800):
    """POSTs body (JSON) and returns (milliseconds, the decoded answer); an HTTP error exits with its text."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"the server answered {e.code}: {e.read().decode(errors='replace')[:400]}")
    return (time.monotonic() - t0) * 1e3, out
