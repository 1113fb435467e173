/**
 * A producer process of the lock race test (`lock.int.test.ts`). Prints `ready`, waits for a line on
 * stdin (so all racers start together), then tries to open the queue as its producer once:
 *   `locked <code>` when it may not, else `open`, then `ack <key>` for each of `<count>` appends as it
 *   resolves, then holds the queue `<holdMs>` and prints `closed` after closing it.
 * Usage: queue-lock.ts <dir> <name> <count> <holdMs>
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createSample } from '../sample.js';
import { QueueError } from '../queue/format.js';
import { SampleQueue } from '../queue/queue.js';

const [dir, name, count, holdMs] = process.argv.slice(2);
if (!dir || !name) {
  process.stderr.write('usage: queue-lock.ts <dir> <name> <count> <holdMs>\n');
  process.exit(2);
}
const say = (line: string) => process.stdout.write(`${line}\n`);
say('ready');
await new Promise((resolve) => process.stdin.once('data', resolve));
process.stdin.pause();
let queue: SampleQueue;
try {
  queue = await SampleQueue.open(dir, { mode: 'producer' });
} catch (error) {
  if (error instanceof QueueError) {
    say(`locked ${error.code}`);
    process.exit(0);
  }
  throw error;
}
say('open');
for (let i = 0; i < Number(count); i++) {
  const key = `${name}-${i}`;
  await queue.append(key, [createSample({ tokens: [i, 1, 2, 3], response_length: 1 })]);
  say(`ack ${key}`);
}
await sleep(Number(holdMs));
await queue.close();
say('closed');
