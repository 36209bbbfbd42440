// structured.test.mjs — what agent and RAG frameworks ask of an OpenAI server, through the official `openai` npm
// client against `reprise serve` (REPRISE_URL, REPRISE_KEY; REPRISE_SETUP names the server's configuration):
// chat.completions.parse() with a zod schema, tool calls with `strict: true` (named and required), logprobs (plain
// and streamed), n = 3, embeddings. Every structured output is validated against its JSON Schema by ajv, so a
// reply that parses but breaks its schema fails. Run on a synthetic model with the real Llama 3 vocabulary and
// chat template at --parallel 1, --parallel 4, and --parallel 4 with a draft model (tests/cli/openai_client.sh).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv from 'ajv';

const baseURL = process.env.REPRISE_URL;
const apiKey = process.env.REPRISE_KEY ?? 'unused';
const setup = process.env.REPRISE_SETUP ?? '?';
if (!baseURL) throw new Error('REPRISE_URL is not set (e.g. http://127.0.0.1:8080/v1)');

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const model = 'synth';
const ajv = new Ajv({ strict: false, allErrors: true });

function valid(schema, value, what) {
  const check = ajv.compile(schema);
  assert.ok(check(value), `${setup}: ${what} breaks its schema: ${ajv.errorsText(check.errors)}\n${JSON.stringify(value)}`);
}

const Person = z.object({
  name: z.enum(['Ann', 'Bob', 'Eve']),
  age: z.number().int(),
  member: z.boolean(),
  tags: z.array(z.enum(['a', 'b', 'c'])).max(3),
});

test(`${setup}: parse() with a zod schema gives a parsed object valid against the schema`, async () => {
  const format = zodResponseFormat(Person, 'person');
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.parse({
      model, messages: [{ role: 'user', content: 'Describe a person.' }], response_format: format,
      max_tokens: 400, temperature: 1, seed,
    });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(m.parsed, 'parse() gave no parsed object');
    valid(format.json_schema.schema, m.parsed, 'the parsed reply');
    assert.deepEqual(Person.parse(m.parsed), m.parsed);
  }
});

const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city', strict: true,
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 24 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'], additionalProperties: false,
    },
  },
};
const clock = {
  type: 'function',
  function: {
    name: 'get_time', description: 'The time in a zone', strict: true,
    parameters: {
      type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET', 'PST'] }, hours24: { type: 'boolean' } },
      required: ['zone', 'hours24'], additionalProperties: false,
    },
  },
};
const byName = { get_weather: weather, get_time: clock };

test(`${setup}: strict tool calls, named and required, carry arguments valid against their schemas`, async () => {
  const seen = new Set();
  for (const [i, choice] of ['required', 'required', 'required', { type: 'function', function: { name: 'get_time' } }].entries()) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'What is the weather in Paris, and the time?' }], tools: [weather, clock],
      tool_choice: choice, max_tokens: 400, temperature: 1, seed: 10 + i,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(byName[call.function.name], `unknown tool ${call.function.name}`);
    if (typeof choice === 'object') assert.equal(call.function.name, 'get_time');
    seen.add(call.function.name);
    valid(byName[call.function.name].function.parameters, JSON.parse(call.function.arguments), `${call.function.name}'s arguments`);
  }
  assert.ok(seen.size >= 1);
});

test(`${setup}: strict tools under tool_choice auto (the lazy grammar): a call that comes is valid, text stays text`, async () => {
  for (let i = 0; i < 3; i++) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'What is the weather in Paris?' }], tools: [weather, clock],
      tool_choice: 'auto', max_tokens: 48, temperature: 1, seed: 20 + i, parallel_tool_calls: false, user: 'client-test',
    });
    const c = r.choices[0];
    if (c.finish_reason === 'tool_calls') {
      for (const call of c.message.tool_calls) {
        assert.ok(byName[call.function.name], `unknown tool ${call.function.name}`);
        valid(byName[call.function.name].function.parameters, JSON.parse(call.function.arguments), `${call.function.name}'s arguments`);
      }
    } else {
      assert.equal(typeof c.message.content, 'string');
      assert.ok(['stop', 'length'].includes(c.finish_reason));
    }
  }
});

