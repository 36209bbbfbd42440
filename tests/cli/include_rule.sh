#!/bin/bash
# include_rule.sh — front ends on the public API only (issue 15): the listed files under cli/ and bench/ include no
# header from src/, only "reprise.h", system headers and cli/ or bench/ headers that obey the same rule (checked
# recursively). Every other file under bench/ says in its first line why it includes internals ("includes
# internals": the kernel micro-benchmarks) or that it is still to move ("TODO(issue 15)").
set -u
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
. "$(dirname "$0")/lib/common.sh"

# The files moved onto the public API so far. The rest of cli/ follows as it moves (the issue wants every file
# under cli/ and bench/ except the kernel micro-benchmarks, which say why in their first line); add each here.
FILES="
cli/cmd_run.c cli/cmd_chat.c cli/cmd_tokenize.c cli/cmd_embed.c cli/cmd_cache.c cli/cmd_serve.c cli/cmd_bench.c
cli/args.c cli/cli.h cli/gen_args.c cli/gen_args.h cli/progress.c cli/progress.h cli/prompt.c cli/prompt.h
cli/calib.c cli/calib.h
cli/cmd_plan.c cli/cmd_inspect.c cli/cmd_synth.c cli/cmd_demo.c cli/synth_write.c cli/synth_write.h
bench/main.c bench/bench.h bench/bench_model.c bench/bench_sweep.c bench/bench_fidelity.c bench/bench_reuse.c
bench/bench_all.c bench/workload.c bench/workload.h bench/report.c bench/report.h bench/answer_score.c
bench/answer_score.h bench/bandwidth.h bench/svg.h bench/busy.c bench/busy.h bench/bench_ablation.c
bench/bench_agents.c bench/bench_grammar.c bench/grammar_schema.h bench/trace.c bench/trace.h bench/svg.c bench/bench_error.h
bench/retrieve_embed.c bench/retrieve_embed.h
bench/parity/reprise_logits.c
"

