/** `vime launch check DIR`: a rendered Job Group refers only to scripts, modules, checkpoints and env vars that exist. */
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { type Command, EXIT, parseFlags } from '@vime/core/utils';
import { checkRenderedJobGroup } from '../../skypilot/check.js';

export const launchCheckCommand: Command = {
  name: 'launch check',
  synopsis: 'launch check DIR',
  summary: 'check a rendered Job Group against the repository its jobs run',
  help: `Usage: vime launch check DIR [--root REPO]

Walk DIR/job-group.yaml (from vime skypilot render --out DIR) against the repository its jobs run in
(REPO, default the current directory: SkyPilot syncs it as the jobs' workdir). Fails, naming the job and
the file, for every script or file a job runs that does not exist, every env var a job sets that nothing
it runs reads, every slime module.function flag whose function is not on the job's PYTHONPATH, and every
checkpoint slime loads that the trainer's setup does not provide. Exits 3 on problems.

  --root REPO   the repository checkout (default .)`,
  async run(args, io) {
    const { values, positionals } = parseFlags(
      'vime launch check',
      args,
      { root: { type: 'string' } },
      { maxPositionals: 1 },
    );
    const [dir] = positionals;
    if (!dir)
      throw new ConfigError(
        'name the rendered folder: vime launch check DIR (from vime skypilot render --out DIR)',
      );
    const root = resolve(io.cwd, values.root ?? '.');
    if (!existsSync(root) || !statSync(root).isDirectory())
      throw new ConfigError(
        `--root ${values.root}: not a folder; give the repository checkout the jobs run in`,
      );
    const full = resolve(io.cwd, dir);
    if (!existsSync(full))
      throw new ConfigError(`${dir} does not exist; render it with vime skypilot render --out ${dir}`);
    const report = checkRenderedJobGroup(full, root);
    for (const p of report.problems) io.stdout(`${dir}/job-group.yaml: ${p.job}: ${p.kind}: ${p.message}\n`);
    if (report.problems.length) return EXIT.checks;
    for (const job of report.jobs) {
      io.stdout(
        `${job.name}: ok (${job.files.length} files, ${Object.keys(job.envs).length} env vars, each read)\n`,
      );
    }
    return EXIT.ok;
  },
};
