/**
 * Runs a command of the repository the way a user's shell does, from its root: the loop's CLI or the main
 * job as `node --import tsx` over the source, or any program. Output is kept whole for the assertions.
 */
import { fileURLToPath } from 'node:url';
import { runProcess } from '@vime/core/utils';

export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
/** How the tests start the repository's TypeScript entry points: over the source, no build. */
export const NODE_ARGS = ['--import', 'tsx', '--conditions=@vime/source'];
export const LOOP_CLI = 'packages/loop/src/cli.ts';
export const MAIN_JOB = 'examples/coding-agent/src/main.ts';

/** How a command ended: its exit code (null when the timeout killed it) and what it printed. */
export interface CommandRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `command args` from the repository root; the timeout kills its whole process group. */
export async function runCommand(
  command: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv | undefined; timeoutMs?: number | undefined } = {},
): Promise<CommandRun> {
  const result = await runProcess(command, args, {
    cwd: REPO_ROOT,
    env: options.env ?? process.env,
    timeoutMs: options.timeoutMs ?? 300_000,
    maxOutputBytes: Number.POSITIVE_INFINITY,
  });
  return { code: result.exitCode, stdout: result.stdout, stderr: result.stderr };
}

/** Runs one of the repository's TypeScript entry points with Node. */
export function runScript(
  script: string,
  args: string[],
  options: { env?: NodeJS.ProcessEnv | undefined; timeoutMs?: number | undefined } = {},
): Promise<CommandRun> {
  return runCommand(process.execPath, [...NODE_ARGS, script, ...args], options);
}
