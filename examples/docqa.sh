#!/bin/sh
# docqa.sh BINARY — runs examples/docqa twice over one cache directory: the second and third questions reuse the
# documents of the first (in other orders), and the second run (a restart) reuses them from disk, with the same answers.
M="${RP_SHARED_DIR:-../shared}/models/stories260K.gguf"
[ -f "$M" ] || { echo "no $M"; exit 77; }
D="${RP_EXAMPLE_TMP:-/tmp}/docqa-cache"
"$1" "$M" "$D" > "${RP_EXAMPLE_TMP:-/tmp}/first.out" 2>&1 || { cat "${RP_EXAMPLE_TMP:-/tmp}/first.out"; exit 1; }
"$1" "$M" "$D" > "${RP_EXAMPLE_TMP:-/tmp}/second.out" 2>&1 || { cat "${RP_EXAMPLE_TMP:-/tmp}/second.out"; exit 1; }
cat "${RP_EXAMPLE_TMP:-/tmp}/first.out" "${RP_EXAMPLE_TMP:-/tmp}/second.out"
python3 - "${RP_EXAMPLE_TMP:-/tmp}/first.out" "${RP_EXAMPLE_TMP:-/tmp}/second.out" <<'PY'
import re, sys
runs = [open(f).read() for f in sys.argv[1:]]
reuse = [[tuple(map(int, m)) for m in re.findall(r"reuse: prompt (\d+) tokens, reused (\d+) prefix \+ (\d+) non-prefix", r)]
         for r in runs]
answers = [re.findall(r"^A\d:.*$", r, re.M) for r in runs]
assert all(len(x) == 3 for x in reuse) and all(len(a) == 3 for a in answers), runs
first, second = reuse
assert first[0][1] + first[0][2] == 0, "the very first question reuses nothing"
assert all(p + n > 0 for _, p, n in first[1:]), "later questions reuse the documents"
assert all(p + n > 0 for _, p, n in second), "a restart reuses them from the cache directory"
assert answers[0] == answers[1], "the same answers after the restart"
print("docqa ok")
PY
