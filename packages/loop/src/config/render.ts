/**
 * The resolved config as a run keeps it: `<out>/run-config.yaml`, in the layout of a config file (so
 * `--config <out>/run-config.yaml` runs it again), each value with a comment saying where it came from.
 * `--resume` reads those comments back.
 */
import { readFileSync } from 'node:fs';
import { Document, isCollection, isScalar, parseDocument } from 'yaml';
import { fileLayout } from './file.js';
import { KNOBS } from './knobs.js';
import type { Config, ConfigField } from './schema.js';

/** Where each value of a resolved config came from: `default`, `file F (key)`, `env NAME`, `flag --x`. */
export type ConfigSources = Partial<Record<ConfigField, string>>;

/** The resolved config's file name in a run's folder (read back by `--resume`). */
export const RUN_CONFIG_FILE = 'run-config.yaml';

const HEADER = [
  ' The resolved config of this run: defaults < --config file < env vars < flags.',
  ' Each value says where it came from. Run it again with: vime-loop --config <this file>',
].join('\n');

/** `run-config.yaml`'s text. */
export function renderRunConfig(config: Config, sources: ConfigSources): string {
  const doc = new Document(fileLayout(config));
  doc.commentBefore = HEADER;
  for (const knob of KNOBS) {
    const node = doc.getIn(knob.key.split('.'), true);
    if (!node || !(isScalar(node) || isCollection(node))) continue;
    // Lists and maps on one line, so the comment sits next to the whole value.
    if (isCollection(node)) node.flow = true;
    node.comment = ` ${sources[knob.field] ?? 'default'}`;
  }
  return doc.toString({ lineWidth: 0 });
}

/** Every knob of a resolved config as the report's table shows it: key, value (file units), source. */
export function configSettings(
  config: Config,
  sources: ConfigSources,
): Array<{ key: string; value: unknown; source: string }> {
  const layout = fileLayout(config);
  return KNOBS.map((knob) => ({
    key: knob.key,
    value: knob.key.split('.').reduce<unknown>((v, k) => (v as Record<string, unknown>)[k], layout),
    source: sources[knob.field] ?? 'default',
  }));
}

/** The sources a run's `run-config.yaml` records (none when it has none, e.g. an older run). */
export function readRunConfigSources(path: string): ConfigSources {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return {};
  }
  const doc = parseDocument(text);
  const sources: ConfigSources = {};
  for (const knob of KNOBS) {
    const node = doc.getIn(knob.key.split('.'), true) as { comment?: string | null | undefined } | undefined;
    const comment = node?.comment?.trim();
    if (comment) sources[knob.field] = comment;
  }
  return sources;
}
