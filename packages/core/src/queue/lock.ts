/**
 * One producer and one consumer per queue directory, enforced by pid lock files. A lock left by a
 * process that no longer exists (e.g. SIGKILLed) is taken over.
 */
import { open, readFile, unlink } from 'node:fs/promises';
import { QueueError } from './format.js';

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export async function acquireLock(path: string, role: string): Promise<() => Promise<void>> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const handle = await open(path, 'wx');
      try {
        await handle.writeFile(`${process.pid}\n`);
        await handle.sync();
      } finally {
        await handle.close();
      }
      return async () => {
        await unlink(path).catch(() => {});
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = Number.parseInt(await readFile(path, 'utf8').catch(() => ''), 10);
    if (Number.isInteger(holder) && holder > 0 && isAlive(holder)) {
      const where = holder === process.pid ? 'this process' : `process ${holder}`;
      throw new QueueError(
        `the queue's ${role} lock ${path} is held by ${where}; a queue has one ${role} at a time. Close the other ${role}, or delete the lock file if no process uses the queue`,
        { code: 'queue_locked', data: { path, pid: holder } },
      );
    }
    await unlink(path).catch(() => {});
  }
  throw new QueueError(`could not take the ${role} lock ${path}: another process keeps recreating it`, {
    code: 'queue_locked',
  });
}
