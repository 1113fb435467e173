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

parentPort.on('message', ({ id, pieces, plain: plainPieces }) => {
  const ids = pieces.map((p, i) =>
    Int32Array.from((plainPieces[i] ? plain() : tokenizer).encode(p, { add_special_tokens: false }).ids),
  );
  parentPort.postMessage(
    { id, ids },
    ids.map((a) => a.buffer),
  );
});
