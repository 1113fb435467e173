import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ProcessError, runProcess, runProcessOk } from './process.js';
import { sleep } from './sleep.js';

/** Whether `pid` still runs (a zombie waiting for its reaper does not). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function gone(pid: number, withinMs = 5_000): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (running(pid) && Date.now() < deadline) await sleep(20);
  return !running(pid);
}

/** A shell that starts a background sleep in its process group, prints its pid, and waits. */
const WITH_BACKGROUND = ['-c', 'sleep 30 & echo $!; wait'];

describe('runProcess', () => {
  it('runs a program without a shell and reports its output and exit code', async () => {
    const r = await runProcess('sh', [
      '-c',
      'echo "$1"; echo err >&2; exit 3',
      'sh',
      '$HOME is not expanded',
    ]);
    expect(r).toMatchObject({
      exitCode: 3,
      signal: null,
      stdout: '$HOME is not expanded\n',
      stderr: 'err\n',
      timedOut: false,
      truncated: false,
    });
    expect(r.output).toContain('err\n');
    expect(r.durationMs).toBeGreaterThan(0);
  });

  it('reports a signal as 128 + its number, with the signal named', async () => {
    const r = await runProcess('sh', ['-c', 'kill -TERM $$']);
    expect(r).toMatchObject({ exitCode: 143, signal: 'SIGTERM' });
  });

  it('passes input, a working folder and exactly the environment given (default: this process’s)', async () => {
    const r = await runProcess('sh', ['-c', 'cat; pwd; echo "[$ONLY][$HOME]"'], {
      stdin: 'in\n',
      cwd: tmpdir(),
      env: { ONLY: 'this', PATH: process.env.PATH },
    });
    expect(r.stdout).toBe(`in\n${tmpdir()}\n[this][]\n`);
    const inherited = await runProcess('sh', ['-c', 'echo "$HOME"']);
    expect(inherited.stdout).toBe(`${process.env.HOME}\n`);
  });

  it('kills the whole process group on timeout, and says it timed out', async () => {
    let pid: number | undefined;
    const killed: number[] = [];
    const r = await runProcess('sh', WITH_BACKGROUND, {
      timeoutMs: 500,
      trackPid: (p) => {
        if (p !== undefined) pid = p;
      },
      afterKill: () => killed.push(Date.now()),
    });
    expect(r).toMatchObject({ exitCode: null, timedOut: true, signal: 'SIGKILL' });
    expect(killed).toHaveLength(1);
    expect(pid).toBeGreaterThan(0);
    expect(await gone(Number(r.stdout.trim()))).toBe(true);
  });

  it('kills the whole process group on abort and rejects with the reason', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vime-process-test-'));
    const pidFile = join(dir, 'pid');
    try {
      const controller = new AbortController();
      const run = runProcess('sh', ['-c', 'sleep 30 & echo $! > "$0"; wait', pidFile], {
        signal: controller.signal,
      });
      while (!existsSync(pidFile) || readFileSync(pidFile, 'utf8') === '') await sleep(20);
      controller.abort(new Error('stop'));
      await expect(run).rejects.toThrow('stop');
      expect(await gone(Number(readFileSync(pidFile, 'utf8')))).toBe(true);
      await expect(runProcess('true', [], { signal: controller.signal })).rejects.toThrow('stop');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('returns soon after the program exits, though a background child still holds its pipes', async () => {
    let group = 0;
    const started = Date.now();
    const r = await runProcess('sh', ['-c', 'sleep 30 & echo done'], {
      trackPid: (p) => {
        if (p !== undefined) group = p;
      },
    });
    process.kill(-group, 'SIGKILL');
    expect([r.exitCode, r.stdout]).toEqual([0, 'done\n']);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('tells trackPid the pid, then undefined once the program has exited', async () => {
    const seen: Array<number | undefined> = [];
    const r = await runProcess('sh', ['-c', 'echo $$'], { trackPid: (p) => seen.push(p) });
    expect(seen).toEqual([Number(r.stdout.trim()), undefined]);
  });

  it('keeps the first and last half of a large output, marking what it dropped', async () => {
    const r = await runProcess('sh', ['-c', 'printf a; head -c 100000 /dev/zero | tr "\\0" b; printf c'], {
      maxOutputBytes: 10,
    });
    expect(r.truncated).toBe(true);
    expect(r.stdout).toBe('abbbb\n[… 99992 bytes elided …]\nbbbbc');
    const whole = await runProcess('head', ['-c', '3000000', '/dev/zero'], {
      maxOutputBytes: Number.POSITIVE_INFINITY,
    });
    expect([whole.stdout.length, whole.truncated]).toEqual([3_000_000, false]);
  });

  it('keeps raw stdout up to maxRawBytes and fails past it', async () => {
    const r = await runProcess('printf', ['\\377\\000ok'], { maxRawBytes: 16 });
    expect(r.raw).toEqual(Buffer.from([0xff, 0x00, 0x6f, 0x6b]));
    expect(r.stdout).toBe('');
    const error = await runProcess('head', ['-c', '100000', '/dev/zero'], { maxRawBytes: 1000 }).catch(
      (e: unknown) => e,
    );
    expect(ProcessError.isInstance(error) && error.code).toBe('process_output_too_large');
    expect((error as ProcessError).message).toBe('output larger than 1000 bytes');
  });

  it('reports whether the program wrote to its fd 3 (a launcher’s report)', async () => {
    const said = await runProcess('sh', ['-c', 'printf 1 >&3; exec 3>&-; exit 7'], { reportFd: true });
    expect([said.reported, said.exitCode]).toEqual([true, 7]);
    const silent = await runProcess('sh', ['-c', 'exit 0'], { reportFd: true });
    expect(silent.reported).toBe(false);
    expect((await runProcess('true', [])).reported).toBeUndefined();
  });

  it('fails a program that cannot start with a ProcessError that says what to check', async () => {
    const error = await runProcess('vime-no-such-program', []).catch((e: unknown) => e);
    expect(ProcessError.isInstance(error)).toBe(true);
    expect((error as ProcessError).code).toBe('process_spawn_failed');
    expect((error as ProcessError).message).toMatch(
      /^could not start vime-no-such-program: .*ENOENT; is it installed and on PATH\?$/,
    );
  });
});

describe('runProcessOk', () => {
  it('returns the result of a program that exits 0', async () => {
    expect((await runProcessOk('echo', ['ok'])).stdout).toBe('ok\n');
  });

  it('fails any other end with the command, its folder, how it ended and what it said', async () => {
    const error = await runProcessOk('sh', ['-c', 'echo nope >&2; exit 4'], { cwd: tmpdir() }).catch(
      (e: unknown) => e,
    );
    expect(ProcessError.isInstance(error) && error.code).toBe('process_failed');
    expect((error as ProcessError).message).toBe(
      `sh -c echo nope >&2; exit 4 failed in ${tmpdir()} (exit 4): nope`,
    );
    const slow = await runProcessOk('sleep', ['5'], { timeoutMs: 100 }).catch((e: unknown) => e);
    expect((slow as ProcessError).message).toBe('sleep 5 failed (timed out after 100 ms): ');
  });
});
