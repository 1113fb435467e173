// @ts-check
/**
 * The API reference, `pnpm run docs` → docs/api/ (git-ignored): every entry point of every package's
 * `exports` map, read from the source the `@vime/source` condition names. Any warning fails the build: an
 * export without documentation, a broken link, or a type an export refers to that no entry point exports.
 */
import { readdirSync, readFileSync } from 'node:fs';

const packages = readdirSync('packages').map((dir) => ({
  dir,
  manifest: JSON.parse(readFileSync(`packages/${dir}/package.json`, 'utf8')),
}));
const entryPoints = packages.flatMap(({ dir, manifest }) =>
  Object.values(manifest.exports)
    .filter((target) => typeof target === 'object')
    .map((target) => `packages/${dir}/${target['@vime/source'].replace(/^\.\//, '')}`),
);

/** @type {Partial<import('typedoc').TypeDocOptions>} */
export default {
  name: 'Vime',
  entryPoints,
  entryPointStrategy: 'resolve',
  tsconfig: 'tsconfig.json',
  out: 'docs/api',
  readme: 'none',
  // Source links need a hosted remote; a clone's origin may be a path.
  disableSources: true,
  excludePrivate: true,
  excludeInternal: true,
  // What a user imports must say what it is. Members' own docs are not required: many are fields of
  // option objects whose names say it, or of types inferred from zod schemas.
  requiredToBeDocumented: [
    'Class',
    'Interface',
    'TypeAlias',
    'Variable',
    'Function',
    'Enum',
    'Method',
    'Accessor',
  ],
  packagesRequiringDocumentation: packages.map(({ manifest }) => manifest.name),
  validation: { notExported: true, invalidLink: true, rewrittenLink: true, notDocumented: true },
  treatWarningsAsErrors: true,
  treatValidationWarningsAsErrors: true,
};
