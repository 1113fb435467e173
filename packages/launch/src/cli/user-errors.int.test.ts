// A user's mistakes get a clear message and exit 2, never a stack trace: through `main` (what the `vime`
// bin calls) and, for the cases that once hung or crashed the process, through the bin itself.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EXIT } from '@vime/core/utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type FakeRay, startFakeRay } from '../testing/ray.js';
import { main } from './main.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'vime-cli-errors-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function vime(args: string[], env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    cwd: dir,
  });
  return { code, stdout, stderr };
}

const STACK = /^\s+at .+[:(]/m;

/** Exit 2, one `vime:` message matching `message`, and no stack trace. */
function expectUsage(result: { code: number; stderr: string }, message: RegExp | string, what: string) {
  expect(result.code, `${what}: ${result.stderr}`).toBe(EXIT.usage);
  expect(result.stderr, what).not.toMatch(STACK);
  expect(result.stderr, what).toMatch(/^vime: /);
  if (typeof message === 'string') expect(result.stderr, what).toContain(message);
  else expect(result.stderr, what).toMatch(message);
}

describe('vime: malformed config files name the file, the line and the column', () => {
  const cases: Array<[file: string, text: string, line: number, column: number, reason: RegExp]> = [
    ['unquoted-key.json', '{\n  "engines": {count: 2}\n}\n', 2, 15, /Expected property name/],
    [
      'bad-literal.json',
      '{"engines": {"count": two}}',
      1,
      23,
      /^vime: [^\n]*: Unexpected token '\w' \(not valid JSON\)$/m,
    ],
    ['truncated.json', '{"engines": {"count": 2}', 1, 25, /Expected ',' or '}'/],
    ['trailing.json', '{"name": "x"}\n}\n', 2, 1, /Unexpected non-whitespace character after JSON/],
    ['empty.json', '', 1, 1, /Unexpected end of JSON input/],
    ['flow.yaml', 'engines:\n  count: [1\nname: x\n', 3, 1, /Flow sequence/],
    ['duplicate.yaml', 'name: a\nmode: sync\nname: b\n', 3, 1, /Map keys must be unique/],
    ['tab.yml', 'engines:\n\tcount: 2\n', 2, 1, /Tabs are not allowed/],
    ['compact.yaml', 'engines: count: 2\n', 1, 10, /Nested mappings are not allowed/],
    ['two-docs.yaml', 'name: a\n---\nname: b\n', 2, 1, /one YAML document/],
  ];
  it.each(cases)('%s', async (file, text, line, column, reason) => {
    await writeFile(join(dir, file), text);
    for (const command of [['plan'], ['slime', 'args'], ['skypilot', 'render', '--out', 'never']]) {
      const result = await vime([...command, '-c', file]);
      expectUsage(result, `vime: --config ${file}: line ${line}, column ${column}: `, command.join(' '));
      expect(result.stderr).toMatch(reason);
      expect(result.stdout).toBe('');
    }
    expect(existsSync(join(dir, 'never'))).toBe(false);
  });

  it('a config that is not a mapping, or not a file, says so', async () => {
    await writeFile(join(dir, 'list.yaml'), '- engines\n- 2\n');
    await mkdir(join(dir, 'a-dir'), { recursive: true });
    expectUsage(
      await vime(['plan', '-c', 'list.yaml']),
      /--config list\.yaml: expected a mapping .*array\(2\)/,
      'list',
    );
    expectUsage(await vime(['plan', '--config', 'a-dir']), '--config a-dir: cannot read it: EISDIR', 'dir');
    expectUsage(
      await vime(['plan', '-c', 'nope.yaml']),
      '--config nope.yaml: cannot read it: ENOENT',
      'missing',
    );
  });
});

describe('vime: messages name the flag that was given, not the option behind it', () => {
  it.each([
    [['plan', '--mode', 'fast'], /--mode: Invalid option: expected one of "sync"\|"async" \(got "fast"\)/],
    [['plan', '--engine-kind', 'tgi'], /--engine-kind: Invalid option: .*"sglang"\|"vllm" \(got "tgi"\)/],
    [['slime', 'args', '--engines', '65'], /--engines: Too big: .*64 \(got "65"\)/],
    [['plan', '--weight-mode', 'half'], /--weight-mode: Invalid option: .*\(got "half"\)/],
    [['engines', 'wait', 'http://127.0.0.1:9', '--timeout', 'soon'], /--timeout: "soon" is not a duration/],
    [['engines', 'wait', 'http://127.0.0.1:9', '--timeout=-5s'], /--timeout: "-5s" is not a duration/],
    [
      ['engines', 'wait', 'http://127.0.0.1:9', '--timeout', '-5s'],
      /--timeout needs a value; .* --timeout=VALUE/,
    ],
    [['slime', 'args', '--enignes', '2'], /Unknown option '--enignes' \(did you mean "--engines"\?\)/],
    [
      ['ray', 'status', '--token_file', 't'],
      /Unknown option '--token_file' \(did you mean "--token-file"\?\)/,
    ],
    [['engines', 'wait', 'http://127.0.0.1:9', '--kind', 'tgi'], /--kind must be sglang or vllm, got "tgi"/],
  ])('%j', async (args, message) => {
    const result = await vime(args);
    expectUsage(result, message, args.join(' '));
    expect(result.stderr).not.toMatch(/\bdeadline\b|engines\.kind|weights\.mode|\bmode: invalid/);
  });

  it('names the file for what came from it and the flag for what came from a flag', async () => {
    await writeFile(join(dir, 'typo.yaml'), 'engine: {count: 2}\nrollout: {batchSize: -1}\n');
    const result = await vime(['plan', '-c', 'typo.yaml', '--engine-kind', 'tgi']);
    expectUsage(
      result,
      /--config typo\.yaml: .*rollout\.batchSize: Too small.*Unrecognized key: "engine".*; --engine-kind: .*\(got "tgi"\)/,
      'mixed',
    );
  });

  it('points a mistyped command at the right one', async () => {
    expectUsage(await vime(['plna']), 'unknown command "plna" (did you mean "plan"?)', 'plna');
    expectUsage(await vime(['ray', 'statsu']), 'did you mean "ray status"?', 'ray statsu');
    expectUsage(await vime(['skypilot']), 'unknown command "skypilot"', 'skypilot');
  });

  it('a misspelled flag or command, or a bad value, is one line naming it and the closest right one', async () => {
    for (const [args, message] of [
      [
        ['plan', '--batch-sise', '4'],
        `Unknown option '--batch-sise' (did you mean "--batch-size"?); see \`vime plan --help\``,
      ],
      [
        ['skypilot', 'rendr', '--out', 'x'],
        'unknown command "skypilot rendr" (did you mean "skypilot render"?)',
      ],
      [['plan', '--tp', 'four'], '--tp expects a positive whole number, got "four"'],
      [['skypilot', 'validate', 'x.yaml', '--kind', 'jobgroup'], '(did you mean "job-group"?)'],
      [['--json', 'plna'], 'unknown command "plna" (did you mean "plan"?)'],
      [['plan', 'extra'], 'unexpected argument "extra"; see `vime plan --help`'],
    ] as const) {
      const result = await vime([...args]);
      expectUsage(result, message, args.join(' '));
      expect(result.stderr.trimEnd().split('\n'), `${args.join(' ')}: one line`).toHaveLength(1);
    }
  });

  it('answers --help before anything else on the line', async () => {
    for (const args of [
      ['plan', '--bogus', '--help'],
      ['skypilot', 'render', '-h', '--out'],
      ['ray', 'status', '--token-file', 'missing', '--help'],
      ['engines', 'wait', 'notaurl', '-h'],
    ]) {
      const result = await vime(args);
      expect(result.code, args.join(' ')).toBe(EXIT.ok);
      expect(result.stdout).toMatch(/^Usage: vime /);
    }
  });
});

describe('vime: files and directories that cannot be used', () => {
  it('skypilot validate on a missing file, a directory, or among good files, before printing anything', async () => {
    await writeFile(join(dir, 'ok.yaml'), 'name: x\nrun: echo hi\n');
    await mkdir(join(dir, 'yaml-dir'), { recursive: true });
    for (const files of [['missing.yaml'], ['ok.yaml', 'missing.yaml'], ['yaml-dir'], ['./sub/none.yml']]) {
      const result = await vime(['skypilot', 'validate', ...files]);
      const bad = files.at(-1)!;
      expectUsage(result, `file ${bad}: cannot read it: `, files.join(' '));
      expect(result.stdout).toBe('');
    }
  });

  it('render --out into a file or below one', async () => {
    await writeFile(join(dir, 'a-file'), 'x');
    for (const out of ['a-file', 'a-file/deploy', 'a-file/deploy/deeper', `${dir}/a-file/abs`]) {
      const result = await vime(['skypilot', 'render', '--out', out]);
      expectUsage(result, `--out ${out}: ${join(dir, 'a-file')} is a file, not a directory`, out);
      expect(result.stdout).toBe('');
    }
  });

  it('render --out where no directory can be made fails at once', async () => {
    for (const out of ['/proc/nope', '/proc/self/nope/deploy', '/sys/nope']) {
      const result = await vime(['skypilot', 'render', '--out', out]);
      expectUsage(result, new RegExp(`--out ${out}: cannot create /(proc|sys)/`), out);
    }
  });
});

describe('vime: engine URLs are checked before waiting', () => {
  it.each([
    ['notaurl'],
    ['localhost:30000'],
    ['ftp://127.0.0.1:30000'],
    ['http://'],
    ['http://127.0.0.1:1', 'sglang-0'],
  ])('%j', async (...urls) => {
    const bad = urls.at(-1)!;
    const started = performance.now();
    const result = await vime(['engines', 'wait', ...urls, '--timeout', '30s']);
    expectUsage(result, `engine URL ${JSON.stringify(bad)} is not an http(s) URL; write it as http://`, bad);
    expect(result.stderr).not.toContain('waiting for');
    // It did not poll the good URL until the deadline.
    expect(performance.now() - started).toBeLessThan(20_000);
  });
});

describe('vime ray: token files, addresses, and the connection pool', () => {
  let ray: FakeRay;
  beforeAll(async () => {
    ray = await startFakeRay({ token: 'tok', script: { lines: ['step 1'] } });
    await mkdir(join(dir, 'token-dir'), { recursive: true });
    await writeFile(join(dir, 'blank-token'), ' \n');
    await writeFile(join(dir, 'token'), 'tok\n');
  });
  afterAll(() => ray.close());

  it.each([
    [['ray', 'status'], 'missing-token', '--token-file missing-token: cannot read it: ENOENT'],
    [['ray', 'logs', 'x'], 'token-dir', '--token-file token-dir: cannot read it: EISDIR'],
    [['ray', 'stop', 'x'], 'blank-token', '--token-file blank-token is empty'],
    [['ray', 'submit', '--no-wait', '--', 'true'], 'nope/token', '--token-file nope/token: cannot read it'],
  ])('%j --token-file %s', async (command, file, message) => {
    const [group, name, ...rest] = command;
    const result = await vime([group!, name!, '--address', ray.url, '--token-file', file, ...rest]);
    expectUsage(result, message, file);
    expect(ray.created).toEqual([]);
  });

  it('rejects an address that is not a dashboard URL, from the flag or RAY_ADDRESS', async () => {
    for (const address of ['notaurl', '127.0.0.1:8265', 'ray://head:10001']) {
      expectUsage(
        await vime(['ray', 'status', '--address', address]),
        `--address ${JSON.stringify(address)} is not an http(s) URL`,
        address,
      );
    }
    expectUsage(
      await vime(['ray', 'status'], { RAY_ADDRESS: 'auto' }),
      'RAY_ADDRESS "auto" is not an http(s) URL',
      'env',
    );
  });

  it('closes the client after every command, so no connection is left open', async () => {
    const env = { RAY_AUTH_TOKEN: 'tok' };
    const at = ['--address', ray.url];
    const runs = [
      ['ray', 'submit', ...at, '--submission-id', 'pool', '--', 'echo', 'ok'],
      ['ray', 'submit', ...at, '--submission-id', 'pool', '--no-wait', '--', 'echo', 'ok'],
      ['ray', 'status', ...at],
      ['ray', 'status', 'pool', ...at],
      ['ray', 'logs', 'pool', ...at],
      ['ray', 'logs', 'pool', '--follow', ...at],
      ['ray', 'stop', 'pool', ...at],
      ['ray', 'status', 'no-such-job', ...at],
    ];
    for (const args of runs) {
      const result = await vime(args, env);
      expect(result.stderr).not.toMatch(STACK);
      // The server sees the client's close within moments; a kept-alive pool holds it for seconds.
      let open = await ray.openConnections();
      for (let i = 0; i < 20 && open > 0; i++) {
        await new Promise((r) => setTimeout(r, 25));
        open = await ray.openConnections();
      }
      expect(open, args.join(' ')).toBe(0);
    }
  });
});

describe('the vime bin', () => {
  const cli = fileURLToPath(new URL('../cli.ts', import.meta.url));
  const repo = fileURLToPath(new URL('../../../../', import.meta.url));
  const spawnVime = (args: string[]) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      // SIGKILL: the bin turns SIGTERM into an abort, which a spinning mkdir would never see.
      execFile(
        process.execPath,
        ['--import', 'tsx', '--conditions=@vime/source', cli, ...args],
        { cwd: repo, timeout: 40_000, killSignal: 'SIGKILL' },
        (error, _stdout, stderr) =>
          resolve({
            code: error ? (typeof error.code === 'number' ? error.code : null) : 0,
            stderr,
          }),
      );
    });

  it('fails fast with exit 2 and no stack trace: output under /proc, a malformed config', async () => {
    await writeFile(join(dir, 'broken.json'), '{"engines": {count: 2}');
    const proc = await spawnVime(['skypilot', 'render', '--out', '/proc/nope']);
    expect(proc.code, proc.stderr).toBe(EXIT.usage);
    expect(proc.stderr).toMatch(/^vime: --out \/proc\/nope: cannot create \/proc\/nope: ENOENT/);
    const json = await spawnVime(['plan', '-c', join(dir, 'broken.json')]);
    expect(json.code).toBe(EXIT.usage);
    expect(json.stderr).toContain(
      `--config ${join(dir, 'broken.json')}: line 1, column 14: Expected property name`,
    );
    for (const r of [proc, json]) expect(r.stderr).not.toMatch(STACK);
  });
});
