/**
 * Per-repo environments, keyed by a row's `image_name`. A SWE-smith image holds the repository mirror at
 * its work dir (every instance is a branch there), so setup is one `git checkout`. Docker runs the image
 * itself (pulled before the run when the engine lacks it); bubblewrap runs over the same image turned into
 * a rootfs by its provider's image store (a tarball folder or the Docker engine's export), the work dir
 * starting as the image's `/testbed`. What SWE-smith's conventions need comes from the row and its repo
 * profile: the work dir `/testbed`, the conda env (`metadata.sandbox_env`, the profile's `env`), the test
 * command. An `environments.json` next to the dataset is an optional override, and what the local
 * provider needs (it runs no image): a rootfs folder, a workspace template (the mirror, copied into the
 * work dir of each new sandbox), or both:
 *
 *   { "version": 1, "environments": { "<image_name>": { "template": "environments/<name>", "rootfs": "…" } } }
 *
 * (paths relative to the file). The offline task set publishes its environment this way.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { ConfigError, parseWith, type TaskSpec } from '@vime/core';
import type { OpOptions, Sandbox, SandboxSpec } from '@vime/sandbox';
import { z } from 'zod';

/** The file, next to a dataset, that says how each image's environment is put in place. */
export const ENVIRONMENTS_FILE = 'environments.json';

const EnvironmentEntrySchema = z.strictObject({
  /** Host folder copied into the work dir of every new sandbox (the repository mirror). */
  template: z.string().min(1).optional(),
  /** bubblewrap rootfs folder for the image. */
  rootfs: z.string().min(1).optional(),
});

const EnvironmentsFileSchema = z.strictObject({
  version: z.literal(1),
  environments: z.record(z.string().min(1), EnvironmentEntrySchema),
});

/** How one repo image's environment is put in place: from a template or a root filesystem. */
export interface SweEnvironment {
  image: string;
  template?: string | undefined;
  rootfs?: string | undefined;
}

/** The sandbox backends environments are resolved for. */
export type SandboxKind = 'bubblewrap' | 'docker' | 'local';

/** The environments of a dataset, by image. */
export class SweEnvironments {
  readonly #byImage: ReadonlyMap<string, SweEnvironment>;
  /** Where the environments came from, for messages. */
  readonly source: string | undefined;

  constructor(environments: Iterable<SweEnvironment> = [], source?: string) {
    this.#byImage = new Map([...environments].map((e) => [e.image, e]));
    this.source = source;
  }

  /** The environments listed next to a dataset file (none when it has no `environments.json`). */
  static async forDataset(datasetPath: string): Promise<SweEnvironments> {
    const file = join(dirname(resolve(datasetPath)), ENVIRONMENTS_FILE);
    if (!existsSync(file)) return new SweEnvironments();
    return SweEnvironments.load(file);
  }

  /** Read the environments of `file`. */
  static async load(file: string): Promise<SweEnvironments> {
    let raw: unknown;
    try {
      raw = JSON.parse(await readFile(file, 'utf8'));
    } catch (cause) {
      throw new ConfigError(`${file}: not readable JSON (${(cause as Error).message})`, { cause });
    }
    const parsed = parseWith(EnvironmentsFileSchema, raw, file);
    const base = dirname(file);
    const at = (p: string | undefined) => (p === undefined ? undefined : isAbsolute(p) ? p : join(base, p));
    return new SweEnvironments(
      Object.entries(parsed.environments).map(([image, e]) => ({
        image,
        template: at(e.template),
        rootfs: at(e.rootfs),
      })),
      file,
    );
  }

  /** The environment of `image`, if there is one. */
  get(image: string | undefined): SweEnvironment | undefined {
    return image === undefined ? undefined : this.#byImage.get(image);
  }

  /** Every image that has an environment. */
  get images(): string[] {
    return [...this.#byImage.keys()];
  }

  /**
   * The sandbox spec for a task on a backend. Docker runs the row's image; bubblewrap runs over a listed
   * environment's rootfs, else over the row's image (its provider turns it into a rootfs); local needs a
   * listed environment (its template at the work dir, on the host system). The row's sandbox environment
   * (`metadata.sandbox_env`) is the spec's `env`.
   */
  specFor(task: TaskSpec, kind: SandboxKind, labels: Record<string, string> = {}): SandboxSpec {
    const spec: SandboxSpec = { workdir: task.workdir, labels, env: sandboxEnvOf(task) };
    if (kind === 'docker') {
      if (task.image) spec.image = task.image;
      return spec;
    }
    const env = kind === 'bubblewrap' && task.image ? this.get(task.image) : this.#require(task, kind);
    if (env?.rootfs && kind === 'bubblewrap') spec.image = env.rootfs;
    else if (kind === 'bubblewrap' && !env) spec.image = task.image;
    return spec;
  }

  /** Put a listed environment's workspace template at the work dir (an image brings its own). */
  async prepare(sandbox: Sandbox, task: TaskSpec, kind: SandboxKind, options: OpOptions = {}): Promise<void> {
    if (kind === 'docker') return;
    const env = kind === 'bubblewrap' ? this.get(task.image) : this.#require(task, kind);
    if (env?.template) await sandbox.copyIn(env.template, task.workdir, options);
  }

  #require(task: TaskSpec, kind: SandboxKind): SweEnvironment {
    const env = this.get(task.image);
    if (env) return env;
    const where = this.source
      ? `${this.source} lists ${this.images.length} image(s)`
      : `no ${ENVIRONMENTS_FILE} was found next to the dataset`;
    throw new ConfigError(
      `task ${task.id}: no ${kind} environment for image ${JSON.stringify(task.image ?? '(none)')} (${where}); ` +
        `run it with --sandbox bubblewrap or docker (the image holds the repository), or list the image in an ${ENVIRONMENTS_FILE} next to the dataset with a "template" (the repository mirror) or "rootfs" folder`,
    );
  }
}

/** The environment a row's sandboxes get (`metadata.sandbox_env`, from its repo profile), if any. */
function sandboxEnvOf(task: TaskSpec): Record<string, string> | undefined {
  const env = task.metadata.sandbox_env;
  if (env === undefined || env === null || typeof env !== 'object') return undefined;
  return Object.fromEntries(
    Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string'),
  );
}
