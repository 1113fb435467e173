/**
 * The public surface of a package entry, one line per exported name with its kind (`class HttpClient`,
 * `type Logger`, ...), read with the TypeScript compiler so types count as much as values. The packages'
 * `api.test.ts` compare it with the committed `api.txt`; `pnpm run api` rewrites those files.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = fileURLToPath(new URL('..', import.meta.url));

/** Whether a re-export chain passes an `export type` / `import type`: the name is then a type only. */
function typeOnly(symbol: ts.Symbol, checker: ts.TypeChecker): boolean {
  for (let s = symbol; s.flags & ts.SymbolFlags.Alias; ) {
    if (s.declarations?.some((d) => ts.isTypeOnlyImportOrExportDeclaration(d))) return true;
    const next = checker.getImmediateAliasedSymbol(s);
    if (!next || next === s) return false;
    s = next;
  }
  return false;
}

const RUNTIME_KINDS = new Set(['class', 'function', 'enum', 'const']);

function kindOf(symbol: ts.Symbol, checker: ts.TypeChecker): string {
  const kind = declaredKind(symbol, checker);
  // A class exported as a type has no value at run time: the release check must not expect one.
  return RUNTIME_KINDS.has(kind) && typeOnly(symbol, checker) ? 'type' : kind;
}

function declaredKind(symbol: ts.Symbol, checker: ts.TypeChecker): string {
  const s = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
  const f = s.flags;
  if (f & ts.SymbolFlags.Class) return 'class';
  if (f & ts.SymbolFlags.Function) return 'function';
  if (f & ts.SymbolFlags.Enum) return 'enum';
  if (f & (ts.SymbolFlags.Variable | ts.SymbolFlags.Property)) return 'const';
  if (f & ts.SymbolFlags.Interface) return 'interface';
  if (f & ts.SymbolFlags.TypeAlias) return 'type';
  return 'other';
}

/** One program over all of a package's entry files: each file is parsed once, however many entries share it. */
function programOf(entryFiles: string[]): ts.Program {
  return ts.createProgram(entryFiles, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    customConditions: ['@vime/source'],
    strict: true,
    noEmit: true,
    skipLibCheck: true,
  });
}

/** `kind name` lines of every name an entry file exports, sorted by name. */
export function surface(entryFile: string, program = programOf([entryFile])): string[] {
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(entryFile);
  const symbol = source && checker.getSymbolAtLocation(source);
  if (!symbol) throw new Error(`${entryFile} is not a module`);
  return checker
    .getExportsOfModule(symbol)
    .map((s) => `${kindOf(s, checker)} ${s.name}`)
    .sort((a, b) => a.split(' ')[1]!.localeCompare(b.split(' ')[1]!));
}

/** A package's `api.txt`: one section per entry of its `exports` map. */
export function packageSurface(dir: string): string {
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, { '@vime/source'?: string } | string>;
  };
  const entries = Object.entries(pkg.exports).flatMap(([entry, target]) =>
    typeof target === 'string' || !target['@vime/source']
      ? []
      : [{ entry, file: join(dir, target['@vime/source']) }],
  );
  const program = programOf(entries.map((e) => e.file));
  return entries
    .map(({ entry, file }) => {
      const names = surface(file, program);
      return `# ${pkg.name}${entry === '.' ? '' : entry.slice(1)} (${names.length} names)\n${names.join('\n')}\n`;
    })
    .join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const name of readdirSync(join(root, 'packages'))) {
    const dir = join(root, 'packages', name);
    writeFileSync(join(dir, 'api.txt'), packageSurface(dir));
    console.log(`packages/${name}/api.txt`);
  }
}
