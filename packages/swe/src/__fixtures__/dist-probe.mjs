// Run by plain node (no tsx, no source condition), so `@vime/swe` is the built dist/: the probe flags a
// module shadowing the standard library only if the bundle finds its Python file. Prints one JSON line.
import { localProvider } from '@vime/sandbox';
import { sandboxHacks } from '@vime/swe';

const sandbox = await localProvider().create({ workdir: '/testbed' });
try {
  await sandbox.writeFile('json.py', 'import sys\n');
  const flags = await sandboxHacks(sandbox, { added: ['json.py'], changed: [] });
  console.log(JSON.stringify({ module: import.meta.resolve('@vime/swe'), flags }));
} finally {
  await sandbox.terminate();
}
