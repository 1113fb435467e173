/**
 * `pnpm bench fleet` as a program of its own, the entry `fleet-bundle.sh` bundles for a machine without
 * Node or network: runs the bench, prints its tables and writes them to `fleet-results.json` in the
 * working folder. Exits 1 when a check fails.
 */
import { writeFileSync } from 'node:fs';
import bench from './fleet.bench.js';
import { renderTable } from './harness.js';

const tables = await bench.run();
console.log(`\n## ${bench.name}: ${bench.description}\n`);
for (const t of tables) console.log(`${renderTable(t)}\n`);
writeFileSync(
  'fleet-results.json',
  `${JSON.stringify({ date: new Date().toISOString(), tables }, null, 2)}\n`,
);
process.exit(tables.some((t) => (t.checks ?? []).some((c) => !c.ok)) ? 1 : 0);
