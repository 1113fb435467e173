/**
 * A grading sandbox whose whole backend went away (a fleet engine stopped) after the patch was applied: an
 * infrastructure failure, thrown, never the "the patch broke its grading" 0 that a sound check sandbox on
 * another backend would otherwise give. Real bubblewrap sandboxes of the offline task; the first grading
 * sandbox's probe fails as a fleet sandbox of a lost backend does.
 */
import { SandboxError } from '@vime/core';
import { BACKEND_LOST, type Sandbox } from '@vime/sandbox';
import { expect, it } from 'vitest';
import { ATTACK_TIMEOUT_MS, useAttackKit } from './attacks/__fixtures__/kit.js';
import { gradeInFreshSandbox, patchFromDiff, type SandboxSource, taskTestFiles } from './index.js';

const kit = useAttackKit();

/** The first sandbox claimed loses its backend at the probe (after the patch is in); later ones are sound. */
function firstLosesItsBackend(source: SandboxSource): SandboxSource & { claims: number } {
  const real = new Map<Sandbox, Sandbox>();
  const wrapper = {
    claims: 0,
    async claim(...args: Parameters<SandboxSource['claim']>) {
      const sandbox = await source.claim(...args);
      if (wrapper.claims++ > 0) return sandbox;
      const lost = new SandboxError('fleet backend engine-1 stopped answering', { code: BACKEND_LOST });
      const wrapped: Sandbox = {
        id: sandbox.id,
        provider: sandbox.provider,
        workdir: sandbox.workdir,
        labels: sandbox.labels,
        capabilities: sandbox.capabilities,
        exec: (command, opts) =>
          typeof command === 'string' && command.includes('vime-probe.py')
            ? Promise.reject(lost)
            : sandbox.exec(command, opts),
        writeFile: (path, content, opts) => sandbox.writeFile(path, content, opts),
        readFile: (path, opts) => sandbox.readFile(path, opts),
        readTextFile: (path, opts) => sandbox.readTextFile(path, opts),
        copyIn: (dir, path, opts) => sandbox.copyIn(dir, path, opts),
        isAlive: (opts) => sandbox.isAlive(opts),
        terminate: () => sandbox.terminate(),
      };
      real.set(wrapped, sandbox);
      return wrapped;
    },
    release: (sandbox: Sandbox) => source.release(real.get(sandbox) ?? sandbox),
  };
  return wrapper;
}

it(
  'a lost backend during grading is thrown as sandbox_backend_lost, not graded 0',
  async () => {
    const task = kit.task();
    const gold = patchFromDiff(task.goldPatch!, taskTestFiles(task));
    const source = firstLosesItsBackend(kit.source());
    const error = await gradeInFreshSandbox(source, task, gold).then(
      (graded) => graded,
      (e: unknown) => e,
    );
    expect(SandboxError.isInstance(error) && error.code, JSON.stringify(error)).toBe(BACKEND_LOST);
    // No check sandbox was claimed to decide between the patch and the environment.
    expect(source.claims).toBe(1);
  },
  ATTACK_TIMEOUT_MS,
);
