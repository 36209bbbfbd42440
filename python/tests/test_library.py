"""test_library.py — finding libreprise.so, the package's declarations against include/reprise.h (every struct's
size and offsets, every enum value, every RP_API function bound), and the system calls."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import unittest

import support

import reprise
from reprise import _lib


class TestFinding(unittest.TestCase):
    def test_order(self):
        d = support.scratch(self, "find")
        pkg = os.path.join(d, "python", "reprise")
        os.makedirs(pkg)
        open(os.path.join(pkg, "libreprise.so.0"), "w").close()
        got = _lib.candidates(pkg, {})
        hows = [h for h, _ in got]
        self.assertEqual(hows[0], "next to the package")
        self.assertEqual(got[0][1], os.path.join(pkg, "libreprise.so.0"))
        self.assertIn(("the build tree", os.path.join(d, "build", "libreprise.so")), got)
        self.assertEqual(hows[-1], "ctypes.util.find_library('reprise')")
        self.assertLess(hows.index("next to the package"), hows.index("the build tree"))
        # REPRISE_LIBRARY, when set, is the only candidate
        self.assertEqual(_lib.candidates(pkg, {"REPRISE_LIBRARY": "/x/lib.so"}), [("REPRISE_LIBRARY", "/x/lib.so")])

    def _python(self, env_extra, code="import reprise; print(reprise.library_path())"):
        env = dict(os.environ)
        env.pop("REPRISE_LIBRARY", None)
        env.update(env_extra)
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              cwd=support.scratch(self, "cwd"))

    def test_bad_reprise_library_names_it(self):
        r = self._python({"REPRISE_LIBRARY": "/nonexistent/libreprise.so"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        self.assertIn("REPRISE_LIBRARY: /nonexistent/libreprise.so: no such file", r.stderr)

    def test_not_a_library(self):
        d = support.scratch(self, "notlib")
        f = os.path.join(d, "libreprise.so")
        with open(f, "w") as fh:
            fh.write("not an ELF file")
        r = self._python({"REPRISE_LIBRARY": f})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("REPRISE_LIBRARY: %s:" % f, r.stderr)

    @unittest.skipUnless(os.environ.get("REPRISE_TEST_INSTALLED"), "run from the source tree (not an installed copy)")
    def test_installed_copy_uses_find_library(self):
        # the installed package has no library beside it and no build tree: find_library (here through
        # LD_LIBRARY_PATH, as after `cmake --install` to a prefix) finds it; without it the error lists each place
        libdir = os.path.dirname(os.path.realpath(_lib.path))
        self.assertTrue(reprise.__file__.startswith(sys.prefix), reprise.__file__)
        r = self._python({"LD_LIBRARY_PATH": libdir})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.realpath(r.stdout.strip()) == os.path.realpath(_lib.path) or
                        r.stdout.strip().startswith("libreprise.so"), r.stdout)
        r = self._python({"LD_LIBRARY_PATH": ""}, "import reprise._lib as l; print(l.found_by)")
        if r.returncode == 0:   # a libreprise installed system-wide
            self.assertIn("find_library", r.stdout)
        else:
            for what in ("next to the package", "the build tree", "find_library('reprise'): nothing found"):
                self.assertIn(what, r.stderr)

    def test_version_and_system(self):
        self.assertEqual(reprise.version().split(".")[0], str(_lib.ABI_MAJOR))
        self.assertIn("active", reprise.system_info())
        with self.assertRaises(reprise.Error) as cm:
            reprise.cpu_select("warp-drive")
        self.assertEqual(cm.exception.status, reprise.Status.INVALID_ARG)
        self.assertEqual(cm.exception.status_name, "invalid argument")
        reprise.cpu_select("scalar")
        self.assertEqual(reprise.cpu_active(), "scalar")
        reprise.cpu_select("auto")


def header():
    path = os.path.join(support.INCLUDE, "reprise.h")
    if not os.path.isfile(path):
        raise unittest.SkipTest("%s not found (set REPRISE_INCLUDE)" % path)
    with open(path) as f:
        return f.read()


class TestDeclarations(unittest.TestCase):
    def test_every_function_bound(self):
        src = re.sub(r"/\*.*?\*/", "", header(), flags=re.S)
        declared = set(re.findall(r"\bRP_API\b[^;{]*?\b(rp_\w+)\s*\(", src))
        self.assertGreater(len(declared), 60)
        bound = set(_lib.PROTOTYPES)
        self.assertEqual(sorted(declared - bound), [], "declared in reprise.h, not bound in reprise/_lib.py")
        self.assertEqual(sorted(bound - declared), [], "bound in reprise/_lib.py, not in reprise.h")

    ENUMS = {reprise.Status: "RP_ERR_", reprise.KVType: "RP_KV_", reprise.Reuse: "RP_REUSE_",
             reprise.Select: "RP_SELECT_", reprise.StopReason: "RP_STOP_", reprise.Policy: "RP_AGENTS_",
             reprise.AgentState: "RP_AGENT_", reprise.Pooling: "RP_POOLING_"}

    def test_layout_matches_the_header(self):
        header()
        cc = os.environ.get("RP_CC") or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler (set RP_CC)")
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "reprise.h"', "int main(void) {"]
        want = []
        for s in _lib.STRUCTS:
            name = s.__name__
            lines.append('printf("%s %%zu\\n", sizeof(%s));' % (name, name))
            want.append("%s %d" % (name, ctypes.sizeof(s)))
            for f, _t in s._fields_:
                lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, f, name, f))
                want.append("%s.%s %d" % (name, f, getattr(s, f).offset))
        for e, prefix in self.ENUMS.items():
            for m in e:
                c = "RP_OK" if e is reprise.Status and m.name == "OK" else prefix + m.name
                lines.append('printf("%s %%d\\n", (int)%s);' % (c, c))
                want.append("%s %d" % (c, int(m)))
        lines += ['printf("RP_STATUS_COUNT %d\\n", (int)RP_STATUS_COUNT);', "return 0; }"]
        want.append("RP_STATUS_COUNT %d" % len(reprise.Status))
        d = support.scratch(self, "layout")
        with open(os.path.join(d, "layout.c"), "w") as f:
            f.write("\n".join(lines) + "\n")
        exe = os.path.join(d, "layout")
        r = subprocess.run([cc, "-std=c11", "-I", support.INCLUDE, "-o", exe, os.path.join(d, "layout.c")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")[:-1]
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
