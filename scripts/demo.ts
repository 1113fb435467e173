/** A small demo: builds a batch of slime samples, encodes it, decodes it back and prints it. */
import { createSample, decodeSamples, encodeSamples } from '@vime/core';

const samples = [0, 1, 2, 3].map((i) =>
  createSample({
    group_index: 0,
    index: i,
    rollout_id: i,
    prompt: 'Fix the failing test in utils.py',
    tokens: [151644, 872, 198, 13, 42, 7, 8, 9],
    response: 'patched',
    response_length: 4,
    loss_mask: [1, 1, 0, 1],
    rollout_log_probs: [-0.25, -1.5, 0, -0.125],
    reward: i % 2,
    status: 'completed',
    metadata: { instance_id: `demo__repo.${i}` },
  }),
);
const bytes = encodeSamples(samples);
const back = decodeSamples(bytes);
console.log(`encoded ${samples.length} samples into ${bytes.length} bytes of msgpack`);
for (const s of back) {
  console.log(
    `  #${s.index} group=${s.group_index} reward=${s.reward} status=${s.status} tokens=${s.tokens.length} mask=[${s.loss_mask?.join(',')}]`,
  );
}
