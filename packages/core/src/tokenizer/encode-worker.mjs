// Worker thread of `EncodePool` (encode-pool.ts): builds the model's tokenizer once from `workerData`,
// then encodes text pieces (already split at added tokens) into ids, so long inputs never hold the main
// event loop. Plain JavaScript, so source checkouts and the build run the same file without a loader.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from '@huggingface/tokenizers';

const tokenizer = new Tokenizer(JSON.parse(workerData.tokenizerJson), workerData.config);

parentPort.on('message', ({ id, pieces }) => {
  const ids = pieces.map((p) => Int32Array.from(tokenizer.encode(p, { add_special_tokens: false }).ids));
  parentPort.postMessage(
    { id, ids },
    ids.map((a) => a.buffer),
  );
});
