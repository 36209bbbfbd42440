"""support.py — what the tests share: where the models, the CLI, the header and a scratch directory are.

Models come from RP_SHARED_DIR, else ../shared beside the checkout (the tests skip, saying so, without them);
the `reprise` binary from RP_BIN, else the checkout's build/reprise; the header from REPRISE_INCLUDE, else the
checkout's include/; scratch files go under RP_TEST_TMP (else the system's temporary directory)."""
import os
import shutil
import tempfile
import unittest

CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("RP_SHARED_DIR") or os.path.join(os.path.dirname(CHECKOUT), "shared")
MODEL = os.path.join(SHARED, "models", "stories260K.gguf")
INCLUDE = os.environ.get("REPRISE_INCLUDE") or os.path.join(CHECKOUT, "include")


def cli():
    """The `reprise` binary, or None."""
    b = os.environ.get("RP_BIN") or os.path.join(CHECKOUT, "build", "reprise")
    return b if os.access(b, os.X_OK) else None


def needs_model(cls_or_fn):
    return unittest.skipUnless(os.path.isfile(MODEL), "%s not found (set RP_SHARED_DIR)" % MODEL)(cls_or_fn)


def scratch(test: unittest.TestCase, name: str) -> str:
    """An empty directory of the test's own, removed after it."""
    base = os.environ.get("RP_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    d = tempfile.mkdtemp(prefix="py-%s-" % name, dir=base)
    test.addCleanup(shutil.rmtree, d, True)
    return d


def model(test: unittest.TestCase, path=None, **kw):
    """stories260K (or the model at path), closed after the test."""
    import reprise
    m = reprise.Model(path or MODEL, **kw)
    test.addCleanup(m.close)
    return m


def engine(test: unittest.TestCase, m=None, **kw):
    """An engine on stories260K with one thread (as the CLI comparisons run), closed after the test."""
    import reprise
    kw.setdefault("n_threads", 1)
    e = reprise.Engine(m or model(test), **kw)
    test.addCleanup(e.close)
    return e


GREEDY = {"temperature": 0}
