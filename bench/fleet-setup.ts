/**
 * What `pnpm bench fleet`'s driver and its parent share: the providers under test (a fleet of bubblewrap
 * backends, plus a Docker engine's backend when one is given, or one bubblewrap provider alone), and a
 * count of what a run left on this host, made by looking (folders, cgroups, processes, mounts, containers),
 * not by asking the reaper.
 */

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  bubblewrapProvider,
  DEFAULT_DOCKER_IMAGE,
  DockerEngine,
  dockerBackend,
  type FleetBackend,
  type FleetProvider,
  fleetProvider,
  type ReapReport,
  reapOrphans,
  type SandboxProvider,
} from '@vime/sandbox';

export type Mode = 'fleet' | 'single';

export interface SetupOptions {
  mode: Mode;
  /** Parent folder of every backend's sandbox folders (`<root>/<backend>`). */
  root: string;
  run: string;
  /** Bubblewrap backends of the fleet. */
  backends: number;
  /** Capacity of each bubblewrap backend. */
  capacity: number;
  /** A Docker engine (`unix:///…/docker.sock`) to add as a fleet backend, and its capacity. */
  docker?: string | undefined;
  dockerCapacity: number;
  maxStarting: number;
  /** Longer than a rollout's guard plus grading (the fleet's `lifetimeMs`). */
  lifetimeMs: number;
}

export interface Setup {
  provider: SandboxProvider;
  fleet: FleetProvider | undefined;
  /** Each backend's name and sandbox folder (bubblewrap) or engine (docker). */
  backends: Array<{ name: string; rootDir?: string | undefined; docker?: string | undefined }>;
  /** The image a spec names on each backend (docker needs one; bubblewrap uses the host's /usr). */
  imageFor(backend: string): string | undefined;
  reap(): Promise<ReapReport>;
  close(): Promise<void>;
}

const bwrapBackend = (name: string, rootDir: string, capacity: number): FleetBackend => ({
  name,
  provider: bubblewrapProvider({ rootDir }),
  capacity,
  reap: (o) => reapOrphans({ ...o, rootDir, docker: false }),
});

export function setup(options: SetupOptions): Setup {
  if (options.mode === 'single') {
    const rootDir = join(options.root, 'single');
    return {
      provider: bubblewrapProvider({ rootDir }),
      fleet: undefined,
      backends: [{ name: 'single', rootDir }],
      imageFor: () => undefined,
      reap: () => reapOrphans({ run: options.run, rootDir, docker: false }),
      close: async () => {},
    };
  }
  const backends: Setup['backends'] = [];
  const specs: FleetBackend[] = [];
  for (let i = 0; i < options.backends; i++) {
    const rootDir = join(options.root, `bwrap-${i}`);
    backends.push({ name: `bwrap-${i}`, rootDir });
    specs.push(bwrapBackend(`bwrap-${i}`, rootDir, options.capacity));
  }
  if (options.docker) {
    backends.push({ name: 'docker', docker: options.docker });
    specs.push(dockerBackend({ name: 'docker', host: options.docker, capacity: options.dockerCapacity }));
  }
  const fleet = fleetProvider({
    backends: specs,
    lifetimeMs: options.lifetimeMs,
    run: options.run,
    maxStarting: options.maxStarting,
  });
  return {
    provider: fleet,
    fleet,
    backends,
    imageFor: (backend) => (backend === 'docker' ? DEFAULT_DOCKER_IMAGE : undefined),
    reap: () => fleet.reapOrphans({ run: options.run }),
    close: () => fleet.close(),
  };
}

/** What a run left, counted on this host (and on the Docker engine, when one is a backend). */
export interface Leftovers {
  /** Sandbox folders under the backends' root folders. */
  folders: number;
  /** Cgroups named after a sandbox of the run, in every hierarchy. */
  cgroups: number;
  /** Processes whose environment names a sandbox of the run. */
  processes: number;
  /** Mounts under the backends' root folders. */
  mounts: number;
  /** Containers labelled with the run. */
  containers: number;
  total: number;
}

/** The run's tag in sandbox ids (`sbx-<tag>-…`): the first 8 hex digits of sha256(run), as the sandbox package names them. */
const tagOf = (run: string) => `sbx-${createHash('sha256').update(run).digest('hex').slice(0, 8)}-`;

function dirs(dir: string): string[] {
  try {
    return readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}

function cgroupsNamed(prefix: string): number {
  let n = 0;
  const walk = (dir: string, depth: number) => {
    for (const name of dirs(dir)) {
      if (name.startsWith(prefix)) n++;
      else if (depth < 8) walk(join(dir, name), depth + 1);
    }
  };
  walk('/sys/fs/cgroup', 0);
  return n;
}

function processesMarked(marker: string): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/environ`, 'latin1').includes(marker)) n++;
    } catch {
      // gone, or not ours to read
    }
  }
  return n;
}

function mountsUnder(roots: string[]): number {
  const lines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  return lines.filter((l) => {
    const point = l.split(' ')[4] ?? '';
    return roots.some((r) => point.startsWith(`${r}/`));
  }).length;
}

export async function countLeftovers(s: Setup, run: string): Promise<Leftovers> {
  const tag = tagOf(run);
  const roots = s.backends.flatMap((b) => (b.rootDir ? [b.rootDir] : []));
  const folders = roots.reduce((n, r) => n + dirs(r).filter((d) => d.startsWith('sbx-')).length, 0);
  const cgroups = cgroupsNamed(`vime-${tag}`);
  const processes = processesMarked(`VIME_SANDBOX_ID=${tag}`);
  const mounts = mountsUnder(roots);
  let containers = 0;
  for (const b of s.backends) {
    if (!b.docker) continue;
    const engine = new DockerEngine({ host: b.docker });
    try {
      const list = await engine.json<unknown[]>('GET', '/containers/json', {
        query: { all: true, filters: JSON.stringify({ label: [`vime.run=${run}`] }) },
      });
      containers += list.length;
    } finally {
      await engine.close();
    }
  }
  const total = folders + cgroups + processes + mounts + containers;
  return { folders, cgroups, processes, mounts, containers, total };
}

/** What a SIGKILLed run left, one reap through the same providers, and what is left after it. */
export async function reapAndCount(s: Setup, run: string) {
  const before = await countLeftovers(s, run);
  const report = await s.reap();
  const after = await countLeftovers(s, run);
  const errors = report.errors.map((e) => `${e.id}: ${(e.error as Error)?.message ?? String(e.error)}`);
  return { before, removed: report.removed.length, errors, after };
}
