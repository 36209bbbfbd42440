"""test_embed.py — reprise.Embedder on stories260K: vectors of texts and token ids, pooling (mean as the mean of
the per-token vectors, last / cls as one of them), L2 normalization, a batch equals one by one, and errors."""
import math
import unittest

import support

import reprise


def norm(v):
    return math.sqrt(sum(x * x for x in v))


@support.needs_model
class TestEmbedder(unittest.TestCase):
    def setUp(self):
        self.m = support.model(self)

    def emb(self, **kw):
        kw.setdefault("n_threads", 1)
        e = reprise.Embedder(self.m, **kw)
        self.addCleanup(e.close)
        return e

    def test_vectors_and_pooling(self):
        e = self.emb()
        self.assertEqual(e.pooling, reprise.Pooling.MEAN)   # stories260K has no pooling_type: mean
        self.assertEqual(e.n_embd, self.m.describe().n_embd)
        v = e.embed("Once upon a time")
        self.assertEqual(len(v), e.n_embd)
        self.assertAlmostEqual(norm(v), 1.0, places=4)
        toks = e.tokenize("Once upon a time")
        self.assertEqual(e.embed(toks), v)   # token ids give the same vector
        # mean = the mean of the per-token vectors (unnormalized), last / cls = one of them
        per = self.emb(pooling="none", normalize=False).embed(toks)
        self.assertEqual(len(per), len(toks))
        mean = self.emb(pooling="mean", normalize=False).embed(toks)
        want = [sum(r[d] for r in per) / len(per) for d in range(len(mean))]
        self.assertLess(max(abs(a - b) for a, b in zip(mean, want)), 1e-4)
        last = self.emb(pooling="last", normalize=False).embed(toks)
        self.assertLess(max(abs(a - b) for a, b in zip(last, per[-1])), 1e-5)
        cls = self.emb(pooling=reprise.Pooling.CLS, normalize=False).embed(toks)
        self.assertLess(max(abs(a - b) for a, b in zip(cls, per[0])), 1e-5)

    def test_batch_equals_one_by_one(self):
        e = self.emb(n_seq=2)
        texts = ["Lily liked the park.", "Tom saw a dog near the pond and it barked.", "Sue made a cake."]
        many = e.embed(texts)
        self.assertEqual(len(many), 3)
        for t, v in zip(texts, many):
            self.assertLess(max(abs(a - b) for a, b in zip(v, e.embed(t))), 1e-5)
        self.assertGreater(max(abs(a - b) for a, b in zip(many[0], many[1])), 1e-3)   # different texts differ

    def test_errors(self):
        e = self.emb(n_ctx=16)
        with self.assertRaises(reprise.Error) as c:
            e.embed([[]])
        self.assertIn("empty", c.exception.detail)
        with self.assertRaises(reprise.Error) as c:
            e.embed(list(range(1, 40)))
        self.assertEqual(c.exception.status, reprise.Status.RANGE)
        with self.assertRaises(reprise.Error):
            e.embed([10 ** 6])
        with self.assertRaises(ValueError):
            reprise.Embedder(self.m, pooling="max")
        e.close()
        with self.assertRaises(reprise.Error):
            e.embed("x")


if __name__ == "__main__":
    unittest.main()
