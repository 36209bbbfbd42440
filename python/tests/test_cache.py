"""test_cache.py — a cache directory: an engine writes it, a restarted one reuses it from flash, and
reprise.Cache reads (info, list, verify) and maintains it (bind, evict, compact, clear)."""
import os
import unittest

import support

import reprise

TEXT = "Once upon a time there was a boy who liked trains, and every morning he went to see them."


@support.needs_model
class TestCacheDir(unittest.TestCase):
    def test_store_life(self):
        m = support.model(self)
        d = os.path.join(support.scratch(self, "cache"), "kv")
        with reprise.Engine(m, n_threads=1, cache_dir=d, cache_disk_bytes=64 << 20) as e:
            first = e.generate(TEXT, max_tokens=8, **support.GREEDY)
            e.flush()
            st = e.stats()
            self.assertIsInstance(st, reprise.EngineStats)
            self.assertTrue(st.written > 0 and st.store_bytes > 0 and not st.store_damaged)
            self.assertEqual(e.notice, "")
            with self.assertRaises(reprise.Error):
                reprise.Cache(d, write=True)   # the engine holds the store's lock
        # a restart: the prompt comes from flash, and the text is the same
        with reprise.Engine(m, n_threads=1, cache_dir=d) as e:
            again = e.generate(TEXT, max_tokens=8, **support.GREEDY)
            self.assertEqual(again.stats.reused_prefix, first.stats.prompt_tokens - 1)
            self.assertEqual(again.text, first.text)
        with reprise.Cache(d) as c:
            info = c.info()
            self.assertTrue(info.chunks > 0 and info.disk_bytes > 0 and info.models == 1)
            rows = c.list()
            self.assertEqual(len(rows), info.chunks)
            self.assertTrue(all(r.tokens and len(r.tokens) == r.n_tokens > 0 and r.raw_bytes > 0 for r in rows))
            toks = [t for r in rows if r.pos0 == 0 for t in r.tokens]
            self.assertEqual(toks[:5], m.tokenize(TEXT)[:5])
            v = c.verify()
            self.assertEqual((v.db_ok, v.ok, v.corrupt, v.bad), (True, info.chunks, 0, ()))
            with self.assertRaises(reprise.Error) as cm:
                c.clear()   # a read-only handle
            self.assertIn("writing", str(cm.exception))
        with reprise.Cache.open(d, write=True) as c:
            with self.assertRaises(reprise.Error) as cm:
                c.bind(m, "q8_0")   # nothing written with q8_0
            self.assertEqual(cm.exception.status, reprise.Status.NOT_FOUND)
            c.bind(m, reprise.KVType.F16)
            self.assertEqual(c.evict(1 << 40), (0, 0))   # under the target already
            n_evicted, freed = c.evict(info.disk_bytes // 2)
            self.assertTrue(n_evicted > 0 and freed > 0)
            self.assertGreaterEqual(c.compact(), 0)
            left = c.info().chunks
            self.assertEqual(left, info.chunks - n_evicted)
            self.assertEqual(c.clear(), left)
            self.assertEqual(c.info().chunks, 0)
        with self.assertRaises(reprise.Error) as cm:
            reprise.Cache(os.path.join(d, "nothing-here"))
        self.assertEqual(cm.exception.status, reprise.Status.NOT_FOUND)

    def test_unsafe_dir_refused(self):
        m = support.model(self)
        d = os.path.join(support.scratch(self, "unsafe"), "kv")
        os.makedirs(d)
        os.chmod(d, 0o777)
        with self.assertRaises(reprise.Error) as cm:
            reprise.Engine(m, n_threads=1, cache_dir=d)
        self.assertIn(d, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
