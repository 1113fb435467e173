/** `vime skypilot render --out DIR`: the Job Group and volume YAML, checked before they are written. */
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { type Command, EXIT, ensureDirectory, parseFlags, pathError } from '@vime/core/utils';
import { renderJobGroup, renderVolume } from '../../skypilot/render.js';
import { formatProblem, validateSkyPilotYaml } from '../../skypilot/validate.js';
import { PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';

export const renderCommand: Command = {
  name: 'skypilot render',
  synopsis: 'skypilot render',
  summary: 'write DIR/job-group.yaml and DIR/volume.yaml',
  help: `Usage: vime skypilot render [options] --out DIR

Write DIR/job-group.yaml (header, engine jobs, trainer) and DIR/volume.yaml, checked against SkyPilot's
loader rules. Launch with: sky volumes apply DIR/volume.yaml && sky jobs launch -n NAME DIR/job-group.yaml

  --out DIR   output directory (created if missing)

${PLAN_HELP}`,
  async run(args, io) {
    const { values } = parseFlags(
      'vime skypilot render',
      args,
      { ...PLAN_OPTIONS, out: { type: 'string', short: 'o' } },
      { maxPositionals: 0 },
    );
    if (!values.out) throw new ConfigError('--out DIR is required (where job-group.yaml and volume.yaml go)');
    const out = values.out;
    const plan = await planFrom(values, io);
    const files = {
      'job-group.yaml': renderJobGroup(plan.jobGroup),
      'volume.yaml': renderVolume(plan.volume),
    };
    let errors = 0;
    for (const [name, text] of Object.entries(files)) {
      const problems = validateSkyPilotYaml(text).problems;
      for (const p of problems) io.stderr(`${name}: ${formatProblem(p)}\n`);
      errors += problems.filter((p) => p.severity === 'error').length;
    }
    if (errors) return EXIT.checks;
    await ensureDirectory(out, '--out', { cwd: io.cwd });
    for (const [name, text] of Object.entries(files)) {
      await writeFile(resolve(io.cwd, out, name), text).catch((error: unknown) => {
        throw pathError(error, '--out', out, `write ${name} there`);
      });
    }
    io.stdout(
      `wrote ${join(out, 'job-group.yaml')} (${plan.engineJobs.length} engine(s): ${plan.engineJobs.join(', ')}) and ${join(out, 'volume.yaml')}\n`,
    );
    io.stdout(
      `next: sky volumes apply ${join(out, 'volume.yaml')} && sky jobs launch -n ${plan.jobGroup.name} ${join(out, 'job-group.yaml')}${plan.jobGroup.trainer.secrets.map((s) => ` --secret ${s}`).join('')}\n`,
    );
    return EXIT.ok;
  },
};
