#!/usr/bin/env python3
"""template_ref.py — the reference renderer for tests/test_template_parity.c: Python jinja2 set up the way
HF transformers renders chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop
controls, {% generation %}, tojson = json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now on a
fixed clock).

usage: template_ref.py MANIFEST.json OUT.json
MANIFEST: {"now": UNIX_SECONDS, "cases": [{"id": str, "template": PATH, "context": {...}}, ...]}
OUT: {id: {"ok": true, "out": str} | {"ok": false, "error": str}}
"""
import json
import sys
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """{% generation %}...{% endgeneration %}: HF marks the assistant's tokens; the text is unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(now, timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    manifest = json.load(open(sys.argv[1], encoding="utf-8"))
    env = make_env(manifest.get("now", 0))
    compiled = {}
    out = {}
    for case in manifest["cases"]:
        path = case["template"]
        try:
            if path not in compiled:
                with open(path, encoding="utf-8", newline="") as f:
                    compiled[path] = env.from_string(f.read())
            out[case["id"]] = {"ok": True, "out": compiled[path].render(**case["context"])}
        except Exception as e:  # any failure counts: the C side must fail too
            out[case["id"]] = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
    json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
    sys.stderr.write("template_ref: jinja2 %s, %d cases\n" % (jinja2.__version__, len(out)))


if __name__ == "__main__":
    main()
