/**
 * One producer and one consumer per queue directory, enforced by the kernel: an exclusive flock(2)
 * lock on `producer.lock` / `consumer.lock`.
 *
 * Node has no flock, so a helper process takes the lock on a file descriptor it inherits from this
 * process and exits at once. A flock lock belongs to the open file description, which this process
 * keeps open, so the lock is held exactly as long as this process holds its descriptor: `release()`
 * or the end of the process (SIGKILL included) frees it, and no pid, clock or timeout is involved. Two
 * openers racing for a stale lock file cannot both win: the kernel grants the lock once.
 *
 * The helper is util-linux `flock` (Debian's `util-linux`, always installed), else Perl's `flock`. A
 * file system that does not keep such locks (some network file systems turn them into per-process
 * POSIX locks, which the helper's exit drops) is detected on first use and refused.
 *
 * Lock files are never deleted: a second opener holding the old file open could otherwise lock it
 * while a third locks the new file of the same name. Their content (the holder's pid) is only for the
 * error message.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';
import { QueueError } from './format.js';

type Helper = 'flock' | 'perl';
type Attempt = 'locked' | 'busy';

const HELPERS: Record<Helper, [string, string[]]> = {
  flock: ['flock', ['--nonblock', '--exclusive', '3']],
  perl: [
    'perl',
    ['-MFcntl=:flock', '-e', 'open(my $f, "+<&=", 3) or exit 2; flock($f, LOCK_EX | LOCK_NB) or exit 1'],
  ],
};

/** File systems (by device) where a lock taken through a helper was seen to hold. */
const verified = new Set<number>();

function tryLock(helper: Helper, fd: number): Promise<Attempt> {
  const [command, args] = HELPERS[helper];
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe', fd] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve('locked');
      else if (code === 1 && stderr === '') resolve('busy');
      else reject(new Error(`${command} exited with ${code}: ${stderr.trim()}`));
    });
  });
}

/** Try util-linux flock, then Perl. */
async function lockFd(fd: number, helper: Helper | undefined): Promise<Attempt> {
  if (helper) return tryLock(helper, fd);
  try {
    return await tryLock('flock', fd);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    return tryLock('perl', fd).catch((cause: NodeJS.ErrnoException) => {
      if (cause.code !== 'ENOENT') throw cause;
      throw new QueueError(
        'SampleQueue needs flock(1) (util-linux) or perl to lock its directory; install util-linux',
        { code: 'queue_lock_unsupported', cause },
      );
    });
  }
}

const openLockFile = (path: string) => open(path, constants.O_RDWR | constants.O_CREAT, 0o644);

export interface LockOptions {
  /** Force one helper (tests); default: flock, else perl. */
  helper?: Helper | undefined;
}

/** Take the `role` lock at `path` now, or throw `queue_locked`. Returns the release function. */
export async function acquireLock(
  path: string,
  role: string,
  options: LockOptions = {},
): Promise<() => Promise<void>> {
  let handle: FileHandle;
  try {
    handle = await openLockFile(path);
  } catch (cause) {
    throw new QueueError(`cannot open the ${role} lock ${path}: ${(cause as Error).message}`, { cause });
  }
  try {
    if ((await lockFd(handle.fd, options.helper)) === 'busy') {
      const holder = Number.parseInt((await handle.readFile('utf8').catch(() => '')).trim(), 10);
      const who =
        holder === process.pid
          ? 'this process'
          : Number.isInteger(holder)
            ? `process ${holder}`
            : 'another process';
      throw new QueueError(
        `the queue's ${role} lock ${path} is held by ${who}; a queue has one ${role} at a time. Close the other ${role} first (the lock ends with its process, so a killed one never leaves it held)`,
        { code: 'queue_locked', data: { path, pid: Number.isInteger(holder) ? holder : undefined } },
      );
    }
    const { dev } = await stat(path);
    if (!verified.has(dev)) {
      // A second open file description must now be refused; if not, the lock did not outlive the helper.
      const probe = await openLockFile(path);
      try {
        if ((await lockFd(probe.fd, options.helper)) === 'locked') {
          throw new QueueError(
            `the file system of ${path} does not keep flock locks (a network file system?); put the queue on a local disk`,
            { code: 'queue_lock_unsupported' },
          );
        }
      } finally {
        await probe.close();
      }
      verified.add(dev);
    }
    // For the error message of a later opener only; a full disk must not stop the open.
    await handle.truncate(0).catch(() => {});
    await handle.write(`${process.pid}\n`, 0).catch(() => {});
  } catch (error) {
    await handle.close();
    if (error instanceof QueueError) throw error;
    throw new QueueError(`cannot take the ${role} lock ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    await handle.close();
  };
}
