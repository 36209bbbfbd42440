// web_ui.test.mjs — the built-in web page of `reprise serve` in a real browser: Debian's chromium, headless, driven by
// playwright-core. REPRISE_URL (the server's origin), REPRISE_KEY (its API key), CHROMIUM (the browser binary),
// SCREENSHOT (where to save a picture of the page after its second reply).
// Checks: the page loads with no request leaving the server's origin and no script error; it asks for the API key
// (the server has one) and lists the model; the settings go into the request; a message gets a reply rendered while
// it streams, with a TTFT; a second
// message with the documents reordered shows reused tokens (exact prefix and re-rotated documents) in the reuse
// panel (the screenshot); in a new chat, a forced tool call is shown as a tool call with its arguments and a form for
// its result, which goes back as a tool message; in another, a server session's second turn reuses the first's KV.
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { chromium } from 'playwright-core';

const server = process.env.REPRISE_URL;
const key = process.env.REPRISE_KEY;
const executablePath = process.env.CHROMIUM;
const shot = process.env.SCREENSHOT;
if (!server || !key || !executablePath) throw new Error('REPRISE_URL, REPRISE_KEY and CHROMIUM must be set');

// The browser talks to the server through this proxy, which passes everything on as it is, except that while
// `spacing` is set it writes an event stream's events one at a time, `spacing` ms apart. stories260K writes a whole
// reply in a millisecond or two, often before the server's first write (then one delta holds it all and the browser
// gets it in one read): spaced, the page is seen showing the reply while it still streams.
let spacing = 0;
function startProxy() {
  const up = new URL(server);
  const proxy = http.createServer((req, res) => {
    const fwd = http.request({ host: up.hostname, port: up.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      if (!spacing || !/^text\/event-stream/.test(ur.headers['content-type'] || '')) return ur.pipe(res);
      const gap = spacing, queue = [];
      let buf = '', pumping = false, ended = false;
      const pump = () => {
        if (queue.length) { res.write(queue.shift()); setTimeout(pump, gap); } else if (ended) res.end(); else pumping = false;
      };
      const kick = () => { if (!pumping) { pumping = true; pump(); } };
      ur.setEncoding('utf8');
      ur.on('data', (d) => {
        buf += d;
        for (let i; (i = buf.indexOf('\n\n')) >= 0; buf = buf.slice(i + 2)) queue.push(buf.slice(0, i + 2));
        kick();
      });
      ur.on('end', () => { if (buf) queue.push(buf); ended = true; kick(); });
    });
    fwd.on('error', () => res.destroy());
    req.pipe(fwd);
  });
  return new Promise((resolve) => proxy.listen(0, '127.0.0.1', () => resolve(proxy)));
}

const docA = 'Tom lives in a small house near the river. Every morning he walks along the water with his old grey cat, ' +
  'and they watch the boats go by until the sun is high.';
const docB = 'Anna has a big brown dog called Max. Max likes to run in the park and to dig holes in the garden, ' +
  'and Anna laughs when he comes home covered in mud.';

// the reuse panel's numbers for the n-th assistant message (0-based)
async function reuseOf(page, n) {
  const r = page.locator('li.msg.assistant').nth(n).locator('.reuse');
  await r.waitFor();
  return r.evaluate((e) => Object.fromEntries(Object.entries(e.dataset).map(([k, v]) => [k, Number(v)])));
}

async function sendAndWait(page, text, n) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
  const msg = page.locator('li.msg.assistant').nth(n);
  await msg.waitFor();
  await page.waitForFunction((i) => {
    const m = document.querySelectorAll('li.msg.assistant')[i];
    return m && m.dataset.state !== 'streaming';
  }, n, { timeout: 30_000 });
  assert.equal(await msg.getAttribute('data-state'), 'done', `reply ${n}: ${await msg.innerText()}`);
  return msg;
}

