import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { renderJobGroup, renderVolume, resolvePlan, validateSkyPilotYaml } from '@vime/launch';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const docs = (text: string) => parseAllDocuments(text).map((d) => d.toJS() as Record<string, unknown>);
const scripts = ['engine-setup.sh', 'engine-run.sh', 'trainer-setup.sh', 'trainer-run.sh'];

describe('slime bridge launch configs', () => {
  it.each([1, 2, 3])(
    '%i-engine config renders the reference Job Group, running the bridge scripts',
    async (n) => {
      const config = parseYaml(await readFile(here(`../launch/${n}-engine.yaml`), 'utf8'));
      const plan = resolvePlan(config, { env: {} });
      const text = renderJobGroup(plan.jobGroup);
      expect(validateSkyPilotYaml(text).problems).toEqual([]);
      const ours = docs(text);
      const reference = docs(
        await readFile(
          here(`../../../packages/launch/src/__fixtures__/coding-agent/${n}-engine.yaml`),
          'utf8',
        ),
      );
      // The same Job Group as the reference example but for the commands each job runs.
      const withoutCommands = (d: Record<string, unknown>) => ({ ...d, setup: undefined, run: undefined });
      expect(ours.map(withoutCommands)).toEqual(reference.map(withoutCommands));
      for (const job of ours.slice(1)) {
        for (const field of ['setup', 'run'] as const) {
          const script = /^bash examples\/slime-bridge\/launch\/(\S+)$/.exec(String(job[field]))?.[1];
          expect(scripts).toContain(script);
        }
      }
      expect(validateSkyPilotYaml(renderVolume(plan.volume)).problems).toEqual([]);
    },
  );

  it('scripts are valid bash', async () => {
    const { execFileSync } = await import('node:child_process');
    for (const s of scripts) execFileSync('bash', ['-n', here(`../launch/${s}`)]);
  });
});
