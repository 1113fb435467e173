/**
 * The Python lint. It runs ruff's rules engine through its WebAssembly build (npm
 * @astral-sh/ruff-wasm-nodejs), so a checkout needs no Python tool to lint: `[tool.ruff]` and
 * `[tool.ruff.lint]` of python/pyproject.toml are the configuration, every `.py` file that git tracks or
 * would track and that the `include` globs name (relative to python/, as ruff reads them) is checked, less
 * those the `exclude`/`extend-exclude` globs name. Prints `path:line:col: CODE message` per finding.
 *
 *   node --import tsx scripts/ruff.ts        exit 0 clean, 1 findings, 2 a configuration error
 *
 * The WebAssembly build checks a file's text without its path or a file system, so what needs them is done
 * here: the file selection, `lint.per-file-ignores`, and the first-party modules that import sorting puts
 * in a block of their own (as ruff does, those found in the `src` folders).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Diagnostic, PositionEncoding, Workspace } from '@astral-sh/ruff-wasm-nodejs';
import { parse } from 'smol-toml';

const root = fileURLToPath(new URL('..', import.meta.url));
const configFile = join(root, 'python', 'pyproject.toml');
/** Where the configuration's paths start, relative to the repository root. */
const base = 'python';
/** Keys that choose files; the WebAssembly build has no files to choose from. */
const FILE_KEYS = ['include', 'extend-include', 'exclude', 'extend-exclude', 'src', 'force-exclude'];

type Table = Record<string, unknown>;

class ConfigError extends Error {}

