/** `vime skypilot validate FILE...`: SkyPilot YAML against SkyPilot's loader rules. */
import { ConfigError } from '@vime/core';
import { type Command, EXIT, oneOf, parseFlags, readTextFile } from '@vime/core/utils';
import { formatProblem, type SkyPilotYamlKind, validateSkyPilotYaml } from '../../skypilot/validate.js';

const KINDS: readonly SkyPilotYamlKind[] = ['task', 'job-group', 'pipeline', 'volume'];

export const validateCommand: Command = {
  name: 'skypilot validate',
  synopsis: 'skypilot validate FILE',
  summary: "check SkyPilot YAML against SkyPilot's loader rules",
  help: `Usage: vime skypilot validate FILE... [--kind task|job-group|pipeline|volume]

Check SkyPilot YAML files; prints every problem with its document and path. Exits 3 on errors.`,
  async run(args, io) {
    const { values, positionals } = parseFlags('vime skypilot validate', args, { kind: { type: 'string' } });
    if (!positionals.length) throw new ConfigError('name at least one YAML file to validate');
    const kind = oneOf(values.kind, '--kind', KINDS);
    // Read every file first, so a missing one fails before any report is printed.
    const texts = await Promise.all(positionals.map((file) => readTextFile(file, 'file', { cwd: io.cwd })));
    let errors = 0;
    positionals.forEach((file, i) => {
      const result = validateSkyPilotYaml(texts[i]!, kind ? { kind } : {});
      for (const p of result.problems) io.stdout(`${file}: ${formatProblem(p)}\n`);
      if (result.ok) io.stdout(`${file}: ok (${result.kind})\n`);
      else errors++;
    });
    return errors ? EXIT.checks : EXIT.ok;
  },
};
