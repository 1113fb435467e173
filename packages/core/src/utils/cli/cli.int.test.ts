// The command line kit every Vime bin is built on: did-you-mean, strict flags, value parsers, subcommand
// dispatch with help, and the exit codes `runCli` gives whatever a program throws.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ConfigError, EngineError, ValidationError, VimeError } from '../../errors.js';
import { type CliProgram, type Command, programHelp, runProgram } from './commands.js';
import { closest, didYouMean, editDistance } from './did-you-mean.js';
import { parseFlags, wantsHelp } from './flags.js';
import { EXIT, memoryIo } from './io.js';
import { reportCliError, runCli, signalExitCode } from './run.js';
import { finiteNumber, oneOf, positiveInt, UsageError } from './values.js';

const STACK = /^\s+at .+[:(]/m;

/** What `fn` throws (it must throw). */
function thrown(fn: () => unknown): Error {
  try {
    fn();
  } catch (error) {
    return error as Error;
  }
  throw new Error('did not throw');
}

describe('did you mean', () => {
  it('counts single-character edits', () => {
    expect(editDistance('', '')).toBe(0);
    expect(editDistance('plan', 'plan')).toBe(0);
    expect(editDistance('plna', 'plan')).toBe(2);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(editDistance('', 'abc')).toBe(3);
    expect(editDistance('enignes', 'engines')).toBe(2);
  });

  it('hints the closest name within 2 edits or a third of its length, case ignored', () => {
    expect(closest('plna', ['plan', 'ray status'])).toBe('plan');
    expect(closest('PLAN', ['plan'])).toBe('plan');
    expect(closest('token_file', ['token-file', 'address'])).toBe('token-file');
    expect(closest('samples-per-promt', ['samples-per-prompt', 'batch-size'])).toBe('samples-per-prompt');
    expect(closest('frobnicate', ['validate', 'offline'])).toBeUndefined();
    expect(closest('x', [])).toBeUndefined();
    expect(didYouMean('statsu', ['status', 'stop'])).toBe(' (did you mean "status"?)');
    expect(didYouMean('zzz', ['status'])).toBe('');
  });
});

describe('parseFlags', () => {
  const flags = {
    engines: { type: 'string' },
    'token-file': { type: 'string' },
    config: { type: 'string', short: 'c' },
    json: { type: 'boolean' },
  } as const;
  const parse = (args: string[], max?: number) =>
    parseFlags('vime plan', args, flags, max === undefined ? {} : { maxPositionals: max });

  it('parses strictly, with positionals', () => {
    const { values, positionals } = parse(['a', '--engines', '2', '-c', 'x.yaml', '--json', 'b']);
    expect(values).toEqual({ engines: '2', config: 'x.yaml', json: true });
    expect(positionals).toEqual(['a', 'b']);
    expect(parse(['--', '--engines']).positionals).toEqual(['--engines']);
  });

  it.each([
    [['--enignes', '2'], `Unknown option '--enignes' (did you mean "--engines"?); see \`vime plan --help\``],
    [['--token_file', 't'], `Unknown option '--token_file' (did you mean "--token-file"?)`],
    [['--bogus'], "Unknown option '--bogus'; see `vime plan --help`"],
    [['-x'], "Unknown option '-x'"],
    [['--engines'], '--engines needs a value; see'],
    [['-c'], '--config needs a value'],
    [
      ['--engines', '--json'],
      '--engines needs a value; for a value that starts with a dash write --engines=VALUE',
    ],
    [['--json=yes'], '--json takes no value'],
  ])('%j is a usage error naming the flag', (args, message) => {
    const error = thrown(() => parse(args));
    expect(UsageError.isInstance(error)).toBe(true);
    expect(ConfigError.isInstance(error)).toBe(true);
    expect(error.message).toContain(message);
    expect(error.message).not.toContain('\n');
  });

  it('refuses positionals past the most a command takes, hinting a flag typed without dashes', () => {
    expect(parse(['a'], 1).positionals).toEqual(['a']);
    expect(thrown(() => parse(['a', 'b'], 1)).message).toBe(
      'unexpected argument "b"; see `vime plan --help`',
    );
    expect(thrown(() => parse(['engines', '2'], 0)).message).toBe(
      'unexpected argument "engines" (did you mean "--engines"?); see `vime plan --help`',
    );
  });

  it('finds --help before a --', () => {
    expect(wantsHelp(['plan', '--bogus', '-h'])).toBe(true);
    expect(wantsHelp(['--help'])).toBe(true);
    expect(wantsHelp(['ray', 'submit', '--', 'cmd', '--help'])).toBe(false);
    expect(wantsHelp(['--helpful'])).toBe(false);
  });
});

describe('value parsers name the flag, the value and what it expects', () => {
  it('positiveInt', () => {
    expect(positiveInt(undefined, '--steps')).toBeUndefined();
    expect(positiveInt('3', '--steps')).toBe(3);
    for (const bad of ['x', '0', '-1', '1.5', '', ' ']) {
      const error = thrown(() => positiveInt(bad, '--steps'));
      expect(UsageError.isInstance(error)).toBe(true);
      expect(error.message).toBe(`--steps expects a positive whole number, got ${JSON.stringify(bad)}`);
    }
  });

  it('finiteNumber', () => {
    expect(finiteNumber('-0.5', '--kl-coef')).toBe(-0.5);
    expect(finiteNumber('1e-6', '--atol', 0)).toBe(1e-6);
    expect(thrown(() => finiteNumber('abc', '--kl-coef')).message).toBe(
      '--kl-coef expects a number, got "abc"',
    );
    expect(thrown(() => finiteNumber('-1', '--atol', 0)).message).toBe(
      '--atol expects a number ≥ 0, got "-1"',
    );
    expect(thrown(() => finiteNumber('Infinity', '--atol')).message).toContain('expects a number');
  });

  it('oneOf', () => {
    expect(oneOf(undefined, '--mode', ['sync', 'async'])).toBeUndefined();
    expect(oneOf('sync', '--mode', ['sync', 'async'])).toBe('sync');
    expect(thrown(() => oneOf('SYNC', '--mode', ['sync', 'async'])).message).toBe(
      '--mode must be sync or async, got "SYNC" (did you mean "sync"?)',
    );
    expect(thrown(() => oneOf('vm', '--sandbox', ['bubblewrap', 'docker', 'local'])).message).toBe(
      '--sandbox must be bubblewrap, docker or local, got "vm"',
    );
  });

  it('UsageError has its own marker', () => {
    expect(UsageError.isInstance(new ConfigError('x'))).toBe(false);
    expect(UsageError.isInstance(new UsageError('x'))).toBe(true);
    expect(new UsageError('x').code).toBe('invalid_config');
  });
});

describe('runProgram', () => {
  const ran: Array<[string, string[]]> = [];
  const command = (name: string): Command => ({
    name,
    summary: `the ${name} command`,
    help: `Usage: tool ${name}`,
    run: async (args) => {
      ran.push([name, args]);
      return EXIT.ok;
    },
  });
  const program: CliProgram = {
    name: 'tool',
    summary: 'does things',
    commands: [command('plan'), command('ray status'), command('ray stop')],
    exitCodes: [
      [0, 'success'],
      [2, 'invalid usage'],
    ],
  };
  const run = async (...argv: string[]) => {
    const io = memoryIo();
    ran.length = 0;
    const code = await runCli('tool', (args, cliIo) => runProgram(program, args, cliIo), { argv, io });
    return { code, ...io.output, ran: [...ran] };
  };

  it('runs the named command, one or two words, with the rest of the arguments', async () => {
    expect((await run('plan', '--x', 'a')).ran).toEqual([['plan', ['--x', 'a']]]);
    expect((await run('ray', 'status', 'id')).ran).toEqual([['ray status', ['id']]]);
    // Options may come before the command.
    expect((await run('--json', 'ray', 'stop', 'id')).ran).toEqual([['ray stop', ['--json', 'id']]]);
  });

  it('answers help: the program on stdout, or on stderr with exit 2 when no command is given', async () => {
    for (const argv of [['--help'], ['-h'], ['help']]) {
      const r = await run(...argv);
      expect(r.code).toBe(EXIT.ok);
      expect(r.stdout).toBe(`${programHelp(program)}\n`);
    }
    expect(programHelp(program)).toMatch(/^tool: does things\n\nUsage: tool <command>/);
    expect(programHelp(program)).toMatch(/ {2}ray status {2}the ray status command\n/);
    expect(programHelp(program)).toMatch(/Exit codes:\n {2}0 {4}success\n {2}2 {4}invalid usage$/);
    const none = await run();
    expect(none.code).toBe(EXIT.usage);
    expect(none.stderr).toContain('Usage: tool <command>');
    expect(none.stdout).toBe('');
  });

  it("answers a command's --help anywhere before --, without running it", async () => {
    expect((await run('--bogus', '--help')).stdout).toBe(`${programHelp(program)}\n`);
    const r = await run('ray', 'stop', '--bogus', '--help');
    expect(r).toMatchObject({ code: EXIT.ok, stdout: 'Usage: tool ray stop\n', ran: [] });
    expect((await run('ray', 'stop', '--', '--help')).ran).toEqual([['ray stop', ['--', '--help']]]);
  });

  it('points an unknown command at the closest one: exit 2, one line, no stack', async () => {
    for (const [argv, message] of [
      [['pln'], 'tool: unknown command "pln" (did you mean "plan"?); commands: plan, ray status, ray stop'],
      [['ray', 'statsu'], 'unknown command "ray statsu" (did you mean "ray status"?)'],
      [['ray'], 'unknown command "ray"; commands:'],
      [['ray', '--json'], 'unknown command "ray"; commands:'],
      [['frobnicate'], 'unknown command "frobnicate"; commands:'],
      [['--json'], 'tool needs a command before "--json"'],
      [['--json', 'x.yaml'], 'tool needs a command before "--json"'],
      [['--json', 'pln'], 'unknown command "pln" (did you mean "plan"?)'],
    ] as const) {
      const r = await run(...argv);
      expect(r.code, argv.join(' ')).toBe(EXIT.usage);
      expect(r.stderr).toContain(message);
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.ran).toEqual([]);
    }
  });

  it("a program of one command answers --help with that command's help", () => {
    expect(programHelp({ name: 'one', summary: 's', commands: [command('reap')] })).toBe('Usage: tool reap');
  });
});

