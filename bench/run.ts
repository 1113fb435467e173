/** `pnpm bench [name…]`: runs every `bench/*.bench.ts` (or the named ones), prints their tables as markdown,
 * and writes `bench/results/<name>.json`. Exits 1 when a target check fails. */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type Bench, renderTable } from './harness.js';

const here = dirname(fileURLToPath(import.meta.url));
// Names pick benches; from the first flag on (`pnpm bench fleet --rollouts 2048`), the arguments are
// left to the benches that read them.
const args = process.argv.slice(2).filter((a) => a !== '--');
const firstFlag = args.findIndex((a) => a.startsWith('-'));
const wanted = firstFlag < 0 ? args : args.slice(0, firstFlag);
const files = readdirSync(here)
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => wanted.length === 0 || wanted.includes(f.replace('.bench.ts', '')))
  .sort();
if (files.length === 0) {
  console.error(`no benchmark matches ${wanted.join(', ')}`);
  process.exit(2);
}
mkdirSync(join(here, 'results'), { recursive: true });
let failed = 0;
for (const file of files) {
  const bench = (await import(pathToFileURL(join(here, file)).href)).default as Bench;
  console.log(`\n## ${bench.name}: ${bench.description}\n`);
  const tables = await bench.run();
  for (const t of tables) {
    console.log(`${renderTable(t)}\n`);
    failed += (t.checks ?? []).filter((c) => !c.ok).length;
  }
  writeFileSync(
    join(here, 'results', `${bench.name}.json`),
    `${JSON.stringify({ date: new Date().toISOString(), tables }, null, 2)}\n`,
  );
}
process.exit(failed > 0 ? 1 : 0);
