/**
 * One resolved config from its layers: embedded defaults < `--config FILE` < env vars < flags, validated
 * once, with where each value came from. A wrong value is named the way the user set it (the flag, the
 * variable, or the file's key path), with the value and the fix. `--resume DIR` takes the config the run
 * started with; a flag or file that would change it is refused rather than ignored.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError } from '@vime/core';
import { wantsHelp } from '@vime/core/utils';
import { type ConfigFile, describeIssue, readConfigFile } from './file.js';
import { configFromEnv, configFromFlags } from './flags.js';
import { knobOf } from './knobs.js';
import { type ConfigSources, RUN_CONFIG_FILE, readRunConfigSources } from './render.js';
import { type Config, type ConfigField, ConfigSchema } from './schema.js';

/** A run's config after every layer, with where each value came from. */
export interface ResolvedConfig {
  config: Config;
  sources: ConfigSources;
}

/** Options of resolving a run config: the bin named in messages, the folder, the environment. */
export interface ResolveOptions {
  /** The bin named in messages (default `vime-loop`). */
  command?: string | undefined;
  /** The folder `--config` and `--resume` are taken from (default the process's). */
  cwd?: string | undefined;
}

/** How the user set a field, for messages: the flag, the variable, the file's key, or the field. */
function nameOf(field: string, sources: ConfigSources, file: ConfigFile | undefined): string {
  const source = sources[field as ConfigField];
  const knob = knobOf(field);
  if (source?.startsWith('flag ')) return source.slice(5);
  if (source?.startsWith('env ')) return source.slice(4);
  if (source?.startsWith('file ') && file && knob) return `--config ${file.shown}: ${knob.key}`;
  return knob ? `${knob.key}${knob.flag ? ` (${knob.flag})` : ''}` : field;
}

/** Validate the layered values; every wrong value in one `ConfigError`, one line each. */
function validated(raw: Record<string, unknown>, sources: ConfigSources, file?: ConfigFile): Config {
  const parsed = ConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const field = String(issue.path[0] ?? '');
      const inner = issue.path
        .slice(1)
        .map((k) => `.${String(k)}`)
        .join('');
      return `${nameOf(field, sources, file)}${inner}: ${describeIssue(raw, issue)}`;
    });
    throw new ConfigError(lines.join('\n'));
  }
  const mix = parsed.data.agentMix;
  if (mix && !Object.values(mix).some((w) => w > 0))
    throw new ConfigError(
      `${nameOf('agentMix', sources, file)}: every weight is 0; give at least one agent a weight > 0, or leave the mix out`,
    );
  const c = parsed.data;
  // The debugger writes mini-swe-agent's fenced commands: another harness would parse none of its turns.
  const others = Object.entries(c.agentMix ?? { [c.agent]: 1 }).filter(
    ([a, w]) => a !== 'mini-swe-agent' && w > 0,
  );
  if (c.standInPolicy === 'debugger' && others.length > 0)
    throw new ConfigError(
      `${nameOf('standInPolicy', sources, file)}: debugger speaks mini-swe-agent's protocol only, and ${others.map(([a]) => a).join(', ')} would get no command it can run; run it with the mini-swe-agent agent, or use the scripted policy`,
    );
  // Every turn would fail: the trainer replays a truncated nucleus, and vLLM does not return it.
  if (c.engineKind === 'vllm' && c.engineUrls.length > 0 && c.topP < 1)
    throw new ConfigError(
      `${nameOf('topP', sources, file)}: ${c.topP} with vLLM engines cannot be trained on exactly (vLLM returns no per-token nucleus to replay); sample with top_p 1, or use SGLang engines with the top-p patch`,
    );
  // vLLM refuses more top log probs than its --max-logprobs: every turn would fail.
  if (c.engineKind === 'vllm' && c.topLogprobs !== undefined && c.topLogprobs > c.engineMaxLogprobs)
    throw new ConfigError(
      `${nameOf('topLogprobs', sources, file)}: ${c.topLogprobs} is above the vLLM engines' limit, ${nameOf('engineMaxLogprobs', sources, file)} = ${c.engineMaxLogprobs}; start vLLM with --max-logprobs ${c.topLogprobs} and set that to ${c.topLogprobs}, or lower ${nameOf('topLogprobs', sources, file)}`,
    );
  return c;
}

