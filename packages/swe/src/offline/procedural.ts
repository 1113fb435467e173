/**
 * The procedural task family, its pure part: seeded small Python repositories drawn from the function
 * bank, one bug per instance injected by one operator family, the tests' text, and the train / held-out
 * split. Files, git and pytest are `procedural-build.ts`.
 */
import { createHash } from 'node:crypto';
import { ConfigError } from '@vime/core';
import { seededRandom } from '@vime/core/utils';
import { type FunctionSpec, type SiteKind, TEMPLATES, type TemplateRandom } from './procedural-templates.js';

/** The operator families a bug is injected by. */
export const OPERATOR_FAMILIES = [
  'flip_comparison',
  'off_by_one',
  'wrong_constant',
  'swapped_args',
  'wrong_operator',
  'missing_branch',
] as const;
/** One of the bug families the procedural generator injects (the kind in an instance id). */
export type OperatorFamily = (typeof OPERATOR_FAMILIES)[number];

/** Which marked sites each family strikes. */
const FAMILY_SITES: Record<OperatorFamily, readonly SiteKind[]> = {
  flip_comparison: ['cmp'],
  off_by_one: ['obo', 'obodrop'],
  wrong_constant: ['const'],
  swapped_args: ['args'],
  wrong_operator: ['op'],
  missing_branch: ['branch'],
};

/** The split a row belongs to: training, held-out instances, or the held-out operator family. */
export type ProceduralSplit = 'train' | 'heldout' | 'heldout_family';

const COMPARISON_FLIP: Record<string, string> = {
  '<': '<=',
  '<=': '<',
  '>': '>=',
  '>=': '>',
  '==': '!=',
  '!=': '==',
};
const OPERATOR_CHANGE: Record<string, string> = { '+': '-', '-': '+', '*': '+', '//': '%' };

/** One marked site of a source: its kind, the clean text and where the marker stands. */
export interface Site {
  kind: SiteKind;
  text: string;
  start: number;
  end: number;
}

/** The sites of a marked source, in order. */
export function sitesOf(marked: string): Site[] {
  return [...marked.matchAll(/⟨(\w+):([^⟩]*)⟩/g)].map((m) => ({
    kind: m[1] as SiteKind,
    text: m[2]!,
    start: m.index,
    end: m.index + m[0].length,
  }));
}

/** The clean code of a marked source (every site's own text). */
export function cleanSource(marked: string): string {
  return marked.replace(/⟨\w+:([^⟩]*)⟩/g, '$1');
}

/** What the operator of `site`'s kind writes instead of its text; `roll` in [0, 1) picks among variants. */
export function mutateSite(site: Site, roll: number): string {
  const { kind, text } = site;
  switch (kind) {
    case 'cmp':
      return COMPARISON_FLIP[text] ?? fail(site);
    case 'op':
      return OPERATOR_CHANGE[text] ?? fail(site);
    case 'const': {
      const n = Number(text);
      if (!Number.isInteger(n)) fail(site);
      const delta = 2 + Math.floor(roll * 8);
      return String(n === 0 || n === -1 ? n + delta : n + (roll < 0.5 ? delta : -delta));
    }
    case 'obo':
      return `${text}${roll < 0.5 ? ' - 1' : ' + 1'}`;
    case 'obodrop':
      return '';
    case 'args': {
      const parts = text.split(', ');
      if (parts.length !== 2) fail(site);
      return `${parts[1]}, ${parts[0]}`;
    }
    case 'branch':
      return '';
  }
}

function fail(site: Site): never {
  throw new ConfigError(
    `procedural template: the ${site.kind} site ${JSON.stringify(site.text)} has no mutation`,
  );
}

/** The marked source with one site mutated and the others clean. */
export function mutatedSource(marked: string, site: Site, roll: number): string {
  return (
    cleanSource(marked.slice(0, site.start)) + mutateSite(site, roll) + cleanSource(marked.slice(site.end))
  );
}

const PACKAGES = ['minilib', 'tallykit', 'smallcalc', 'ledgerlite', 'toolkit'];
const MODULES = ['core', 'numbers', 'series', 'rules', 'helpers', 'measure'];

/** One function placed in a generated repository: its module file and its test file. */
export interface PlacedFunction extends FunctionSpec {
  template: string;
  /** `pkg/module.py`. */
  file: string;
  module: string;
  testFile: string;
}

/** A generated repository with its one bug, before any file is written. */
export interface ProceduralCandidate {
  /** The attempt number within the set (its seed is derived from the set's seed and this). */
  index: number;
  family: OperatorFamily;
  packageName: string;
  functions: PlacedFunction[];
  /** The function the bug is in (`functions[target]`). */
  target: number;
  /** The clean and the buggy text of the target's module. */
  cleanFiles: Record<string, string>;
  buggyFile: { file: string; content: string };
  /** What the operator did, in words (kept in the manifest, never shown to the agent). */
  description: string;
  /** The site's kind, its clean text and what the operator wrote instead. */
  site: { kind: SiteKind; before: string; after: string };
}