# violations ROOT FILE [DEPTH]: prints "FILE: #include X" for each include of FILE (relative to ROOT) that breaks
# the rule
violations() {
  local root=$1 f=$2 depth=${3:-0} line name
  [ -f "$root/$f" ] || { echo "$f: missing"; return; }
  [ "$depth" -lt 8 ] || { echo "$f: included 8 deep (a cycle?)"; return; }
  grep -E '^[[:space:]]*#[[:space:]]*include' "$root/$f" | while IFS= read -r line; do
    if [[ $line =~ \"([^\"]+)\" ]]; then
      name=${BASH_REMATCH[1]}
      [ "$name" = reprise.h ] && continue
      if [ -f "$root/$(dirname "$f")/$name" ] && [[ $name != */* ]]; then
        violations "$root" "$(dirname "$f")/$name" $((depth + 1))   # a front-end header: the same rule inside it
      elif [ -f "$root/cli/$name" ] && [[ $name != */* ]]; then
        violations "$root" "cli/$name" $((depth + 1))   # bench/ uses the cli/ helpers (option parsing, progress)
      else
        echo "$f: $line (not reprise.h nor a cli/ or bench/ header)"
      fi
    elif [[ $line =~ \<([^\>]+)\> ]]; then
      name=${BASH_REMATCH[1]}
      [ "$name" = reprise.h ] && continue
      if [ -e "$root/src/$name" ] || [ -e "$root/include/$name" ]; then echo "$f: $line (a library header)"; fi
    fi
  done
}

# The server (src/server) is a front end too: its files include "reprise.h", system headers, its own headers
# ("server/NAME.h") and, for rp_errorf (the library's thread-local error, which the public API only reads), core/error.h;
# auth.c also core/fsperm.h (the owner / mode check of the key file, shared with the store; no model or engine state).
# SERVER_EXEMPT: files still on internal headers, each with the reason (none are).
SERVER_EXEMPT="${SERVER_EXEMPT-}"

# server_violations ROOT FILE: prints "FILE: #include X" for each include of FILE that breaks the server's rule
server_violations() {
  local root=$1 f=$2 line name
  grep -E '^[[:space:]]*#[[:space:]]*include' "$root/$f" | while IFS= read -r line; do
    if [[ $line =~ \"([^\"]+)\" ]]; then
      name=${BASH_REMATCH[1]}
      case $name in
        reprise.h|core/error.h) ;;
        core/fsperm.h) [[ $f == src/server/auth.c ]] || echo "$f: $line (only auth.c checks a key file's owner and mode)" ;;
        server/*.h) [ -f "$root/src/$name" ] || echo "$f: $line (no such server header)" ;;
        *) echo "$f: $line (not reprise.h, core/error.h nor a server header)" ;;
      esac
    elif [[ $line =~ \<([^\>]+)\> ]]; then
      name=${BASH_REMATCH[1]}
      [ "$name" = reprise.h ] && continue
      if [ -e "$root/src/$name" ] || [ -e "$root/include/$name" ]; then echo "$f: $line (a library header)"; fi
    fi
  done
}

# the checker itself: it must see a src/ header, directly and through a cli/ header, quoted or angled
T="${RP_TEST_TMP:-/tmp}/include_rule.$$"
mkdir -p "$T/cli" "$T/src/model"
trap 'rm -rf "$T"' EXIT
: > "$T/src/model/model.h"
printf '#include "reprise.h"\n#include <stdio.h>\n#include "ok.h"\n' > "$T/cli/good.c"
printf '#include <stdint.h>\n#include "reprise.h"\n' > "$T/cli/ok.h"
printf '#include "model/model.h"\n' > "$T/cli/direct.c"
printf '#include "ok.h"\n#include "leaky.h"\n' > "$T/cli/indirect.c"
printf '#include <model/model.h>\n' > "$T/cli/leaky.h"
check "the checker passes a clean file" '[ -z "$(violations "$T" cli/good.c)" ]'
check "the checker catches a src/ header" '[ -n "$(violations "$T" cli/direct.c)" ]'
check "the checker catches one through a cli/ header (angled)" 'violations "$T" cli/indirect.c | grep -q "cli/leaky.h: #include <model/model.h>"'
mkdir -p "$T/src/server"
: > "$T/src/server/own.h"
printf '#include "reprise.h"\n#include "core/error.h"\n#include "server/own.h"\n#include <stdio.h>\n' > "$T/src/server/good.c"
printf '#include "server/own.h"\n#include "model/model.h"\n' > "$T/src/server/bad.c"
check "the server checker passes a clean file" '[ -z "$(server_violations "$T" src/server/good.c)" ]'
check "the server checker catches an internal header" 'server_violations "$T" src/server/bad.c | grep -q "model/model.h"'

printf '#include "ok.h"\n' > "$T/cli/cliok.h"
mkdir -p "$T/bench"
printf '#include "cliok.h"\n#include "reprise.h"\n' > "$T/bench/b.c"
printf '#include "leaky.h"\n' > "$T/bench/bl.c"
check "the checker follows a bench/ file into cli/ headers" '[ -z "$(violations "$T" bench/b.c)" ] && [ -n "$(violations "$T" bench/bl.c)" ]'

for f in $FILES; do
  v=$(violations "$HERE" "$f")
  check "$f includes only reprise.h, system and clean cli/ or bench/ headers${v:+: $v}" '[ -z "$v" ]'
done
# every bench/ source or header not listed: its first line says why it includes internals, or that it is to move
for f in "$HERE"/bench/*.c "$HERE"/bench/*.h; do
  rel=bench/$(basename "$f")
  case " $(echo $FILES) " in *" $rel "*) continue ;; esac
  first=$(head -n 1 "$f")
  check "$rel (on internals) says why in its first line" \
    'grep -q "includes internals\|TODO(issue 15)" <<<"$first" && [ -n "$(violations "$HERE" "$rel")" ]'
done
for f in $(cd "$HERE" && ls src/server/*.c src/server/*.h); do
  case " $SERVER_EXEMPT " in *" $f "*) continue ;; esac
  v=$(server_violations "$HERE" "$f")
  check "$f includes only reprise.h, core/error.h, system and server headers${v:+: $v}" '[ -z "$v" ]'
done
finish
