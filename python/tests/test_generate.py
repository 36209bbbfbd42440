"""test_generate.py — Engine / Sequence / Prompt / Stream on stories260K: the same greedy text as `reprise run`,
streaming, cancelling from the consumer's side, stop strings, per-call stats and options, documents reused
wherever they sit, chat, and errors."""
import math
import signal
import subprocess
import sys
import threading
import unittest

import support

import reprise

PROMPT = "Once upon a time, there was a little girl named Lily."
DOCS = ["Lily had a red ball and she liked to play with it in the park every day after lunch. ",
        "Tom saw a big dog near the pond. The dog was wet and happy and it barked at the ducks. ",
        "Sue made a cake for her mom. It was sweet and soft, and they ate it together at night. "]


def run_cli(n, prompt):
    """What `reprise run` prints (stdout) for the prompt, greedy, one thread."""
    r = subprocess.run([support.cli(), "run", "-m", support.MODEL, "-t", "1", "--temp", "0", "-n", str(n), "-p",
                        prompt], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("reprise run failed: %s" % r.stderr)
    return r.stdout


@support.needs_model
class TestSameAsCli(unittest.TestCase):
    @unittest.skipUnless(support.cli(), "no reprise binary (set RP_BIN)")
    def test_python_c_matches_reprise_run(self):
        # the check, literally: python3 -c "import reprise; ..." against `reprise run`
        code = ("import sys, reprise; m = reprise.Model(sys.argv[1]); e = reprise.Engine(m, n_threads=1); "
                "print(e.generate(sys.argv[2], max_tokens=int(sys.argv[3]), temperature=0).text)")
        for n, prompt in ((24, PROMPT), (40, "Tom and his dog went to")):
            r = subprocess.run([sys.executable, "-c", code, support.MODEL, prompt, str(n)], capture_output=True,
                               text=True, cwd=support.scratch(self, "cwd"))
            self.assertEqual(r.returncode, 0, r.stderr)
            ref = run_cli(n, prompt)
            self.assertGreater(len(ref.strip()), 20)
            self.assertEqual(r.stdout, ref)


@support.needs_model
class TestGenerate(unittest.TestCase):
    def setUp(self):
        self.m = support.model(self)
        self.e = support.engine(self, self.m)
        self.s = self.e.sequence()

    def test_stats_and_prefix_reuse(self):
        text, st = self.s.generate(PROMPT, max_tokens=24, **support.GREEDY)
        n_prompt = len(self.m.tokenize(PROMPT))
        self.assertIsInstance(st, reprise.GenStats)
        self.assertEqual(st.prompt_tokens, n_prompt)
        self.assertEqual((st.reused_prefix, st.generated, st.stop), (0, 24, reprise.StopReason.LENGTH))
        self.assertEqual(st.computed, n_prompt)
        self.assertGreater(st.ttft_ms, 0)
        self.assertGreater(st.gen_tok_per_s, 0)
        self.assertEqual(st.attempts, 1)
        self.assertEqual(st.as_dict()["stop"], "length")
        self.assertEqual(self.s.n_past, n_prompt + 24)
        # again: the chunks were cached at the first token; all but the last prompt token reused exactly
        again, st2 = self.s.generate(PROMPT, max_tokens=24, **support.GREEDY)
        self.assertEqual(again, text)
        self.assertEqual(st2.reused_prefix, n_prompt - 1)
        self.assertEqual(st2.reused_prefix_exact, st2.reused_prefix)
        self.assertGreater(self.e.stats().prefix_hits, 0)
        # reuse none for one call: nothing reused, and the engine's default is untouched afterwards
        st3 = self.s.prefill(PROMPT, reuse="none")
        self.assertEqual(st3.reused_prefix + st3.reused_nonprefix, 0)
        self.assertEqual(self.s.prefill(PROMPT).reused_prefix, n_prompt - 1)

    def test_logprobs_of_the_last_logits(self):
        self.assertIsNone(self.s.logprobs())
        self.s.prefill(PROMPT)
        lg = self.s.logits()
        mx = max(lg)
        lse = mx + math.log(sum(math.exp(x - mx) for x in lg))
        best = max(range(len(lg)), key=lambda i: (lg[i], -i))
        chosen, top = self.s.logprobs(top=3, token=best)
        self.assertAlmostEqual(chosen, lg[best] - lse, places=4)
        self.assertEqual(top[0][0], best)
        self.assertAlmostEqual(top[0][1], chosen, places=6)
        self.assertTrue(top[0][1] >= top[1][1] >= top[2][1])
        with self.assertRaises(reprise.Error):
            self.s.logprobs(top=21)

    def test_stream_is_generate_in_pieces(self):
        text, _ = self.s.generate(PROMPT, max_tokens=24, **support.GREEDY)
        st = self.s.stream(PROMPT, max_tokens=24, **support.GREEDY)
        pieces = list(st)
        self.assertGreater(len(pieces), 10)
        self.assertEqual("".join(pieces), text)
        self.assertEqual(st.text, text)
        self.assertEqual(len(st.tokens), 24)
        self.assertEqual(self.m.detokenize(st.tokens), text.lstrip(" "))
        self.assertEqual((st.stats.generated, st.stats.stop), (24, reprise.StopReason.LENGTH))
        self.assertEqual(st.stats.prompt_tokens, len(self.m.tokenize(PROMPT)))

    def test_break_cancels_at_that_token(self):
        n_prompt = len(self.m.tokenize(PROMPT))
        st = self.s.stream(PROMPT, max_tokens=200, ignore_eos=True, **support.GREEDY)
        got = []
        for piece in st:
            got.append(piece)
            if len(got) == 3:
                break
        # paused at the third token: the generation went no further than the loop did (the third token has
        # joined the sequence, awaiting its decode: rp_seq_n_past counts it)
        self.assertEqual(self.s.n_past, n_prompt + 3)
        self.assertEqual(st.stats.stop, reprise.StopReason.CANCELLED)   # reading the stats ends it
        self.assertEqual(st.stats.generated, 3)
        self.assertEqual(st.text, "".join(got))
        # a loop over a stream nobody else holds: breaking out ends it at once (the engine is free again)
        for i, _piece in enumerate(self.s.stream(PROMPT, max_tokens=200, ignore_eos=True, **support.GREEDY)):
            if i == 4:
                break
        self.assertIsNone(self.e._stream)
        self.assertEqual(self.s.n_past, n_prompt + 5)   # five tokens came; the fifth cancelled, undecoded
        text, stats = self.s.generate(PROMPT, max_tokens=5, **support.GREEDY)
        self.assertEqual(stats.generated, 5)
        self.assertTrue(text.startswith("".join(got)))

    def test_next_call_ends_an_open_stream(self):
        st = self.s.stream(PROMPT, max_tokens=100, ignore_eos=True)
        next(st)
        other = self.e.sequence()   # this thread's next call on the engine: the stream ends first
        self.assertTrue(st.done)
        self.assertEqual(st.stats.stop, reprise.StopReason.CANCELLED)
        self.assertEqual(other.generate(PROMPT, max_tokens=3).stats.generated, 3)
        with self.s.stream(PROMPT, max_tokens=100) as st2:
            next(st2)
        self.assertEqual(st2.stats.stop, reprise.StopReason.CANCELLED)

    def test_other_thread_waits_for_the_stream(self):
        st = self.s.stream(PROMPT, max_tokens=50, ignore_eos=True, **support.GREEDY)
        next(st)
        order = []

        def other():
            self.e.sequence().generate("Tom went", max_tokens=2)
            order.append("other")
        t = threading.Thread(target=other)
        t.start()
        t.join(0.3)
        order.append("stream")
        rest = list(st)
        t.join()
        self.assertEqual(order, ["stream", "other"])   # the other thread ran only after the stream ended
        self.assertEqual(st.stats.generated, 50)
        self.assertEqual(len(rest), 49)

    def test_exception_in_the_loop_stops_generate(self):
        # a signal handler's exception (a Ctrl-C's KeyboardInterrupt) runs in the token callback, the only Python
        # code during the generation: the generation stops there and the exception comes out of generate()
        class Boom(Exception):
            pass

        def on_alarm(sig, frame):
            raise Boom()
        old = signal.signal(signal.SIGALRM, on_alarm)
        self.addCleanup(signal.signal, signal.SIGALRM, old)
        self.s.prefill(PROMPT)
        signal.setitimer(signal.ITIMER_REAL, 0.002)
        try:
            with self.assertRaises(Boom):
                self.s.generate(max_tokens=None, ignore_eos=True)   # ~500 tokens to the end of the context
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        self.assertLess(self.s.n_past, self.e.n_ctx)   # it stopped before the context was full
        self.assertEqual(self.s.generate(PROMPT, max_tokens=3).stats.generated, 3)   # and the engine is usable

    def test_stop_strings(self):
        text, _ = self.s.generate(PROMPT, max_tokens=24, **support.GREEDY)
        cut = text.index(" ", 3)
        stop = text[cut:cut + 3]
        t2, st = self.s.generate(PROMPT, max_tokens=24, stop=stop, **support.GREEDY)
        self.assertEqual(st.stop, reprise.StopReason.STRING)
        self.assertEqual(t2, text[:cut])
        stream = self.s.stream(PROMPT, max_tokens=24, stop=["zzzz", stop], **support.GREEDY)
        self.assertEqual("".join(stream), text[:cut])   # nothing of the stop string was streamed
        self.assertEqual(stream.stats.stop, reprise.StopReason.STRING)

    def test_feed_and_continue(self):
        self.s.prefill("Once upon a time")
        n = self.s.n_past
        self.s.feed(" there was a dog")
        self.assertGreater(self.s.n_past, n)
        self.s.feed(self.m.tokenize(" named Max", add_bos=False))
        cont = self.s.generate(max_tokens=8, **support.GREEDY)   # from the sequence's state
        whole = self.e.sequence().generate("Once upon a time there was a dog named Max", max_tokens=8,
                                           **support.GREEDY)
        self.assertEqual(cont.stats.prompt_tokens, 0)
        self.assertEqual(cont.stats.generated, 8)
        self.assertNotEqual(cont.text, "")
        self.assertEqual(whole.stats.generated, 8)
        self.s.commit()
        self.assertIsNone(self.s.logits())   # max_tokens ended it: its last token awaits decoding
        self.s.feed(".")
        self.assertEqual(len(self.s.logits()), 512)
        self.s.reset()
        self.assertEqual(self.s.n_past, 0)
        self.assertIsNone(self.s.logits())

    def test_fork_continues_without_prefill(self):
        self.s.prefill(PROMPT)
        f = self.s.fork()
        self.assertEqual(f.n_past, self.s.n_past)
        self.assertEqual(list(f.logits()), list(self.s.logits()))
        a = f.generate(max_tokens=12, temperature=1.0, seed=3)
        self.assertEqual(a.stats.prompt_tokens, 0)   # the prompt was computed once, on the source
        fresh = self.e.sequence()
        b = fresh.generate(PROMPT, max_tokens=12, temperature=1.0, seed=3)
        self.assertEqual(a.text, b.text)   # a fork of a prefilled prompt generates what a prefill would
        into = self.e.sequence()
        self.assertIs(self.s.fork(into), into)
        self.assertEqual(into.n_past, self.s.n_past)
        other = support.engine(self, self.m).sequence()
        with self.assertRaises(reprise.Error):
            self.s.fork(other)

    def test_sampling_options(self):
        a = self.s.generate(PROMPT, max_tokens=16, temperature=1.0, seed=7, top_k=0, top_p=1.0, min_p=0).text
        b = self.s.generate(PROMPT, max_tokens=16, temperature=1.0, seed=7, top_k=0, top_p=1.0, min_p=0).text
        self.assertEqual(a, b)   # one seed, one text
        greedy = self.s.generate(PROMPT, max_tokens=1, **support.GREEDY)
        first = self.s.stream(PROMPT, max_tokens=1, **support.GREEDY)
        list(first)
        banned = self.s.generate(PROMPT, max_tokens=1, logit_bias={first.tokens[0]: float("-inf")}, **support.GREEDY)
        self.assertNotEqual(banned.text, greedy.text)
        pen = self.s.generate(PROMPT, max_tokens=24, repeat_penalty=1.5, presence_penalty=0.5,
                              frequency_penalty=0.5, repeat_last_n=32, **support.GREEDY)
        self.assertEqual(pen.stats.generated, 24)
        small = support.engine(self, self.m, n_ctx=64).sequence()
        unbounded = small.generate(PROMPT, max_tokens=None, **support.GREEDY).stats   # None: no limit of its own
        self.assertIn(unbounded.stop, (reprise.StopReason.EOG, reprise.StopReason.CONTEXT))
        with self.assertRaises(TypeError) as cm:
            self.s.generate(PROMPT, temprature=0)
        self.assertIn("did you mean 'temperature'", str(cm.exception))
        with self.assertRaises(ValueError):
            self.s.generate(PROMPT, reuse="sometimes")
        with self.assertRaises(reprise.Error):
            self.s.generate(PROMPT, temperature=float("nan"))

    def test_errors(self):
        e = support.engine(self, self.m, n_ctx=48)
        s = e.sequence()
        with self.assertRaises(reprise.Error) as cm:
            s.prefill("The dog ran to the park. " * 30)
        self.assertEqual(cm.exception.status, reprise.Status.RANGE)
        self.assertIn("context", cm.exception.detail)
        with self.assertRaises(reprise.Error) as cm:
            s.generate(max_tokens=4)   # nothing to continue
        self.assertIn("nothing to continue", str(cm.exception))
        st = s.stream(max_tokens=4)    # the same error from a stream, on its first piece
        with self.assertRaises(reprise.Error):
            next(st)
        t, stats = s.generate("Once upon a time", max_tokens=None, ignore_eos=True)
        self.assertEqual(stats.stop, reprise.StopReason.CONTEXT)
        self.assertEqual(s.n_past, 48)
        with self.assertRaises(reprise.Error) as cm:
            s.feed([400] * 10)
        self.assertEqual(cm.exception.status, reprise.Status.FULL)
        with self.assertRaises(reprise.Error) as cm:
            reprise.Engine(self.m, recompute_ratio=2)
        self.assertIn("recompute ratio", str(cm.exception))
        with self.assertRaises(ValueError):
            reprise.Engine(self.m, kv_type="f64")


@support.needs_model
class TestDocuments(unittest.TestCase):
    def test_reordered_documents_reused(self):
        m = support.model(self)
        e = support.engine(self, m)
        s = e.sequence()
        q = "Who is Lily?"
        p = reprise.Prompt(m, *DOCS, q)
        self.assertEqual((p.n_segments, len(p.bounds)), (4, 3))
        first = s.generate(p, max_tokens=4, cache_namespace="tenant-a", **support.GREEDY)
        self.assertEqual(first.stats.reused_nonprefix, 0)
        st = s.generate(q, documents=DOCS[::-1], max_tokens=4, cache_namespace="tenant-a", **support.GREEDY).stats
        self.assertGreater(st.reused_nonprefix, 0)
        self.assertEqual(st.prompt_tokens, len(p))
        # another namespace sees none of it
        other = s.prefill(q, documents=DOCS[::-1], cache_namespace="tenant-b")
        self.assertEqual(other.reused_prefix + other.reused_nonprefix, 0)
        # separators cut chunks too: after each " and" (stories260K's SentencePiece vocabulary adds a dummy
        # prefix, so "and" tokenizes as " and" does inside the text)
        p2 = reprise.Prompt(m, "".join(DOCS), separator="and")
        self.assertEqual(len(p2.bounds), 5)
        p2.clear()
        self.assertEqual(len(p2), 0)

    def test_chat_with_documents(self):
        m = support.model(self)
        e = support.engine(self, m)
        q = [{"role": "user", "content": "Who is Lily?"}]
        a = e.chat(q, documents=DOCS, max_tokens=6, **support.GREEDY)
        self.assertIsInstance(a, reprise.Generation)
        self.assertEqual(a.stats.generated, 6)
        b = e.chat(q, documents=DOCS[::-1], max_tokens=6, **support.GREEDY)
        self.assertGreater(b.stats.reused_nonprefix, 0)   # each document is a segment of its own
        # the prompt is the template's text with the documents in the system message, cut around each of them
        text = m.chat_render([{"role": "system", "content": "\n\n".join(DOCS)}] + q)
        self.assertEqual(reprise.chat.segments(text, DOCS)[1::2], DOCS)
        whole = e.generate(text, max_tokens=6, reuse="none", **support.GREEDY)
        self.assertGreater(a.stats.chunks, whole.stats.chunks)
        streamed = e.chat(q, stream=True, max_tokens=6, **support.GREEDY)
        self.assertIsInstance(streamed, reprise.Stream)
        self.assertEqual("".join(streamed), e.chat(q, max_tokens=6, **support.GREEDY).text)


if __name__ == "__main__":
    unittest.main()
