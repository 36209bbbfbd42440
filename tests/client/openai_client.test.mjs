// openai_client.test.mjs — the official `openai` npm client against `reprise serve` (REPRISE_URL, REPRISE_KEY):
// models, chat, streaming, a tool-call round trip (non-streamed and streamed), completions, errors, extensions.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.REPRISE_URL;
const apiKey = process.env.REPRISE_KEY ?? 'unused';
if (!baseURL) throw new Error('REPRISE_URL is not set (e.g. http://127.0.0.1:8080/v1)');

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const model = 'stories260K';

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 } }, required: ['city'] },
  },
}];

test('models.list names the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, model);
  assert.equal(models[0].object, 'model');
});

test('chat completion with usage and cached tokens', async () => {
  const req = { model, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 12, temperature: 0 };
  const a = await client.chat.completions.create(req);
  assert.equal(a.object, 'chat.completion');
  assert.equal(a.choices[0].message.role, 'assistant');
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(a.choices[0].finish_reason));
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
  const b = await client.chat.completions.create(req);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);   // greedy is deterministic
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= b.usage.prompt_tokens - 1);   // the prompt's KV is reused
});

test('streaming adds up to the whole reply', async () => {
  const req = { model, messages: [{ role: 'user', content: 'Tom had a red ball' }], max_tokens: 16, temperature: 0 };
  const whole = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta?.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(chunks >= 3);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.ok(usage && usage.completion_tokens > 0);
});

test('tool-call round trip', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const first = await client.chat.completions.create({
    model, messages, tools, max_tokens: 160, temperature: 0,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.match(call.id, /^call_/);
  assert.equal(typeof JSON.parse(call.function.arguments), 'object');
  // run the "tool" and send its result back with the assistant turn
  messages.push(choice.message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ city: 'Paris', sky: 'sunny' }) });
  const second = await client.chat.completions.create({ model, messages, tools, max_tokens: 12, temperature: 0 });
  assert.equal(second.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
});

test('tool call streamed as tool_calls deltas', async () => {
  const stream = await client.chat.completions.create({
    model, tools, max_tokens: 160, temperature: 0.5, seed: 11, stream: true,
    messages: [{ role: 'user', content: 'Weather in Rome?' }],
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const d of c.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: '', name: '', args: '' };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].name += d.function.name;
      if (d.function?.arguments) calls[d.index].args += d.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.equal(typeof JSON.parse(calls[0].args), 'object');
});

test('legacy completions', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.ok(r.choices[0].text.length > 0);
});

test('n choices share one prompt', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A cat' }], n: 3, max_tokens: 6, temperature: 0.8, seed: 5,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) assert.equal(typeof c.message.content, 'string');
  assert.ok(r.usage.completion_tokens >= 3);
});

test('errors map to the client error classes', async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], n: 17 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n');
  const bad = new OpenAI({ baseURL, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('reprise_session keeps the conversation resident', async () => {
  const messages = [{ role: 'system', content: 'You tell short stories.' }, { role: 'user', content: 'A dog' }];
  const a = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, reprise_session: true });
  assert.match(a.reprise_session, /^[0-9a-f]{32}$/);
  messages.push(a.choices[0].message, { role: 'user', content: 'And then?' });
  const b = await client.chat.completions.create({
    model, messages, max_tokens: 8, temperature: 0, reprise_session: a.reprise_session,
  });
  assert.equal(b.reprise_session, a.reprise_session);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1);
});
