"""test_model.py — reprise.Model: loading (errors, progress), metadata, the tokenizer, special tokens, chat
templates, and the life cycle of handles (close, parents kept alive, children closed first)."""
import gc
import os
import unittest
import weakref

import support

import reprise


class TestLoadErrors(unittest.TestCase):
    def test_missing_file_names_the_path(self):
        path = os.path.join(support.scratch(self, "missing"), "no-such-model.gguf")
        with self.assertRaises(reprise.Error) as cm:
            reprise.Model(path)
        e = cm.exception
        self.assertIn(path, str(e))
        self.assertIn(path, e.detail)
        self.assertEqual(e.status, reprise.Status.IO)
        self.assertEqual(e.status_name, reprise.Error(reprise.Status.IO).status_name)   # rp_strerror's
        self.assertTrue(str(e).startswith(e.status_name + ": "))

    def test_not_a_gguf(self):
        path = os.path.join(support.scratch(self, "bad"), "bad.gguf")
        with open(path, "wb") as f:
            f.write(b"this is not a model" * 10)
        with self.assertRaises(reprise.Error) as cm:
            reprise.Model(path)
        self.assertEqual(cm.exception.status, reprise.Status.FORMAT)
        self.assertIn(path, str(cm.exception))


@support.needs_model
class TestModel(unittest.TestCase):
    def test_describe_and_meta(self):
        m = support.model(self)
        d = m.describe()
        self.assertEqual((d.arch, d.n_vocab, d.n_ctx_train), ("llama", 512, 512))
        self.assertTrue(d.has_weights and d.n_layer > 0 and d.fingerprint != 0)
        # the rest of the hyper-parameters, as `reprise inspect` prints them for stories260K
        self.assertEqual((d.tokenizer, d.n_tokens, d.n_rot, d.rope_neox, d.tied_output), ("spm", 512, 8, False, False))
        self.assertAlmostEqual(d.rope_base, 10000.0)
        self.assertAlmostEqual(d.rms_eps, 1e-5, places=9)
        self.assertEqual(m.meta("general.architecture"), "llama")
        self.assertEqual(int(m.meta("llama.block_count")), d.n_layer)
        self.assertIsNone(m.meta("no.such.key"))
        self.assertIn("stories260K", repr(m))

    def test_tokenizer(self):
        m = support.model(self)
        text = "Once upon a time, there was a cat."
        t = m.tokenize(text)
        self.assertEqual(t[0], m.bos)
        self.assertEqual(m.tokenize(text, add_bos=False), t[1:])
        self.assertEqual(m.detokenize(t[1:]), text)
        self.assertEqual(b"".join(m.token_to_piece(x) for x in t[1:]).decode(), " " + text)
        long_text = "The dog ran to the park. " * 200   # bigger than the first buffers tried
        self.assertEqual(m.detokenize(m.tokenize(long_text, add_bos=False)), long_text)
        self.assertTrue(m.is_eog(m.eos))
        self.assertFalse(m.is_eog(t[1]))
        self.assertIsNone(m.eot)
        with self.assertRaises(reprise.Error) as cm:
            m.token_to_piece(100000)
        self.assertEqual(cm.exception.status, reprise.Status.RANGE)

    def test_small_buffers(self):
        # every call that fills a buffer retries with what it needs: the same results from 1-byte first tries
        m = support.model(self)
        text = "Once upon a time, there was a cat."
        msgs = [("system", "Be brief."), ("user", "Hi!")]
        want = (m.tokenize(text), m.detokenize(m.tokenize(text)), m.token_to_piece(m.tokenize(text)[2]),
                m.chat_render(msgs))
        self.assertTrue(len(want[2]) > 1 and len(want[3]) > 10)
        reprise.model.FIRST_CAP = 1
        try:
            got = (m.tokenize(text), m.detokenize(m.tokenize(text)), m.token_to_piece(m.tokenize(text)[2]),
                   m.chat_render(msgs))
        finally:
            reprise.model.FIRST_CAP = None
        self.assertEqual(got, want)

    def test_chat_render(self):
        m = support.model(self)
        msgs = [{"role": "system", "content": "Be brief."}, ("user", "Hi!")]
        text = m.chat_render(msgs)
        self.assertIn("Hi!", text)
        self.assertIn("Be brief.", text)
        self.assertTrue(text.startswith(m.chat_render(msgs, add_generation_prompt=False).rstrip()))
        with self.assertRaises(reprise.Error) as cm:
            m.chat_render([{"role": "wizard", "content": "x"}])
        self.assertEqual(cm.exception.status, reprise.Status.INVALID_ARG)
        with self.assertRaises(ValueError):
            m.chat_render([{"role": "user", "contents": "typo"}])

    def test_chat_template(self):
        m = support.model(self)   # TinyStories: no template in the file, the llama2 built-in
        self.assertEqual(m.chat_template, "llama2")
        m.check_chat_template()
        m.set_chat_template("chatml")
        self.assertEqual(m.chat_template, "chatml")
        self.assertIn("<|im_start|>user\nHi<|im_end|>", m.chat_render([("user", "Hi")]))
        with self.assertRaises(reprise.Error) as cm:
            m.set_chat_template("no-such-template")
        self.assertEqual(cm.exception.status, reprise.Status.INVALID_ARG)
        self.assertIn("not a built-in", str(cm.exception))
        self.assertEqual(m.chat_template, "chatml")   # kept
        m.set_chat_template(None)
        self.assertEqual(m.chat_template, "llama2")

    def test_chat_tools(self):
        m = support.model(self)
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        with self.assertRaises(reprise.Error) as cm:   # the Llama 2 format has no tools
            m.chat_render([("user", "Hi")], tools=tools)
        self.assertEqual(cm.exception.status, reprise.Status.UNSUPPORTED)
        qwen = os.path.join(support.SHARED, "models", "vocab", "qwen3-bpe.vocab.gguf")
        if not os.path.isfile(qwen):
            self.skipTest("%s not found" % qwen)
        v = support.model(self, path=qwen, vocab_only=True)
        self.assertEqual(v.describe().chat_format, "chatml")
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        text = v.chat_render([("user", "Hi"), {"role": "assistant", "content": None, "tool_calls": [call]},
                              {"role": "tool", "content": "sunny", "tool_call_id": "c1", "name": "get_weather"}],
                             tools=tools)
        self.assertIn('"name": "get_weather"', text)   # the tool's definition and the call
        self.assertIn("sunny", text)
        self.assertTrue(text.rstrip().endswith("</think>") or "<|im_start|>assistant" in text[-80:])
        t = v.tokenize("<|im_start|>user", add_bos=False, parse_special=True)
        self.assertEqual(v.token_to_piece(t[0]), b"")   # a control token shows only with render_special
        self.assertEqual(v.token_to_piece(t[0], render_special=True), b"<|im_start|>")
        self.assertEqual(v.eot, v.eos)

    def test_progress_and_cancel(self):
        calls = []
        m = support.model(self, progress=lambda done, total: calls.append((done, total)))
        self.assertTrue(calls and calls[-1][0] == calls[-1][1])
        m.close()
        with self.assertRaises(reprise.Error) as cm:
            reprise.Model(support.MODEL, progress=lambda done, total: False)
        self.assertEqual(cm.exception.status, reprise.Status.CANCELLED)

        class Boom(Exception):
            pass

        def boom(done, total):
            raise Boom()
        with self.assertRaises(Boom):   # an exception in the callback cancels the load and comes out
            reprise.Model(support.MODEL, progress=boom)

    def test_vocab_only(self):
        m = support.model(self, vocab_only=True)
        self.assertFalse(m.describe().has_weights)
        self.assertGreater(len(m.tokenize("Once upon a time")), 2)
        with self.assertRaises(reprise.Error) as cm:
            reprise.Engine(m)
        self.assertIn("vocab-only", str(cm.exception))