test('the web page chats, streams, shows KV reuse and tool calls', async () => {
  const proxy = await startProxy();
  const base = `http://127.0.0.1:${proxy.address().port}`;
  const browser = await chromium.launch({
    executablePath, headless: true, timeout: 30_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 } });
    const foreign = [];
    await context.route('**/*', (route) => {
      const u = route.request().url();
      if (u.startsWith(base + '/')) return route.continue();
      foreign.push(u);
      return route.abort();
    });
    const page = await context.newPage();
    const bodies = [];   // what the page sent to /v1/chat/completions
    page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData())); });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) errors.push(m.text()); });

    // the page is public; the API asks for the key, and the page asks the user for it
    const resp = await page.goto(base + '/');
    assert.equal(resp.status(), 200);
    assert.match(resp.headers()['content-type'], /^text\/html/);
    await page.locator('#keybar').waitFor({ state: 'visible' });
    assert.equal(await page.textContent('#conn'), 'API key needed');
    await page.fill('#api-key', 'wrong-key');
    await page.click('#key-form button[type=submit]');
    await page.waitForFunction(() => document.getElementById('key-msg').textContent.includes('refused'));
    await page.fill('#api-key', key);
    await page.click('#key-form button[type=submit]');
    await page.waitForSelector('body[data-ready="1"]');
    assert.ok(await page.locator('#keybar').isHidden());
    assert.deepEqual(await page.$$eval('#model option', (o) => o.map((x) => x.value)), [process.env.REPRISE_MODEL || 'stories260K']);

    // settings: greedy, short replies; two documents
    await page.fill('#temperature', '0');
    await page.fill('#max_tokens', '24');
    await page.fill('#seed', '7');
    for (const d of [docA, docB]) {
      await page.fill('#doc-new', d);
      await page.click('#doc-add');
    }
    assert.equal(await page.locator('#docs li').count(), 2);

    // 1: a streamed reply, seen while it streams (its events spaced by the proxy); what the page shows is recorded
    // at every change
    spacing = 120;
    await page.evaluate(() => {
      window.seen = [];
      new MutationObserver(() => {
        const m = document.querySelector('li.msg.assistant');
        const c = m && m.querySelector('.content');
        if (m) window.seen.push({ state: m.dataset.state, len: c ? c.textContent.length : 0 });
      }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true, attributes: true });
    });
    const first = await sendAndWait(page, 'Who has a dog?', 0);
    spacing = 0;
    const text1 = await first.locator('.content').innerText();
    assert.ok(text1.trim().length > 0, 'the reply has text');
    const events = Number(await first.getAttribute('data-events')), chunks = Number(await first.getAttribute('data-chunks'));
    const reads = Number(await first.getAttribute('data-reads'));
    console.log(`first reply: ${events} SSE events, ${chunks} with content, in ${reads} reads: ${JSON.stringify(text1)}`);
    assert.ok(events >= 3 && chunks >= 1, `the reply came as a stream (${events} events, ${chunks} with content)`);
    const seen = await page.evaluate(() => window.seen);
    assert.ok(seen.some((x) => x.state === 'streaming' && x.len > 0), 'text shown while the reply was still streaming');
    assert.ok(seen.some((x) => x.state === 'done'), 'then the reply was complete');
    const ttft = Number(await first.locator('.meta .ttft').getAttribute('data-ms'));
    assert.ok(ttft > 0, `TTFT measured in the page: ${ttft} ms`);
    const r1 = await reuseOf(page, 0);
    assert.ok(r1.prompt > 0);
    assert.equal(r1.exact + r1.approx + r1.rerotated + r1.recomputed + r1.computed, r1.prompt, 'the bar adds up to the prompt');
    assert.equal(r1.reused, 0, 'a fresh server has nothing to reuse');

    // the settings went into the request
    const sent1 = bodies[0];
    assert.equal(sent1.stream, true);
    assert.deepEqual(sent1.stream_options, { include_usage: true });
    assert.equal(sent1.model, process.env.REPRISE_MODEL || 'stories260K');
    assert.deepEqual([sent1.temperature, sent1.top_p, sent1.top_k, sent1.max_tokens, sent1.seed], [0, 0.95, 40, 24, 7]);
    assert.deepEqual(sent1.reprise_documents, [docA, docB]);
    assert.deepEqual(sent1.messages, [{ role: 'user', content: 'Who has a dog?' }]);

    // 2: the documents reordered, the conversation continued: its documents are reused where they moved
    await page.click('button[aria-label="Move document 2 up"]');
    assert.match(await page.locator('#docs li').first().innerText(), /Anna/);
    await sendAndWait(page, 'And who has a cat?', 1);
    const r2 = await reuseOf(page, 1);
    assert.deepEqual(bodies[1].reprise_documents, [docB, docA]);
    assert.deepEqual(bodies[1].messages.map((x) => x.role), ['user', 'assistant', 'user'], 'the history is sent');
    assert.equal(bodies[1].messages[1].content, text1);
    console.log('reuse of the second request:', JSON.stringify(r2));
    assert.ok(r2.reused > 0, 'reused tokens > 0');
    assert.ok(r2.rerotated > 0, 'the moved documents were re-rotated');
    assert.equal(r2.exact + r2.approx + r2.rerotated + r2.recomputed + r2.computed, r2.prompt, 'the bar adds up to the prompt');
    assert.ok(r2.exact > 0, 'the prefix before the documents was reused exactly');
    assert.equal(r2.cached, r2.exact, 'cached_tokens: only the exactly reused tokens (docs/server.md)');
    const summary = await page.locator('li.msg.assistant').nth(1).locator('.reuse-summary').innerText();
    assert.match(summary, new RegExp(`^KV reuse: ${r2.reused} of ${r2.prompt} prompt tokens reused \\(${r2.exact} exactly`));
    assert.match(await page.locator('li.msg.assistant').nth(1).locator('.docs-used').innerText(), /sent before, moved/);
    const bar = page.locator('li.msg.assistant').nth(1).locator('.bar span');
    assert.ok(await bar.count() >= 2, 'the bar shows at least two kinds of tokens');

    if (shot) await page.screenshot({ path: shot });

    // 3: in a new chat without the documents (the model's context is 512 tokens), a forced tool call is shown as one
    await page.click('#new-chat');
    assert.equal(await page.locator('#log li').count(), 0);
    for (let i = 0; i < 2; i++) await page.click('button[aria-label="Remove document 1"]');
    await page.fill('#tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather', description: 'Current weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }]));
    await page.selectOption('#tool-choice', 'fn:get_weather');
    const third = await sendAndWait(page, 'What is the weather in Paris?', 0);
    const call = third.locator('.call');
    await call.waitFor();
    assert.equal(await call.locator('.name').innerText(), 'get_weather');
    assert.equal(typeof JSON.parse(await call.locator('pre').innerText()), 'object');
    assert.ok(await call.locator('form input').isVisible(), 'a form for the tool result');
    const sent3 = bodies[2];
    assert.deepEqual(sent3.tool_choice, { type: 'function', function: { name: 'get_weather' } });
    assert.equal(sent3.tools[0].function.name, 'get_weather');
    assert.equal(sent3.reprise_documents, undefined, 'no documents left');

    // 4: the tool's result goes back as a tool message after the call, and the model answers
    await call.locator('form input').fill('sunny, 21 C');
    await call.locator('form button').click();
    await page.locator('li.msg.tool').waitFor();
    await page.waitForFunction(() => {
      const m = document.querySelectorAll('li.msg.assistant');
      return m.length === 2 && m[1].dataset.state !== 'streaming';
    }, null, { timeout: 30_000 });
    assert.equal(await page.locator('li.msg.assistant').nth(1).getAttribute('data-state'), 'done');
    const sent4 = bodies[3].messages;
    const callId = sent4.at(-2).tool_calls[0].id;
    assert.deepEqual(sent4.map((x) => x.role), ['user', 'assistant', 'tool']);
    assert.deepEqual(sent4.at(-1), { role: 'tool', content: 'sunny, 21 C', tool_call_id: callId });
    assert.equal(await call.locator('form').count(), 0, 'an answered call has no result form');

    // 5: a server session: the second turn carries the session's id and reuses the first turn's KV exactly
    await page.click('#new-chat');
    await page.fill('#tools', '');
    await page.check('#use-session');
    await sendAndWait(page, 'Once upon a time', 0);
    await sendAndWait(page, 'And then?', 1);
    const [s1, s2] = bodies.slice(4);
    assert.equal(s1.reprise_session, true);
    assert.match(s2.reprise_session, /^[0-9a-f]{32}$/);
    assert.equal(s2.tools, undefined);
    const r5 = await reuseOf(page, 1);
    assert.ok(r5.exact > 0 && r5.exact >= r5.prompt - r5.computed, `the session's KV reused exactly: ${JSON.stringify(r5)}`);
    assert.equal(bodies.length, 6);

    assert.deepEqual(foreign, [], 'no request left the server');
    assert.deepEqual(errors, [], 'no script errors');
  } finally {
    await browser.close();
    proxy.close();
  }
});
