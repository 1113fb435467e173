// Worker thread of `EncodePool` (encode-pool.ts): builds the model's tokenizer once from `workerData`,
// then encodes text pieces (already split at added tokens) into ids, so long inputs never hold the main
// event loop. Plain JavaScript, so source checkouts and the build run the same file without a loader.
import { parentPort, workerData } from 'node:worker_threads';
import { Tokenizer } from '@huggingface/tokenizers';

const json = JSON.parse(workerData.tokenizerJson);
const tokenizer = new Tokenizer(json, workerData.config);
let plainTokenizer;
/** Without the special added tokens: their text in a `plain` piece encodes as plain text. */
const plain = () => {
  plainTokenizer ??= new Tokenizer(
    { ...json, added_tokens: json.added_tokens.filter((t) => !workerData.specials.includes(t.content)) },
    workerData.config,
  );
  return plainTokenizer;
};

// All pieces' ids go back in one buffer with their end offsets: transferring one buffer per piece costs
// the receiving thread seconds for 100k pieces.
parentPort.on('message', ({ id, pieces, plain: plainPieces }) => {
  const parts = pieces.map(
    (p, i) => (plainPieces[i] ? plain() : tokenizer).encode(p, { add_special_tokens: false }).ids,
  );
  const ends = new Uint32Array(parts.length);
  let total = 0;
  for (let i = 0; i < parts.length; i++) ends[i] = total += parts[i].length;
  const flat = new Int32Array(total);
  for (let i = 0; i < parts.length; i++) flat.set(parts[i], i === 0 ? 0 : ends[i - 1]);
  parentPort.postMessage({ id, flat, ends }, [flat.buffer, ends.buffer]);
});