@support.needs_model
class TestModelFile(unittest.TestCase):
    def test_metadata_and_tensors(self):
        with reprise.ModelFile(support.MODEL) as f:
            d = f.describe()
            meta, tensors = f.meta(), f.tensors()
            self.assertEqual((len(meta), len(tensors)), (d["n_meta"], d["n_tensors"]))
            self.assertEqual(meta["general.architecture"], "'llama'")
            self.assertEqual(f.meta("llama.block_count"), "5")
            self.assertIsNone(f.meta("no.such.key"))
            self.assertEqual(sum(t[4] for t in tensors), d["tensor_bytes"])
            emb = [t for t in tensors if t[0] == "token_embd.weight"]
            self.assertEqual(emb[0][2], (64, 512))   # n_embd x n_vocab, ne[0] first
        with self.assertRaises(reprise.Error) as cm:
            reprise.ModelFile(os.path.join(support.SHARED, "no-such-file.gguf"))
        self.assertEqual(cm.exception.status, reprise.Status.IO)


@support.needs_model
class TestLifeCycle(unittest.TestCase):
    def test_close_and_context_managers(self):
        with reprise.Model(support.MODEL) as m:
            with reprise.Engine(m, n_threads=1) as e:
                s = e.sequence()
                s.generate("Once upon a time", max_tokens=2)
            self.assertTrue(e.closed and s.closed)   # the engine closed its sequence first
            with self.assertRaises(reprise.Error) as cm:
                s.generate("Once", max_tokens=2)
            self.assertIn("used after close()", str(cm.exception))
            e2 = reprise.Engine(m, n_threads=1)
            p = reprise.Prompt(m, "Once upon a time")
        self.assertTrue(m.closed and e2.closed)        # the model closed its engine
        with self.assertRaises(reprise.Error):
            p.add("more")                               # its model is gone
        p.close()
        m.close()   # idempotent

    def test_parents_kept_alive(self):
        gc.disable()   # freed by reference counting alone: no cycles anywhere
        self.addCleanup(gc.enable)
        m = reprise.Model(support.MODEL)
        e = reprise.Engine(m, n_threads=1)
        s = e.sequence()
        mref, eref = weakref.ref(m), weakref.ref(e)
        del m, e
        self.assertIsNotNone(mref())   # the sequence holds its engine, the engine its model
        self.assertIsNotNone(eref())
        self.assertEqual(s.generate("Once upon a time", max_tokens=4, ignore_eos=True).stats.generated, 4)
        del s
        self.assertIsNone(eref())      # freed when the last reference goes
        self.assertIsNone(mref())

    def test_engine_own_sequence_makes_no_cycle(self):
        gc.disable()
        self.addCleanup(gc.enable)
        m = support.model(self)
        e = reprise.Engine(m, n_threads=1)
        e.generate("Once upon a time", max_tokens=2)
        seq = weakref.ref(e._seq)
        eref = weakref.ref(e)
        del e
        self.assertIsNone(eref())
        self.assertIsNone(seq())


if __name__ == "__main__":
    unittest.main()
