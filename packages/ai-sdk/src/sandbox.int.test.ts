/**
 * A real bubblewrap sandbox as the AI SDK's sandbox session: every method of the interface against the
 * sandbox's own file system, relative paths under the work dir, hostile file names (quotes, newlines,
 * a leading dash, shell syntax) taken as names and never as shell text, and the interface's null / false
 * answers for missing paths.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bubblewrapProvider, type Sandbox } from '@vime/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aiSandbox, COMMAND_TIMEOUT_EXIT } from './sandbox.js';

let root: string;
let sandbox: Sandbox;
const actions: string[] = [];
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'vime-ai-sandbox-'));
  sandbox = await bubblewrapProvider({ rootDir: root }).create({ workdir: '/testbed' });
}, 120_000);
afterAll(async () => {
  await sandbox?.terminate();
  await rm(root, { recursive: true, force: true });
});

const session = () => aiSandbox(sandbox, { onAction: (a) => actions.push(a), commandTimeoutMs: 20_000 });

const HOSTILE = ['-rf', 'a "quoted" name', "it's", 'two\nlines', '$(touch pwned)', '; touch pwned2'];

describe('aiSandbox over bubblewrap', () => {
  it('runs commands in the work dir with env and a working directory, and records them', async () => {
    const s = session();
    expect(s.description).toContain('/testbed');
    const r = await s.run({
      command: 'pwd; echo "$GREETING"; echo err >&2; exit 3',
      env: { GREETING: 'hi' },
    });
    expect(r).toEqual({ exitCode: 3, stdout: '/testbed\nhi\n', stderr: 'err\n' });
    await s.run({ command: 'mkdir -p sub' });
    expect((await s.run({ command: 'pwd', workingDirectory: 'sub' })).stdout).toBe('/testbed/sub\n');
    expect(actions).toContain('pwd; echo "$GREETING"; echo err >&2; exit 3');
  });

  it('writes, reads, stats, lists and deletes files, hostile names included', async () => {
    const s = session();
    for (const name of HOSTILE) {
      await s.writeTextFile({ path: `files/${name}`, content: `content of ${name}\n` });
      expect(await s.readTextFile({ path: `/testbed/files/${name}` })).toBe(`content of ${name}\n`);
      expect(await s.stat({ path: `files/${name}` })).toEqual({
        type: 'file',
        size: Buffer.byteLength(`content of ${name}\n`),
      });
    }
    const listed = await s.listDirectory({ path: 'files' });
    expect(listed?.map((e) => e.name).sort()).toEqual([...HOSTILE].sort());
    expect(listed?.every((e) => e.type === 'file')).toBe(true);
    // Nothing a name spelled as shell syntax ran.
    const made =
      'for f in /testbed/pwned /testbed/pwned2 /testbed/files/pwned /testbed/files/pwned2; do [ -e "$f" ] && echo "$f"; done; true';
    expect((await s.run({ command: made })).stdout).toBe('');
    for (const name of HOSTILE) {
      expect(await s.deleteFile({ path: `files/${name}` })).toBe(true);
      expect(await s.deleteFile({ path: `files/${name}` })).toBe(false);
    }
    expect(await s.listDirectory({ path: 'files' })).toEqual([]);
  });

  it('answers null for missing paths and rejects directories where a file is wanted', async () => {
    const s = session();
    expect(await s.stat({ path: 'nope' })).toBeNull();
    expect(await s.readTextFile({ path: 'nope' })).toBeNull();
    expect(await s.readFile({ path: 'nope' })).toBeNull();
    expect(await s.listDirectory({ path: 'nope' })).toBeNull();
    expect(await s.stat({ path: '.' })).toMatchObject({ type: 'directory' });
    await s.run({ command: 'mkdir -p d' });
    await expect(s.deleteFile({ path: 'd' })).rejects.toThrow(/a directory/);
    await expect(s.readTextFile({ path: 'd' })).rejects.toThrow(/a directory/);
    await s.writeTextFile({ path: 'f.txt', content: 'x' });
    await expect(s.listDirectory({ path: 'f.txt' })).rejects.toThrow(/not a directory/);
  });

  it('reads line ranges and bytes exactly, and writes from a stream', async () => {
    const s = session();
    await s.writeTextFile({ path: 'lines.txt', content: 'one\ntwo\nthree\nfour' });
    expect(await s.readTextFile({ path: 'lines.txt', startLine: 2, endLine: 3 })).toBe('two\nthree\n');
    expect(await s.readTextFile({ path: 'lines.txt', startLine: 3, endLine: 99 })).toBe('three\nfour');
    const bytes = Uint8Array.from([0, 255, 10, 13, 128]);
    await s.writeFile({ path: 'bin/b.dat', content: new Blob([bytes]).stream() });
    expect(await s.readBinaryFile({ path: 'bin/b.dat' })).toEqual(bytes);
    const stream = await s.readFile({ path: 'bin/b.dat' });
    expect(new Uint8Array(await new Response(stream).arrayBuffer())).toEqual(bytes);
    await expect(s.writeTextFile({ path: 'x', content: 'y', encoding: 'latin1' })).rejects.toThrow(
      /encoding "latin1" is not supported/,
    );
  });

  it('spawns: streams after exit, wait() gives the exit code, kill() stops it, stdin is refused', async () => {
    const s = session();
    const p = await s.spawn({ command: 'echo out; echo err >&2; exit 7' });
    expect(await new Response(p.stdout).text()).toBe('out\n');
    expect(await new Response(p.stderr).text()).toBe('err\n');
    expect(await p.wait()).toEqual({ exitCode: 7 });
    const slow = await s.spawn({ command: 'sleep 600' });
    await slow.kill();
    await expect(slow.wait()).rejects.toThrow();
    await expect(s.spawn({ command: 'cat', stdin: true })).rejects.toThrow(/leave `stdin` out/);
  });

  it('a command past its timeout exits 124 and says so', async () => {
    const s = aiSandbox(sandbox, { commandTimeoutMs: 1_000 });
    const r = await s.run({ command: 'sleep 30' });
    expect(r.exitCode).toBe(COMMAND_TIMEOUT_EXIT);
    expect(r.stderr).toMatch(/killed at the command timeout of 1000 ms/);
  }, 60_000);
});