/** A glob as ruff writes them (`*`, `?`, `**`, `[...]`), matched against a whole `/`-separated path. */
function globToRegExp(glob: string): RegExp {
  let source = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*' && glob[i + 1] === '*') {
      // `**/` matches any run of folders, none included; a final `**` matches the rest.
      const slash = glob[i + 2] === '/';
      source += slash ? '(?:.*/)?' : '.*';
      i += slash ? 2 : 1;
    } else if (c === '*') source += '[^/]*';
    else if (c === '?') source += '[^/]';
    else if (c === '[' && glob.indexOf(']', i) > i) {
      const end = glob.indexOf(']', i);
      source += `[${glob.slice(i + 1, end).replace(/^!/, '^')}]`;
      i = end;
    } else source += c.replace(/[.+^${}()|\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

/** A configured path glob, from python/ to the repository root (`../packages/*` → `packages/*`). */
function fromRoot(glob: string): RegExp {
  return globToRegExp(posix.normalize(posix.join(base, glob)));
}

/** ruff's exclude semantics: a glob with no `/` names a file or folder anywhere; else a path from python/. */
function excluder(globs: string[]): (file: string) => boolean {
  const anywhere = globs.filter((g) => !g.includes('/')).map(globToRegExp);
  const anchored = globs.filter((g) => g.includes('/')).map(fromRoot);
  return (file) => {
    const parts = file.split('/');
    if (parts.some((part) => anywhere.some((re) => re.test(part)))) return true;
    return parts.some((_, i) => anchored.some((re) => re.test(parts.slice(0, i + 1).join('/'))));
  };
}

function strings(value: unknown, key: string): string[] {
  if (value === undefined) return [];
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) return value;
  throw new ConfigError(
    `${configFile}: tool.ruff.${key} must be a list of strings, got ${JSON.stringify(value)}`,
  );
}

function readConfig(): Table {
  let text: string;
  try {
    text = readFileSync(configFile, 'utf8');
  } catch (error) {
    throw new ConfigError(`cannot read ${configFile}: ${(error as Error).message}`);
  }
  let toml: Table;
  try {
    toml = parse(text) as Table;
  } catch (error) {
    throw new ConfigError(`${configFile}: ${(error as Error).message}`);
  }
  const ruff = (toml.tool as Table | undefined)?.ruff as Table | undefined;
  if (!ruff) throw new ConfigError(`${configFile} has no [tool.ruff] table`);
  return ruff;
}

/** The `.py` files git tracks or would track (ignored ones never), that the configuration selects. */
function selectedFiles(ruff: Table): string[] {
  const include = strings(ruff.include, 'include').map(fromRoot);
  if (include.length === 0) throw new ConfigError(`${configFile}: tool.ruff.include names no files`);
  const excluded = excluder([
    ...strings(ruff.exclude, 'exclude'),
    ...strings(ruff['extend-exclude'], 'extend-exclude'),
  ]);
  const listed = execFileSync(
    'git',
    ['ls-files', '--cached', '--others', '--exclude-standard', '-z', '--', '*.py'],
    { cwd: root, encoding: 'utf8' },
  );
  return [...new Set(listed.split('\0').filter(Boolean))]
    .filter((file) => include.some((re) => re.test(file)) && !excluded(file))
    .sort();
}

/** `lint.per-file-ignores`: for a file, the code prefixes it ignores (`E4` ignores E401, E402, …). */
function perFileIgnores(lint: Table): (file: string) => string[] {
  const table = (lint['per-file-ignores'] ?? {}) as Record<string, unknown>;
  const rules = Object.entries(table).map(([glob, codes]) => ({
    match: glob.includes('/') ? fromRoot(glob) : globToRegExp(glob),
    anywhere: !glob.includes('/'),
    codes: strings(codes, `lint.per-file-ignores."${glob}"`),
  }));
  return (file) =>
    rules.filter((r) => r.match.test(r.anywhere ? posix.basename(file) : file)).flatMap((r) => r.codes);
}

/** ruff's first-party modules: each `.py` file and folder at the top of a `src` folder. */
function firstParty(ruff: Table): string[] {
  return strings(ruff.src, 'src').flatMap((dir) => {
    const path = join(root, base, dir);
    const entries = (() => {
      try {
        return readdirSync(path, { withFileTypes: true });
      } catch {
        return []; // a folder still to come
      }
    })();
    return entries
      .filter((e) => (e.isDirectory() && e.name !== '__pycache__') || /\.pyi?$/.test(e.name))
      .map((e) => e.name.replace(/\.pyi?$/, ''));
  });
}

function engineSettings(ruff: Table): Table {
  const settings = Object.fromEntries(Object.entries(ruff).filter(([key]) => !FILE_KEYS.includes(key)));
  const { 'per-file-ignores': _, ...lint } = (ruff.lint as Table | undefined) ?? {};
  const isort = (lint.isort as Table | undefined) ?? {};
  const known = [...strings(isort['known-first-party'], 'lint.isort.known-first-party'), ...firstParty(ruff)];
  return { ...settings, lint: { ...lint, isort: { ...isort, 'known-first-party': [...new Set(known)] } } };
}

function format(file: string, d: Diagnostic): string {
  const { row, column } = d.start_location;
  return `${file}:${row}:${column}: ${d.code ?? 'syntax-error'} ${d.message}`;
}

function main(): number {
  let ruff: Table;
  let files: string[];
  try {
    ruff = readConfig();
    files = selectedFiles(ruff);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`ruff: ${error.message}\n`);
    return 2;
  }
  const ignores = perFileIgnores((ruff.lint as Table | undefined) ?? {});
  const workspace = new Workspace(engineSettings(ruff), PositionEncoding.Utf16);
  const findings: string[] = [];
  for (const file of files) {
    const ignored = ignores(file);
    const diagnostics = workspace.check(readFileSync(join(root, file), 'utf8')) as Diagnostic[];
    for (const d of diagnostics) {
      if (d.code && ignored.some((prefix) => d.code!.startsWith(prefix))) continue;
      findings.push(format(file, d));
    }
  }
  for (const line of findings) process.stdout.write(`${line}\n`);
  const where = relative(root, configFile);
  const summary = `ruff ${Workspace.version()} (WebAssembly), ${where}: ${files.length} files`;
  process.stderr.write(findings.length ? `${summary}, ${findings.length} findings\n` : `${summary}, clean\n`);
  return findings.length ? 1 : 0;
}

process.exitCode = main();
