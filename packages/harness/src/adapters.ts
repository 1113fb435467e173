/**
 * How each harness is configured and started headless: base URL of the proxy (the sandbox's channel
 * port), the session id as its API key, the model name, its tools, and everything that phones home off.
 * Each adapter returns the files to write (under a private home in the sandbox's `/tmp`), the argv and
 * the environment; `runHarness` does the rest.
 */
import { ConfigError } from '@vime/core';
import type { HarnessKind, InstalledHarness } from './install.js';

/** Where a harness package is bound (read-only) inside the sandbox. */
export const HARNESS_MOUNT = '/opt/vime-harness';
/** Where the Node of a JavaScript harness is bound (read-only) inside the sandbox. */
export const NODE_MOUNT = '/opt/vime-node';
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
  /** Claude Code's built-in tools (`--tools`); ignored by Codex and Qwen Code, whose tools are their own. */
  tools: readonly string[];
  /** Codex: more top-level keys of `config.toml`. */
  codexConfig?: Readonly<Record<string, string | number | boolean>> | undefined;
}

/** How a harness is started in its sandbox: argv, environment and files. */
export interface HarnessLaunch {
  argv: string[];
  env: Record<string, string>;
  /** Files to write before the run: absolute sandbox path → content. */
  files: Record<string, string>;
  /** What the harness reads on stdin (default nothing). */
  stdin?: string | undefined;
}

/** Claude Code's default tool set here: shell and file edits, no web, no subagents unless asked. */
export const CLAUDE_CODE_TOOLS = ['Bash', 'Read', 'Edit', 'Write', 'Glob', 'Grep'] as const;

/** The path of a harness's binary inside its sandbox. */
export function harnessBin(installed: InstalledHarness): string {
  return `${HARNESS_MOUNT}/${installed.package.bin}`;
}

/** The argv head that starts a harness: its binary, or the pinned Node and the harness's script. */
export function harnessCommand(installed: InstalledHarness): string[] {
  const runtime = installed.runtime;
  return runtime ? [`${NODE_MOUNT}/${runtime.package.bin}`, harnessBin(installed)] : [harnessBin(installed)];
}

