/**
 * pnpm's hooks. `beforePacking` shapes the package.json that goes into a tarball (`pnpm pack`,
 * `pnpm release:pack`): the `@vime/source` condition of every export points at `src/*.ts`, which is
 * for this workspace only and not shipped, so a packed `exports` keeps `types` and `import` alone.
 */

/** An `exports` value without the `@vime/source` condition, at any depth. */
function withoutSourceCondition(value) {
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== '@vime/source')
      .map(([key, inner]) => [key, withoutSourceCondition(inner)]),
  );
}

export const hooks = {
  beforePacking(pkg) {
    if (pkg.exports !== undefined) pkg.exports = withoutSourceCondition(pkg.exports);
    return pkg;
  },
};
