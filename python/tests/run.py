"""run.py — runs every test here with unittest (python tests/run.py [-v]), the way ctest wants it: exit 0 when
all passed, 1 when one failed, 77 when every test was skipped (e.g. no models). The last line is
"P passed, F failed, S skipped" (scripts/test.sh reads it)."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
verbosity = 2 if "-v" in sys.argv[1:] else 1
suite = unittest.defaultTestLoader.discover(here, top_level_dir=here)
result = unittest.TextTestRunner(verbosity=verbosity, stream=sys.stdout).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
skipped = len(result.skipped)
print("%d passed, %d failed, %d skipped" % (result.testsRun - failed - skipped, failed, skipped))
sys.stdout.flush()
sys.exit(1 if failed else 77 if result.testsRun and skipped == result.testsRun else 0)
