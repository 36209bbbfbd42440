"""test_agents.py — reprise.Agents: two agents batched give each the text a sequence alone gives; a turn that
waits for a tool result resumes; token callbacks cancel; stats."""
import subprocess
import sys
import unittest

import support

import reprise

PROMPTS = ["Once upon a time, there was a dog", "Lily went to the park and saw"]


@support.needs_model
class TestAgents(unittest.TestCase):
    def setUp(self):
        self.m = support.model(self)
        self.a = reprise.Agents(self.m, n_threads=1, n_ctx=256, max_agents=4)
        self.addCleanup(self.a.close)

    def test_batched_equals_alone(self):
        ids = [self.a.add() for _ in PROMPTS]
        for i, p in zip(ids, PROMPTS):
            self.a.submit(i, p, max_tokens=16, **support.GREEDY)
        self.a.run()
        st = self.a.stats()
        self.assertIsInstance(st, reprise.AgentsStats)
        self.assertTrue(st.steps > 0 and st.agents == 2)
        s = support.engine(self, self.m, reuse="none").sequence()
        for i, p in zip(ids, PROMPTS):
            info = self.a.info(i)
            self.assertEqual((info.state, info.generated), (reprise.AgentState.IDLE, 16))
            n_prompt = len(self.m.tokenize(p))
            self.assertEqual(self.a.tokens(i)[:n_prompt], self.m.tokenize(p))
            ref = s.generate(p, max_tokens=16, ignore_eos=True, **support.GREEDY).text
            # a sequence's text keeps a continuation's leading space; detokenizing starts a text (drops it)
            self.assertEqual(self.a.text(i, n_prompt), ref[1:] if ref.startswith(" ") else ref)
        self.a.remove(ids[0])
        self.assertEqual(self.a.stats().agents, 1)
        with self.assertRaises(reprise.Error):
            self.a.info(ids[0])

    def test_wait_and_resume(self):
        writer, helper = self.a.add(), self.a.add()
        self.a.submit(writer, "Once upon a time, there was a little dog", max_tokens=12, **support.GREEDY)
        self.a.submit(helper, "Lily asked her mom for the weather.", max_tokens=6, wait_after=True,
                      **support.GREEDY)
        steps = 0
        while self.a.step():
            steps += 1
        self.assertGreater(steps, 0)
        self.assertEqual(self.a.info(helper).state, reprise.AgentState.WAITING)
        self.assertEqual(self.a.stats().waiting, 1)
        self.assertEqual(self.a.info(writer).state, reprise.AgentState.IDLE)
        n = self.a.info(helper).n_tokens
        self.a.resume(helper, " The weather was sunny.", max_tokens=8, **support.GREEDY)
        self.a.run()
        info = self.a.info(helper)
        self.assertEqual(info.state, reprise.AgentState.IDLE)
        self.assertGreater(info.n_tokens, n + 5)
        self.assertIn("The weather was sunny.", self.a.text(helper))

    def test_on_token_and_cancel(self):
        aid = self.a.add()
        seen = []

        def on_token(agent, tok):
            seen.append((agent, tok))
            return len(seen) < 5   # False: that agent's turn ends
        self.a.submit(aid, PROMPTS[0], max_tokens=50, on_token=on_token, **support.GREEDY)
        self.a.run()
        self.assertEqual(len(seen), 5)
        self.assertTrue(all(a == aid for a, _ in seen))
        info = self.a.info(aid)
        self.assertEqual(info.stop, reprise.StopReason.CANCELLED)

        class Boom(Exception):
            pass

        def boom(agent, tok):
            raise Boom()
        self.a.submit(aid, " and", max_tokens=5, on_token=boom)
        with self.assertRaises(Boom):   # raised by the step that called it
            self.a.run()
        with self.assertRaises(TypeError):
            self.a.submit(aid, "x", reuse="prefix")   # not a turn option (a sequence's)
        with self.assertRaises(ValueError):
            reprise.Agents(self.m, policy="fastest")

    def test_ignore_eos(self):
        # the end-of-generation token made by far the most likely: a turn ends at once, unless ignore_eos bans it
        eos = self.m.eos
        bias = {eos: 100.0}
        ids = [self.a.add() for _ in range(2)]
        for i, ignore in zip(ids, (False, True)):
            self.a.submit(i, PROMPTS[0], max_tokens=10, logit_bias=bias, ignore_eos=ignore, **support.GREEDY)
        self.a.run()
        self.assertEqual(self.a.info(ids[0]).generated, 1)
        self.assertEqual(self.a.info(ids[0]).stop, reprise.StopReason.EOG)
        self.assertEqual(self.a.info(ids[1]).generated, 10)
        n_prompt = len(self.m.tokenize(PROMPTS[0]))
        self.assertNotIn(eos, self.a.tokens(ids[1])[n_prompt:])

    def test_scheduler_calls_from_a_callback_refused(self):
        # the step runs token callbacks under the scheduler's lock: a call on it from one would wait for itself
        # forever, so the package refuses it (in a child process, so that a regression fails instead of hanging)
        code = """if True:
            import sys, reprise
            m = reprise.Model(sys.argv[1])
            a = reprise.Agents(m, n_threads=1, n_ctx=128, max_agents=2)
            aid = a.add()
            seen = []
            def on_token(agent, tok):
                for call in (lambda: a.info(agent), lambda: a.submit(agent, [tok]), lambda: a.tokens(agent)):
                    try:
                        call()
                        seen.append("called")
                    except reprise.Error as e:
                        seen.append("refused" if "from a token callback" in str(e) else str(e))
            a.submit(aid, "Once upon a time", max_tokens=4, temperature=0, on_token=on_token)
            a.run()
            print(" ".join(sorted(set(seen))), a.info(aid).generated)
        """
        r = subprocess.run([sys.executable, "-c", code, support.MODEL], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), ["refused", "4"])   # refused every time; the turn itself went on


if __name__ == "__main__":
    unittest.main()
