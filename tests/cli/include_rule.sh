#!/bin/bash
# include_rule.sh — front ends on the public API only (issue 15): the listed files under cli/ include no header from
# src/, only "reprise.h", system headers and cli/ headers that obey the same rule (checked recursively).
set -u
HERE="$(cd "$(dirname "$0")/../.." && pwd)"
. "$(dirname "$0")/lib/common.sh"

# The files moved onto the public API so far. The rest of cli/ follows as it moves (the issue wants every file
# under cli/ and bench/ except the kernel micro-benchmarks, which say why in their first line); add each here.
FILES="
cli/cmd_run.c cli/cmd_chat.c cli/cmd_tokenize.c cli/cmd_cache.c
cli/args.c cli/cli.h cli/gen_args.c cli/gen_args.h cli/progress.c cli/progress.h cli/prompt.c cli/prompt.h
cli/calib.c cli/calib.h
cli/cmd_plan.c cli/cmd_inspect.c cli/cmd_synth.c cli/cmd_demo.c cli/synth_write.c cli/synth_write.h
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
        violations "$root" "$(dirname "$f")/$name" $((depth + 1))   # a cli/ header: the same rule inside it
      else
        echo "$f: $line (not reprise.h nor a cli/ header)"
      fi
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

for f in $FILES; do
  v=$(violations "$HERE" "$f")
  check "$f includes only reprise.h, system and clean cli/ headers${v:+: $v}" '[ -z "$v" ]'
done
finish