function pathWith(installed: InstalledHarness): string {
  const own = installed.package.path.map((p) => `${HARNESS_MOUNT}/${p}`);
  const node = (installed.runtime?.package.path ?? []).map((p) => `${NODE_MOUNT}/${p}`);
  return [...own, ...node, '/usr/local/bin', '/usr/bin', '/bin'].join(':');
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
  const own: Record<string, string | boolean> = {
    model: input.model,
    model_provider: 'vime',
    approval_policy: 'never',
    sandbox_mode: 'danger-full-access',
    check_for_update_on_startup: false,
    disable_response_storage: true,
  };
  const extra = input.codexConfig ?? {};
  for (const [key, value] of Object.entries(extra)) {
    if (key in own || !/^[A-Za-z0-9_-]+$/.test(key)) {
      throw new ConfigError(
        `codexConfig.${key}: ${key in own ? 'the launch sets this key' : 'not a bare TOML key'}; leave it out`,
      );
    }
    if (typeof value === 'number' && !Number.isFinite(value)) {
      throw new ConfigError(`codexConfig.${key}: expected a finite number, found ${value}`);
    }
  }
  const config = [
    ...Object.entries({ ...own, ...extra }).map(
      ([k, v]) => `${k} = ${typeof v === 'string' ? toml(v) : String(v)}`,
    ),
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

/**
 * Qwen Code's `settings.json` (keys as its settings schema names them, `chunks/chunk-BW4333PP.js` and the
 * config loader in `chunks/chunk-WH7PDTZL.js` of the package): the OpenAI-compatible auth, and every
 * request besides the turns off. Left on, its managed auto-memory sends a second, unasked completion
 * (a memory-extraction subagent) after the run.
 */
export const QWEN_CODE_SETTINGS = {
  security: { auth: { selectedType: 'openai' } },
  general: { enableAutoUpdate: false, chatRecording: false, preventSystemSleep: false },
  privacy: { usageStatisticsEnabled: false },
  telemetry: { enabled: false },
  memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false, enableAutoSkill: false },
  model: { skipNextSpeakerCheck: true },
  // The tarball's vendored ripgrep is not executable once unpacked; its own grep is used either way.
  tools: { useRipgrep: false },
} as const;

/**
 * `qwen --prompt=<prompt> --output-format stream-json --approval-mode yolo` against the proxy's Chat
 * Completions route (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), run by the pinned Node. Its own sandbox stays
 * off (the sandbox it runs in is the boundary), so nothing asks for approval.
 */
export function qwenCodeLaunch(input: HarnessLaunchInput): HarnessLaunch {
  return {
    argv: [
      ...harnessCommand(input.installed),
      // `=`: a prompt that starts with `-` stays the prompt, never a flag.
      `--prompt=${input.prompt}`,
      '--output-format',
      'stream-json',
      '--auth-type',
      'openai',
      '--model',
      input.model,
      '--approval-mode',
      'yolo',
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      OPENAI_BASE_URL: `${input.baseUrl}/v1`,
      OPENAI_API_KEY: input.sessionKey,
      QWEN_CODE_SUPPRESS_YOLO_WARNING: '1',
    },
    files: { [`${HARNESS_HOME}/.qwen/settings.json`]: `${JSON.stringify(QWEN_CODE_SETTINGS, null, 2)}\n` },
  };
}

/**
 * pi's `~/.pi/agent/models.json` (its docs/models.md): one OpenAI-compatible provider whose base URL is
 * the proxy and whose API key is read from `VIME_SESSION_KEY` (a name, not the key: pi resolves it from
 * the environment); the system prompt as a `system` message and no `reasoning_effort`, as SGLang serves.
 */
function piModels(input: HarnessLaunchInput): string {
  const provider = {
    baseUrl: `${input.baseUrl}/v1`,
    api: 'openai-completions',
    apiKey: 'VIME_SESSION_KEY',
    compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
    models: [{ id: input.model, reasoning: false, input: ['text'] }],
  };
  return `${JSON.stringify({ providers: { vime: provider } }, null, 2)}\n`;
}

/**
 * `pi -p --mode json --provider vime --model <model> --no-session`, the prompt on stdin (pi reads piped
 * stdin as the prompt in print mode; as an argument, a prompt starting with `@` or `-` would be read as a
 * file or a flag). Startup network off (docs/settings.md "Telemetry and update checks"): `PI_OFFLINE`,
 * `PI_SKIP_VERSION_CHECK`, `PI_TELEMETRY=0` and `enableInstallTelemetry: false`. pi has no approvals.
 */
export function piLaunch(input: HarnessLaunchInput): HarnessLaunch {
  const agentDir = `${HARNESS_HOME}/.pi/agent`;
  return {
    argv: [
      ...harnessCommand(input.installed),
      ...['-p', '--mode', 'json', '--provider', 'vime', '--model', input.model, '--no-session'],
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      PI_CODING_AGENT_DIR: agentDir,
      VIME_SESSION_KEY: input.sessionKey,
      PI_OFFLINE: '1',
      PI_SKIP_VERSION_CHECK: '1',
      PI_TELEMETRY: '0',
    },
    files: {
      [`${agentDir}/models.json`]: piModels(input),
      [`${agentDir}/settings.json`]: `${JSON.stringify({ enableInstallTelemetry: false })}\n`,
    },
    stdin: input.prompt,
  };
}

/**
 * opencode's global config (`~/.config/opencode/opencode.json`, keys as its config schema names them): one
 * provider on the bundled `@ai-sdk/openai-compatible` whose base URL is the proxy and whose key is read
 * from `VIME_SESSION_KEY` (`{env:…}` is resolved by opencode), no auto-update or sharing, and no language
 * servers or formatters (a formatter would rewrite files beyond the agent's own edits).
 */
function opencodeConfig(input: HarnessLaunchInput): string {
  const config = {
    autoupdate: false,
    share: 'disabled',
    lsp: false,
    formatter: false,
    model: `vime/${input.model}`,
    small_model: `vime/${input.model}`,
    provider: {
      vime: {
        npm: '@ai-sdk/openai-compatible',
        name: 'vime',
        options: { baseURL: `${input.baseUrl}/v1`, apiKey: '{env:VIME_SESSION_KEY}' },
        models: { [input.model]: { name: input.model } },
      },
    },
  };
  return `${JSON.stringify(config, null, 2)}\n`;
}

/**
 * `opencode run --format json --pure --auto --title vime -m vime/<model>`, the prompt on stdin, against
 * the proxy's Chat Completions route. On stdin the prompt is sent as written; as arguments, opencode
 * joins them and wraps one with a space in quotes, escaping the quotes inside. `--title` names the session, so no title-generation request is sent beside
 * the turns; `--auto` approves every tool (the sandbox it runs in is the boundary). Network besides the
 * turns off: `OPENCODE_DISABLE_MODELS_FETCH` (the models.dev catalogue), `OPENCODE_DISABLE_AUTOUPDATE`,
 * `OPENCODE_DISABLE_SHARE`, `OPENCODE_DISABLE_LSP_DOWNLOAD`, `OPENCODE_DISABLE_DEFAULT_PLUGINS` and
 * `--pure` (plugins installed from npm). opencode also installs `@opencode-ai/plugin` from npm into each
 * config folder unless that folder's `package.json`, `package-lock.json` and `node_modules` already name
 * it (its `Npm.install`); the three are written so, the plugin is never needed (no plugin is loaded).
 */
export function opencodeLaunch(input: HarnessLaunchInput): HarnessLaunch {
  const configDir = `${HARNESS_HOME}/.config/opencode`;
  const plugin = { '@opencode-ai/plugin': input.installed.package.version };
  return {
    argv: [
      harnessBin(input.installed),
      ...['run', '--format', 'json', '--pure', '--auto', '--title', 'vime', '-m', `vime/${input.model}`],
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      XDG_CONFIG_HOME: `${HARNESS_HOME}/.config`,
      VIME_SESSION_KEY: input.sessionKey,
      OPENCODE_DISABLE_MODELS_FETCH: '1',
      OPENCODE_DISABLE_AUTOUPDATE: '1',
      OPENCODE_DISABLE_SHARE: '1',
      OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
      OPENCODE_DISABLE_DEFAULT_PLUGINS: '1',
    },
    files: {
      [`${configDir}/opencode.json`]: opencodeConfig(input),
      [`${configDir}/package.json`]: `${JSON.stringify({ dependencies: plugin })}\n`,
      [`${configDir}/package-lock.json`]: `${JSON.stringify({ lockfileVersion: 3, packages: { '': { dependencies: plugin } } })}\n`,
      [`${configDir}/node_modules/.vime`]: '',
    },
    stdin: input.prompt,
  };
}

/**
 * Gemini CLI's `~/.gemini/settings.json` (keys as its settings schema names them, `bundle/chunk-2YTYPKEZ.js`
 * of the package): the Gemini API key auth (the key is the session's, the base URL the proxy's), and every
 * request besides the turns off: auto-update and its notice, usage statistics (Clearcut), telemetry, the
 * IDE companion, the loop-detection and next-speaker checks (each a completion of its own), and the
 * folder-trust prompt (nobody answers it).
 */
export const GEMINI_CLI_SETTINGS = {
  security: { auth: { selectedType: 'gemini-api-key' }, folderTrust: { enabled: false } },
  general: {
    enableAutoUpdate: false,
    enableAutoUpdateNotification: false,
    checkpointing: { enabled: false },
  },
  privacy: { usageStatisticsEnabled: false },
  telemetry: { enabled: false },
  model: { skipNextSpeakerCheck: true, disableLoopDetection: true },
  ide: { enabled: false },
} as const;

/**
 * `gemini --prompt=<prompt> --output-format stream-json --model <model> --approval-mode yolo`, run by the
 * pinned Node against the proxy's Gemini `generateContent` route: `GOOGLE_GEMINI_BASE_URL` is the proxy,
 * `GEMINI_API_KEY` the session key (sent as `x-goog-api-key`). Its own sandbox stays off (the sandbox it
 * runs in is the boundary), so nothing asks for approval.
 */
export function geminiCliLaunch(input: HarnessLaunchInput): HarnessLaunch {
  return {
    argv: [
      ...harnessCommand(input.installed),
      // `=`: a prompt that starts with `-` stays the prompt, never a flag.
      `--prompt=${input.prompt}`,
      ...['--output-format', 'stream-json', '--model', input.model, '--approval-mode', 'yolo'],
    ],
    env: {
      PATH: pathWith(input.installed),
      HOME: HARNESS_HOME,
      GOOGLE_GEMINI_BASE_URL: input.baseUrl,
      GEMINI_API_KEY: input.sessionKey,
    },
    files: { [`${HARNESS_HOME}/.gemini/settings.json`]: `${JSON.stringify(GEMINI_CLI_SETTINGS, null, 2)}\n` },
  };
}

/** How each harness is launched. */
export const HARNESS_LAUNCHERS: Readonly<Record<HarnessKind, (input: HarnessLaunchInput) => HarnessLaunch>> =
  {
    'claude-code': claudeCodeLaunch,
    codex: codexLaunch,
    'qwen-code': qwenCodeLaunch,
    pi: piLaunch,
    opencode: opencodeLaunch,
    'gemini-cli': geminiCliLaunch,
  };