describe('runCli: one line and the exit code for whatever main throws', () => {
  const exitOf = async (error: unknown, signal?: AbortSignal) => {
    const io = memoryIo({ signal });
    const code = await runCli(
      'tool',
      async () => {
        throw error;
      },
      { io },
    );
    return { code, stderr: io.output.stderr, stdout: io.output.stdout };
  };

  it('returns what main returns, 0 for undefined, and leaves the process alone', async () => {
    const before = process.exitCode;
    const io = memoryIo();
    expect(await runCli('tool', async (argv) => argv.length, { io, argv: ['a', 'b'] })).toBe(2);
    expect(await runCli('tool', async () => undefined, { io })).toBe(EXIT.ok);
    expect(process.exitCode).toBe(before);
  });

  it.each([
    [new UsageError('--x expects a number'), EXIT.usage],
    [new ConfigError('--config a.yaml: cannot read it: ENOENT'), EXIT.usage],
    [new ValidationError('samples[3].reward', 'expected a number'), EXIT.usage],
    [new ValidationError('dump.pt', 'refusing pickle global', { code: 'decode_error' }), EXIT.usage],
    [new VimeError('validation_error', 'bad row'), EXIT.usage],
    [new EngineError('HTTP 503 from http://engine'), EXIT.failed],
    [new VimeError('queue_error', 'the queue is locked'), EXIT.failed],
    [
      Object.assign(new Error('ENOSPC: no space left on device, write'), {
        code: 'ENOSPC',
        syscall: 'write',
      }),
      EXIT.failed,
    ],
  ])('%s → %i, one line, no stack', async (error, expected) => {
    const r = await exitOf(error);
    expect(r.code).toBe(expected);
    expect(r.stderr).toBe(`tool: ${(error as Error).message}\n`);
    expect(r.stdout).toBe('');
  });

  it('a bug: its stack trace, exit 1', async () => {
    const r = await exitOf(new TypeError('x is undefined'));
    expect(r.code).toBe(EXIT.failed);
    expect(r.stderr).toMatch(/^tool: internal error \(please report it\): TypeError: x is undefined\n/);
    expect(r.stderr).toMatch(STACK);
    expect((await exitOf('a string')).stderr).toBe('tool: internal error (please report it): a string\n');
  });

  it('a stop by signal: 130 or 143, or the exit code an aborted VimeError names', async () => {
    expect(signalExitCode('SIGINT')).toBe(EXIT.interrupted);
    expect(signalExitCode('SIGTERM')).toBe(EXIT.terminated);
    const aborted = new AbortController();
    aborted.abort();
    const interrupted = await exitOf(
      new DOMException('This operation was aborted', 'AbortError'),
      aborted.signal,
    );
    expect(interrupted).toMatchObject({ code: EXIT.interrupted, stderr: 'tool: interrupted\n' });
    // What the bin's handler aborts with.
    const terminated = new AbortController();
    terminated.abort(
      new VimeError('aborted', 'stopped by SIGTERM', { data: { signal: 'SIGTERM', exitCode: 143 } }),
    );
    const byReason = await exitOf(new Error('fetch failed'), terminated.signal);
    expect(byReason).toMatchObject({ code: EXIT.terminated, stderr: 'tool: stopped by SIGTERM\n' });
    // A program's own stop error, with where its work is kept.
    const own = new VimeError('aborted', 'stopped by SIGINT; resume with --resume runs/1', {
      data: { exitCode: 130 },
    });
    expect(await exitOf(own)).toMatchObject({ code: 130, stderr: `tool: ${own.message}\n` });
    // A sandbox command's exit code in data is no stop.
    const sandbox = new VimeError('sandbox_error', 'setup failed', { data: { exitCode: 137 } });
    expect((await exitOf(sandbox)).code).toBe(EXIT.failed);
  });

  it('reportCliError is the same mapping, for a program that catches first', () => {
    const io = memoryIo();
    expect(reportCliError('tool', new UsageError('bad'), io)).toBe(EXIT.usage);
    expect(io.output.stderr).toBe('tool: bad\n');
  });
});