/** Validate a raw config (flag and variable names in messages). */
export function checkConfig(raw: Record<string, unknown>): Config {
  return validated(raw, {});
}

/** The config a run in `dir` was started with (its `config.json`), for `--resume`. */
export function readStoredConfig(dir: string, shown = dir): Config {
  let text: string;
  try {
    text = readFileSync(join(dir, 'config.json'), 'utf8');
  } catch {
    throw new ConfigError(
      `--resume ${shown}: no run there (no config.json); give the folder of the run to continue`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const parsed = ConfigSchema.safeParse(json);
  if (!parsed.success)
    throw new ConfigError(`--resume ${shown}: its config.json is not a run config of this version`);
  return parsed.data;
}

/** `--resume`: the stored config, with a refusal for any flag or file value that would change it. */
function resumed(
  dir: string,
  asked: Partial<Record<ConfigField, unknown>>,
  askedSources: ConfigSources,
  cwd: string,
): ResolvedConfig {
  const path = resolve(cwd, dir);
  const stored = readStoredConfig(path, dir);
  const changes = Object.entries(asked).filter(([field, value]) => {
    // The terminal's business, and the folder the run is in anyway.
    if (field === 'quiet' || field === 'out') return false;
    return JSON.stringify(value) !== JSON.stringify(stored[field as ConfigField]);
  });
  if (changes.length > 0) {
    const what = changes
      .map(
        ([field, value]) =>
          `${askedSources[field as ConfigField]?.replace(/^(flag|file) /, '')} ${JSON.stringify(value)} (the run has ${JSON.stringify(stored[field as ConfigField])})`,
      )
      .join(', ');
    throw new ConfigError(
      `--resume ${dir} continues the run with the config it started with; ${what} would change it: leave ${changes.length > 1 ? 'those' : 'that'} out, or start a new run with --out`,
    );
  }
  const sources: ConfigSources = { ...readRunConfigSources(join(path, RUN_CONFIG_FILE)) };
  const config: Config = {
    ...stored,
    resume: path,
    out: path,
    quiet: (asked.quiet as boolean | undefined) ?? stored.quiet,
  };
  sources.resume = 'flag --resume';
  if (asked.quiet !== undefined) sources.quiet = 'flag --quiet';
  return { config, sources };
}

/**
 * Flags, env vars and a config file into one validated config with the source of every value, or
 * `'help'` for `--help`.
 */
export function resolveConfig(
  argv: string[],
  env: Record<string, string | undefined> = {},
  options: ResolveOptions = {},
): ResolvedConfig | 'help' {
  const args = argv.filter((a) => a !== '--');
  if (wantsHelp(args)) return 'help';
  const cwd = options.cwd ?? process.cwd();
  const flags = configFromFlags(args, options.command ?? 'vime-loop');
  const file = flags.config === undefined ? undefined : readConfigFile(flags.config, cwd);
  const sources: ConfigSources = {};
  for (const field of Object.keys(file?.values ?? {}) as ConfigField[])
    sources[field] = `file ${file!.shown} (${file!.keys[field]})`;
  if (flags.resume !== undefined) {
    const askedSources = { ...sources };
    for (const field of Object.keys(flags.values) as ConfigField[])
      askedSources[field] = `flag ${knobOf(field)?.flag ?? field}`;
    return resumed(flags.resume, { ...file?.values, ...flags.values }, askedSources, cwd);
  }
  const fromEnv = configFromEnv(env);
  for (const field of Object.keys(fromEnv) as ConfigField[]) sources[field] = `env ${knobOf(field)?.env}`;
  for (const field of Object.keys(flags.values) as ConfigField[])
    sources[field] = `flag ${knobOf(field)?.flag ?? field}`;
  const config = validated({ ...file?.values, ...fromEnv, ...flags.values }, sources, file);
  for (const field of Object.keys(config) as ConfigField[]) sources[field] ??= 'default';
  return { config, sources };
}

/** Flags, env vars and `--config` into a config (`command` names the bin in messages), or 'help'. */
export function parseConfig(
  argv: string[],
  env: Record<string, string | undefined> = {},
  command = 'vime-loop',
): Config | 'help' {
  const resolved = resolveConfig(argv, env, { command });
  return resolved === 'help' ? 'help' : resolved.config;
}
