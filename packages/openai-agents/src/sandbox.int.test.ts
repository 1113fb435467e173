/**
 * Real bubblewrap sandboxes behind the Agents SDK's sandbox interfaces: the session's shell answer, file
 * reads and listings (hostile names taken as names, never as shell text), existence checks, and the
 * `SandboxClient` creating a fresh sandbox per session and terminating it when the SDK closes it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Manifest } from '@openai/agents/sandbox';
import { bubblewrapProvider, type Sandbox } from '@vime/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENTS_COMMAND_TIMEOUT_EXIT, agentsSandboxClient, agentsSandboxSession } from './sandbox.js';

let root: string;
let sandbox: Sandbox;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'vime-agents-sandbox-'));
  sandbox = await bubblewrapProvider({ rootDir: root }).create({ workdir: '/testbed' });
}, 120_000);
afterAll(async () => {
  await sandbox?.terminate();
  await rm(root, { recursive: true, force: true });
});

const HOSTILE = ['-rf', 'a "quoted" name', "it's", 'two\nlines', '$(touch pwned)'];

describe('agentsSandboxSession over bubblewrap', () => {
  it('runs commands in the work dir and answers in the SDK layout; records each command', async () => {
    const ran: string[] = [];
    const s = agentsSandboxSession(sandbox, { onAction: (a) => ran.push(a) });
    expect(s.state.manifest.root).toBe('/testbed');
    const answer = await s.execCommand!({ cmd: 'pwd; echo oops >&2; exit 4' });
    expect(answer).toMatch(/^Wall time: \d+\.\d{4} seconds\nProcess exited with code 4\nOutput:\n/);
    expect(answer).toContain('/testbed');
    expect(answer).toContain('oops');
    const r = await s.exec!({ cmd: 'mkdir -p sub && cd sub && pwd' });
    expect(r).toMatchObject({ exitCode: 0, stdout: '/testbed/sub\n' });
    expect((await s.exec!({ cmd: 'pwd', workdir: 'sub' })).stdout).toBe('/testbed/sub\n');
    expect(ran).toEqual(['pwd; echo oops >&2; exit 4', 'mkdir -p sub && cd sub && pwd', 'pwd']);
    expect(s.supportsPty!()).toBe(false);
  });

  it('reads files and lists directories with hostile names as names', async () => {
    const s = agentsSandboxSession(sandbox);
    for (const name of HOSTILE) await sandbox.writeFile(`files/${name}`, `content of ${name}`);
    const listed = await s.listDir!({ path: 'files' });
    expect(listed.map((e) => e.name).sort()).toEqual([...HOSTILE].sort());
    expect(listed.every((e) => e.type === 'file' && e.path === `/testbed/files/${e.name}`)).toBe(true);
    for (const name of HOSTILE) {
      expect(new TextDecoder().decode((await s.readFile!({ path: `files/${name}` })) as Uint8Array)).toBe(
        `content of ${name}`,
      );
      expect(await s.pathExists!(`files/${name}`)).toBe(true);
    }
    expect(await s.pathExists!('pwned')).toBe(false);
    expect(await s.pathExists!('files/pwned')).toBe(false);
    expect(await s.directoryExists!('files')).toBe(true);
    expect(await s.directoryExists!('files/-rf')).toBe(false);
    await expect(s.listDir!({ path: 'nope' })).rejects.toThrow(/no such directory/);
  });

  it('a command past its timeout exits 124 and says so', async () => {
    const s = agentsSandboxSession(sandbox, { commandTimeoutMs: 1_000 });
    const r = await s.exec!({ cmd: 'sleep 30' });
    expect(r.exitCode).toBe(AGENTS_COMMAND_TIMEOUT_EXIT);
    expect(r.stderr).toMatch(/killed at the command timeout of 1000 ms/);
  }, 60_000);

  it('the client creates a sandbox per session at the manifest root and terminates it on close', async () => {
    const provider = bubblewrapProvider({ rootDir: root });
    const client = agentsSandboxClient(provider, { spec: { workdir: '/testbed' } });
    expect(client.backendId).toBe('vime-bubblewrap');
    const session = await client.create!({ manifest: new Manifest({ root: '/repo' }) });
    expect((await session.exec!({ cmd: 'pwd' })).stdout).toBe('/repo\n');
    expect(await session.running!()).toBe(true);
    await session.close!();
    expect(await session.running!()).toBe(false);
    await expect(
      client.create!({ manifest: { entries: { 'a.txt': { type: 'file', content: 'x' } } } } as never),
    ).rejects.toThrow(/manifest entries \(a\.txt\) are not supported/);
  }, 120_000);
});