test(`${setup}: an unknown request field is a 400 naming it`, async () => {
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, temprature: 0.5 }),
    (e) => e.status === 400 && e.param === 'temprature' && /temprature/.test(e.message));
});

test(`${setup}: logprobs with top_logprobs, as log-probabilities of the chosen tokens`, async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 12, temperature: 0,
    logprobs: true, top_logprobs: 3,
  });
  const c = r.choices[0];
  const lp = c.logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  assert.equal(lp.map((t) => t.token).join(''), c.message.content);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    for (let k = 1; k < 3; k++) assert.ok(t.top_logprobs[k - 1].logprob >= t.top_logprobs[k].logprob);
    assert.ok(t.top_logprobs.reduce((s, a) => s + Math.exp(a.logprob), 0) <= 1 + 1e-4);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-4);
    assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
  }
});

test(`${setup}: streamed logprobs add up to the streamed text`, async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 16, temperature: 0.8, seed: 4,
    logprobs: true, top_logprobs: 2, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  const toks = [];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const ch = chunk.choices[0];
    if (!ch) continue;
    text += ch.delta?.content ?? '';
    for (const t of ch.logprobs?.content ?? []) {
      assert.equal(t.top_logprobs.length, 2);
      toks.push(t);
    }
  }
  assert.ok(usage);
  assert.equal(toks.length, usage.completion_tokens);
  assert.equal(toks.map((t) => t.token).join(''), text);
});

test(`${setup}: n = 3 choices, each its own reply, the prompt counted once`, async () => {
  const one = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A cat' }], max_tokens: 10, temperature: 1, seed: 7,
  });
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A cat' }], n: 3, max_tokens: 10, temperature: 1, seed: 7,
    logprobs: true,
  });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  let sum = 0;
  for (const c of r.choices) {
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.logprobs.content.length > 0, true);
    sum += c.logprobs.content.length;
  }
  assert.equal(r.usage.completion_tokens, sum);
  assert.ok(new Set(r.choices.map((c) => c.message.content)).size >= 2, 'three samples at temperature 1 were all equal');
  // n = 3 with a schema: every choice valid
  const format = zodResponseFormat(Person, 'person');
  const p = await client.chat.completions.parse({
    model, messages: [{ role: 'user', content: 'Describe a person.' }], n: 3, response_format: format,
    max_tokens: 400, temperature: 1, seed: 9,
  });
  assert.equal(p.choices.length, 3);
  for (const c of p.choices) valid(format.json_schema.schema, c.message.parsed, `choice ${c.index}`);
});

test(`${setup}: embeddings (the client's default base64 and floats) are unit vectors, one per input`, async () => {
  const inputs = ['The cat sat on the mat.', 'A dog ran in the park.', 'The cat sat on the mat.'];
  const r = await client.embeddings.create({ model, input: inputs });   // the client asks for base64 and decodes it
  assert.equal(r.data.length, 3);
  const dim = r.data[0].embedding.length;
  assert.ok(dim > 0);
  for (const [i, d] of r.data.entries()) {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, dim);
    const norm = Math.sqrt(d.embedding.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
  }
  const diff = (a, b) => Math.max(...a.map((x, k) => Math.abs(x - b[k])));
  assert.ok(diff(r.data[0].embedding, r.data[2].embedding) < 1e-5);   // the same text, the same vector
  assert.ok(diff(r.data[0].embedding, r.data[1].embedding) > 1e-3);
  const f = await client.embeddings.create({ model, input: inputs[0], encoding_format: 'float' });
  assert.ok(diff(f.data[0].embedding, r.data[0].embedding) < 1e-6);
  assert.ok(r.usage.prompt_tokens > 0);
});
