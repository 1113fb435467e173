// `vime-sandbox` answers a user's mistakes with the flag named, exit 2 and no stack trace, through the bin.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const cli = fileURLToPath(new URL('./cli.ts', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'vime-sandbox-cli-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function sandboxCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', '--conditions=@vime/source', cli, ...args],
      { cwd: repo, timeout: 60_000, killSignal: 'SIGKILL' },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
    );
  });
}

const STACK = /^\s+at .+[:(]|\w+Error \[ERR_/m;

describe('vime-sandbox CLI', () => {
  it('refuses bad usage with exit 2, the flag named, and no stack trace', async () => {
    const cases: Array<[string[], string]> = [
      [['reap', '--bogus'], "vime-sandbox: Unknown option '--bogus'; see `vime-sandbox reap --help`"],
      [['reap', '--run', 'r1', '--root', root, '--bogus=1'], "Unknown option '--bogus'"],
      [['--bogus', 'reap'], "Unknown option '--bogus'"],
      [['reap', '--run'], '--run needs a value'],
      [
        ['reap', '--run', '--dry-run'],
        '--run needs a value; for a value that starts with a dash write --run=VALUE',
      ],
      [['reap', '--run='], '--run needs a run id'],
      [['reap', '--older-than', 'soon'], '--older-than: "soon" is not a duration'],
      [['reap', '--run', 'r1', 'extra'], 'unexpected argument "extra"'],
      [['reap-all', '--run', 'r1'], 'unknown command "reap-all"; commands: reap'],
      [['raep', '--run', 'r1'], 'unknown command "raep" (did you mean "reap"?)'],
      [['reap', '--older-then', '1h'], `Unknown option '--older-then' (did you mean "--older-than"?)`],
      [['reap', 'run', 'r1'], 'unexpected argument "run" (did you mean "--run"?)'],
      [['reap', '--run', 'r1', '--root', root, '--docker-socket', join(root, 'no.sock')], '--docker-socket'],
    ];
    const results = await Promise.all(cases.map(([args]) => sandboxCli(args)));
    results.forEach((r, i) => {
      const [args, message] = cases[i]!;
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr, args.join(' ')).toContain(message);
      expect(r.stderr, args.join(' ')).not.toMatch(STACK);
      expect(r.stderr.trimEnd().split('\n'), `${args.join(' ')}: one line`).toHaveLength(1);
      expect(r.stdout, args.join(' ')).toBe('');
    });
  });

  it('answers --help anywhere on the line', async () => {
    const results = await Promise.all(
      [['--help'], ['reap', '-h'], ['reap', '--bogus', '--help']].map((args) => sandboxCli(args)),
    );
    for (const r of results) {
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^Usage: vime-sandbox reap/);
    }
  });
});
