/**
 * Writes `packages/loop/run-config.schema.json`, the JSON Schema of a run config file (what editors
 * complete), from the zod schema the loop validates with. A test of @vime/loop fails while the committed
 * file differs: `node --import tsx --conditions=@vime/source scripts/run-config-schema.ts`.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runConfigJsonSchema } from '@vime/loop';

const path = fileURLToPath(new URL('../packages/loop/run-config.schema.json', import.meta.url));
writeFileSync(path, `${JSON.stringify(runConfigJsonSchema(), null, 2)}\n`);
console.log(`wrote ${path}`);