/** A deterministic stream in [0, 1) for attempt `index` of a set seeded with `seed`. */
function attemptRandom(seed: number, index: number): () => number {
  const digest = createHash('sha256').update(`procedural:${seed}:${index}`).digest();
  return seededRandom(digest.readUInt32LE(0));
}

function templateRandom(next: () => number): TemplateRandom {
  return {
    pick: (items) => items[Math.floor(next() * items.length)]!,
    int: (low, high) => low + Math.floor(next() * (high - low + 1)),
  };
}

/**
 * Attempt `index` of the set seeded with `seed`, for `family`: a repository of four functions from the
 * bank in two modules, the bug in one whose template has a site of the family. Undefined when no template
 * has such a site (never for the built-in bank).
 */
export function proceduralCandidate(
  seed: number,
  index: number,
  family: OperatorFamily,
): ProceduralCandidate {
  const next = attemptRandom(seed, index);
  const r = templateRandom(next);
  const kinds = FAMILY_SITES[family];
  const eligible = TEMPLATES.filter((t) =>
    sitesOf(t.build(templateRandom(() => 0)).source).some((s) => kinds.includes(s.kind)),
  );
  if (eligible.length === 0) throw new ConfigError(`procedural: no template has a ${family} site`);
  const targetTemplate = r.pick(eligible);
  const others = TEMPLATES.filter((t) => t !== targetTemplate);
  for (let i = others.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [others[i], others[j]] = [others[j]!, others[i]!];
  }
  const chosen = [targetTemplate, ...others.slice(0, 3)];
  const packageName = r.pick(PACKAGES);
  const [moduleA, moduleB] = shuffled(MODULES, next).slice(0, 2) as [string, string];
  const target = Math.floor(next() * chosen.length);
  const order = [...chosen.slice(1, target + 1), targetTemplate, ...chosen.slice(target + 1)];
  const functions = order.map((t, i): PlacedFunction => {
    const spec = t.build(r);
    const module = i < 2 ? moduleA : moduleB;
    return {
      ...spec,
      template: t.id,
      module: `${packageName}.${module}`,
      file: `${packageName}/${module}.py`,
      testFile: `tests/test_${spec.name}.py`,
    };
  });
  const placed = functions[target]!;
  const sites = sitesOf(placed.source).filter((s) => kinds.includes(s.kind));
  const site = r.pick(sites);
  const roll = next();
  const cleanFiles = repositoryFiles(packageName, functions, () => undefined);
  const buggy = repositoryFiles(packageName, functions, (f) =>
    f === placed ? mutatedSource(f.source, site, roll) : undefined,
  );
  const before = site.text;
  const after = mutateSite(site, roll);
  return {
    index,
    family,
    packageName,
    functions,
    target,
    cleanFiles,
    buggyFile: { file: placed.file, content: buggy[placed.file]! },
    description: `${placed.name}: ${JSON.stringify(before)} became ${JSON.stringify(after)}`,
    site: { kind: site.kind, before, after },
  };
}

function shuffled<T>(items: readonly T[], next: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** The source files of a repository (tests are written once expected values are known). */
function repositoryFiles(
  packageName: string,
  functions: readonly PlacedFunction[],
  override: (f: PlacedFunction) => string | undefined,
): Record<string, string> {
  const files: Record<string, string> = { [`${packageName}/__init__.py`]: '', 'tests/__init__.py': '' };
  for (const f of functions) {
    const code = override(f) ?? cleanSource(f.source);
    files[f.file] = files[f.file] === undefined ? code : `${files[f.file]}\n\n${code}`;
  }
  return files;
}

/** Python source of `text` as a string literal safe inside an f-string's literal part. */
function braces(text: string): string {
  return text.replace(/\{/g, '{{').replace(/\}/g, '}}');
}

/**
 * A function's test file: one test per case, each assertion message naming the function, its input,
 * what it returned and what was expected, so a failure points at the symptom.
 */
export function testFileText(f: PlacedFunction, expected: readonly string[]): string {
  const tests = f.cases.map((args, i) => {
    const call = `${f.name}(${args})`;
    return `def test_${f.name}_${i + 1}():
    actual = ${call}
    assert actual == ${expected[i]}, f"${braces(call).replace(/"/g, '\\"')} returned {actual!r}, expected ${braces(expected[i]!).replace(/"/g, '\\"')}"
`;
  });
  return `from ${f.module} import ${f.name}\n\n\n${tests.join('\n\n')}`;
}

/**
 * The split of instance `index` of `count`: the held-out family's rows are `heldout_family`; of the rest,
 * a seeded choice puts `heldoutFraction` of them in `heldout`.
 */
export function splitOf(
  family: OperatorFamily,
  options: {
    heldoutFamily: OperatorFamily | null | undefined;
    heldoutFraction: number;
    seed: number;
    key: string;
  },
): ProceduralSplit {
  if (family === options.heldoutFamily) return 'heldout_family';
  const digest = createHash('sha256').update(`split:${options.seed}:${options.key}`).digest();
  return digest.readUInt32LE(0) / 4294967296 < options.heldoutFraction ? 'heldout' : 'train';
}
