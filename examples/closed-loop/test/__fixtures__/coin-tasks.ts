/**
 * The CPU miniature's tasks: SWE-smith rows on the offline task set's repository whose hidden test is a
 * fair coin (`assert random.random() < 0.5`). A random tiny model never solves a real task, so every
 * reward would be 0 and every GRPO advantage 0 (no gradient, no weight change); the coin gives a group
 * of rollouts mixed rewards through the real grading path (fresh sandbox, the hidden test restored,
 * pytest's verdict). Labelled as such wherever the test reports it.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const COIN_TEST = 'import random\n\n\ndef test_coin():\n    assert random.random() < 0.5\n';

/** Write `<dir>/instances.jsonl` + `environments.json` with `count` coin tasks; returns the JSONL path. */
export function writeCoinTasks(offlineDir: string, dir: string, count: number): string {
  const env = JSON.parse(readFileSync(join(offlineDir, 'environments.json'), 'utf8')) as {
    version: 1;
    environments: Record<string, { template: string }>;
  };
  const [image, entry] = Object.entries(env.environments)[0]!;
  const template = join(dir, 'template');
  mkdirSync(dir, { recursive: true });
  cpSync(join(offlineDir, entry.template), template, { recursive: true });
  const base = JSON.parse(readFileSync(join(offlineDir, 'instances.jsonl'), 'utf8').split('\n')[0]!) as Record<
    string,
    unknown
  >;
  const prefix = String(base.instance_id).split('.').slice(0, 2).join('.');
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', template, ...args], {
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 'Vime Tests',
        GIT_AUTHOR_EMAIL: 'tests@vime.invalid',
        GIT_COMMITTER_NAME: 'Vime Tests',
        GIT_COMMITTER_EMAIL: 'tests@vime.invalid',
        GIT_CONFIG_GLOBAL: '/dev/null',
      },
      encoding: 'utf8',
    });
  const rows: string[] = [];
  for (let i = 0; i < count; i++) {
    const id = `${prefix}.coin_flip__${String(i).padStart(4, '0')}`;
    git('checkout', '-q', '-f', 'main');
    git('checkout', '-q', '-b', id);
    writeFileSync(join(template, 'tests', 'test_coin.py'), COIN_TEST);
    git('add', 'tests/test_coin.py');
    git('commit', '-q', '-m', 'a fair coin as the hidden test');
    rows.push(
      JSON.stringify({
        ...base,
        instance_id: id,
        patch: '',
        FAIL_TO_PASS: ['tests/test_coin.py::test_coin'],
        PASS_TO_PASS: [],
        problem_statement: 'Make tests/test_coin.py pass.',
      }),
    );
  }
  git('checkout', '-q', '-f', 'main');
  writeFileSync(join(dir, 'instances.jsonl'), `${rows.join('\n')}\n`);
  writeFileSync(
    join(dir, 'environments.json'),
    `${JSON.stringify({ version: 1, environments: { [image]: { template } } }, null, 2)}\n`,
  );
  return join(dir, 'instances.jsonl');
}
