// logits.mjs — llama.cpp's next-token distributions at chosen positions of one token sequence, the part the logit
// extractors share (arch_logits.mjs, logprob_golden.mjs, bench/parity/parity.mjs).
//
// The model comes from common.mjs's loadModel; nextTokenProbs creates a context for one sequence, evaluates the
// token ids in it with node-llama-cpp's controlledEvaluate (llama_decode in batches), asks for the next-token
// probabilities at each wanted position, and disposes of the context. With the default sampler options
// (temperature 1, no top-k / top-p / min-p) the probabilities are the softmax of llama.cpp's raw logits, so their
// logarithms (logProbs) are the logits up to a constant: a log-softmax.

// temperature 1, nothing truncated: every token's probability, softmax of the raw logits
export const FULL_DISTRIBUTION = Object.freeze({ temperature: 1, topK: 0, topP: 1, minP: 0 });

// tokens: an array (or typed array) of ids, evaluated from position 0; positions: where the next-token
// distribution is wanted. context: node-llama-cpp's createContext options (batchSize defaults to 512, as
// Reprise); sampler: the generateNext options. Returns one Map (token id -> probability, most likely first)
// per position, in the order of `positions`; throws when llama.cpp gave none at a position.
export async function nextTokenProbs(model, tokens, positions, { context = {}, sampler = FULL_DISTRIBUTION } = {}) {
    const ctx = await model.createContext({ batchSize: 512, ...context });
    try {
        const seq = ctx.getSequence();
        const want = new Set(positions);
        const items = Array.from(tokens, (t, i) =>
            want.has(i) ? [t, { generateNext: { probabilities: true, options: sampler } }] : t);
        const res = await seq.controlledEvaluate(items);
        return positions.map((p) => {
            const pr = res[p]?.next?.probabilities;
            if (!pr) throw new Error(`llama.cpp gave no probabilities at position ${p}`);
            return pr;
        });
    } finally {
        await ctx.dispose();
    }
}

// A probability map as log-probabilities over the whole vocabulary (Float64Array of nVocab): tokens absent from
// the map, or whose probability underflowed to 0, are -Infinity.
export function logProbs(map, nVocab) {
    const lp = new Float64Array(nVocab).fill(-Infinity);
    for (const [t, p] of map) lp[t] = p > 0 ? Math.log(p) : -Infinity;
    return lp;
}
