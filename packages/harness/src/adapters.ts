/**
 * How each harness is configured and started headless: base URL of the proxy (the sandbox's channel
 * port), the session id as its API key, the model name, its tools, and everything that phones home off.
 * Each adapter returns the files to write (under a private home in the sandbox's `/tmp`), the argv and
 * the environment; `runHarness` does the rest.
 */
import type { HarnessKind, InstalledHarness } from './install.js';

/** Where a harness package is bound (read-only) inside the sandbox. */
export const HARNESS_MOUNT = '/opt/vime-harness';
/** The harness's home inside the sandbox: the private, writable `/tmp`, never the graded work dir. */
export const HARNESS_HOME = '/tmp/vime-harness-home';

/**
 * What launching a harness needs: the installed binary, the proxy's URL, the session key, model, prompt and
 * tools.
 */
export interface HarnessLaunchInput {
  installed: InstalledHarness;
  /** Base URL of the proxy as the sandbox sees it (`http://127.0.0.1:<port>`). */
  baseUrl: string;
  /** The capture session's key (`CaptureSession.apiKey`), sent as the harness's API key. */
  sessionKey: string;
  model: string;
  prompt: string;
  /** Claude Code's built-in tools (`--tools`); ignored by Codex, whose tools are its own. */
  tools: readonly string[];
}

/** How a harness is started in its sandbox: argv, environment and files. */
export interface HarnessLaunch {
  argv: string[];
  env: Record<string, string>;
  /** Files to write before the run: absolute sandbox path → content. */
  files: Record<string, string>;
}

/** Claude Code's default tool set here: shell and file edits, no web, no subagents unless asked. */
export const CLAUDE_CODE_TOOLS = ['Bash', 'Read', 'Edit', 'Write', 'Glob', 'Grep'] as const;

/** The path of a harness's binary inside its sandbox. */
export function harnessBin(installed: InstalledHarness): string {
  return `${HARNESS_MOUNT}/${installed.package.bin}`;
}

function pathWith(installed: InstalledHarness): string {
  const own = installed.package.path.map((p) => `${HARNESS_MOUNT}/${p}`);
  return [...own, '/usr/local/bin', '/usr/bin', '/bin'].join(':');
}

/** `claude -p … --output-format stream-json --verbose` against the proxy's Anthropic Messages route. */
export function claudeCodeLaunch(input: HarnessLaunchInput): HarnessLaunch {
  return {
    argv: [
      harnessBin(input.installed),
      '-p',
      input.prompt,
      '--output-format',
      'stream-json',
      '--verbose',
      '--model',
      input.model,
      '--tools',
      input.tools.join(','),
      // The sandbox is the boundary: no permission prompts (there is nobody to answer them).
      '--dangerously-skip-permissions',
      '--no-session-persistence',
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      ANTHROPIC_BASE_URL: input.baseUrl,
      ANTHROPIC_API_KEY: input.sessionKey,
      // Only the turns: no telemetry, error reports, update checks or other background requests.
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      DISABLE_TELEMETRY: '1',
      DISABLE_ERROR_REPORTING: '1',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_BUG_COMMAND: '1',
      CLAUDE_CODE_DISABLE_TERMINAL_TITLE: '1',
    },
    files: {},
  };
}

/** A TOML basic string. */
function toml(value: string): string {
  return JSON.stringify(value);
}

/**
 * `codex exec --json` with a model provider whose base URL is the proxy and whose wire is the Responses
 * API; Codex's own sandbox is off (the sandbox it runs in is the boundary) and approvals are never asked.
 */
export function codexLaunch(input: HarnessLaunchInput): HarnessLaunch {
  const codexHome = `${HARNESS_HOME}/.codex`;
  const config = [
    `model = ${toml(input.model)}`,
    'model_provider = "vime"',
    'approval_policy = "never"',
    'sandbox_mode = "danger-full-access"',
    'check_for_update_on_startup = false',
    'disable_response_storage = true',
    '',
    '[model_providers.vime]',
    'name = "vime"',
    `base_url = ${toml(`${input.baseUrl}/v1`)}`,
    'env_key = "VIME_SESSION_KEY"',
    'wire_api = "responses"',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[otel]',
    'exporter = "none"',
    '',
  ].join('\n');
  return {
    argv: [
      harnessBin(input.installed),
      'exec',
      '--json',
      '--skip-git-repo-check',
      '--model',
      input.model,
      input.prompt,
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      CODEX_HOME: codexHome,
      VIME_SESSION_KEY: input.sessionKey,
    },
    files: { [`${codexHome}/config.toml`]: config },
  };
}

/** How each harness is launched. */
export const HARNESS_LAUNCHERS: Readonly<Record<HarnessKind, (input: HarnessLaunchInput) => HarnessLaunch>> =
  {
    'claude-code': claudeCodeLaunch,
    codex: codexLaunch,
  };