describe('runCli bound to the process', () => {
  const run = fileURLToPath(new URL('./run.ts', import.meta.url));
  /** A bin whose main waits for its signal, then throws what the signal's abort gives it. */
  const bin = `
    import { runCli } from ${JSON.stringify(run)};
    await runCli('tool', (argv, io) => new Promise((_, reject) => {
      const work = setInterval(() => {}, 1000);
      io.stdout('ready\\n');
      io.signal.addEventListener('abort', () => {
        if (argv[0] === 'ignore') return; // the second signal ends it
        clearInterval(work);
        reject(io.signal.reason);
      });
    }));
  `;
  const start = (...args: string[]) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', bin, '--', ...args],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    const ready = new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    const exit = new Promise<{ code: number | null; stderr: string }>((resolve) =>
      child.on('exit', (code) => resolve({ code, stderr })),
    );
    return { child, ready, exit };
  };

  it.each([
    ['SIGINT', EXIT.interrupted],
    ['SIGTERM', EXIT.terminated],
  ] as const)(
    '%s aborts io.signal: one line, exit %i',
    async (signal, code) => {
      const { child, ready, exit } = start();
      await ready;
      child.kill(signal);
      const r = await exit;
      expect(r.code).toBe(code);
      expect(r.stderr).toBe(`tool: stopped by ${signal}\n`);
    },
    60_000,
  );

  it('a second signal ends a program that does not stop', async () => {
    const { child, ready, exit } = start('ignore');
    await ready;
    child.kill('SIGINT');
    await new Promise((r) => setTimeout(r, 200));
    child.kill('SIGINT');
    expect((await exit).code).toBe(EXIT.interrupted);
  }, 60_000);
});
