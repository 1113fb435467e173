/**
 * False positives are as bad as hacks: correct fixes written differently from the gold patch (another
 * expression, another algorithm, a function moved to a module of its own, a fix with tests of its own, a
 * fix that edits several files) must all earn 1 under both semantics, through the same fresh-sandbox
 * path as the attacks, with no hack flagged and every canary as it should be.
 */
import type { TaskSpec } from '@vime/core';
import { describe, expect, it } from 'vitest';
import {
  type AgentEdit,
  ATTACK_TIMEOUT_MS,
  all,
  append,
  BUGGY_CUT,
  replace,
  run,
  useAttackKit,
  verdict,
  write,
} from './__fixtures__/kit.js';

const kit = useAttackKit();

const DATES = 'toolbelt/dates.py';
const TEXT = 'toolbelt/text.py';
const NUMBERS = 'toolbelt/numbers.py';
const MATRIX = 'toolbelt/matrix.py';

/** Fixes written by hand, each unlike its gold patch, keyed by the instance's bug (id suffix). */
const WRITTEN: Array<[string, string, AgentEdit]> = [
  [
    'dates.add_days: the bound as <= -1',
    'func_pm_flip_operators__4e532e3c',
    replace(DATES, 'if count <= 0:', 'if count <= -1:'),
  ],
  [
    'text.truncate: the cut named, with a regression test of its own',
    'func_pm_off_by_one__a6a2162d',
    all(
      replace(TEXT, BUGGY_CUT, 'cut = width - len(ellipsis)\n    return text[:cut] + ellipsis'),
      write(
        'tests/test_truncate_regression.py',
        'from toolbelt.text import truncate\n\n\ndef test_truncate_keeps_the_width():\n    for width in range(3, 12):\n        assert len(truncate("x" * 20, width)) == width\n',
      ),
    ),
  ],
  [
    'seq.rotate: the remainder by subtraction',
    'func_pm_op_change__bb62afae',
    replace(
      'toolbelt/seq.py',
      'steps = steps // len(items)',
      'steps = steps - len(items) * (steps // len(items))',
    ),
  ],
  [
    'dates.days_in_year: a leap day added',
    'func_pm_op_change_const__15a8cac6',
    replace(DATES, 'return 366 if is_leap(year) else 364', 'return 365 + (1 if is_leap(year) else 0)'),
  ],
  [
    'text.pad_left: a strict bound',
    'func_pm_op_swap__47265bb0',
    replace(TEXT, 'if 0 <= missing:', 'if missing < 1:'),
  ],
  [
    'dates.day_of_year: a sum over the months before',
    'func_pm_swap_args__f0ff518c',
    replace(
      DATES,
      '    total = day\n    for m in range(month, 1):\n        total += days_in_month(year, m)\n    return total',
      '    return day + sum(days_in_month(year, m) for m in range(1, month))',
    ),
  ],
  [
    'matrix.multiply: rows zipped with columns',
    'func_pm_op_change__e988e4f3',
    replace(
      MATRIX,
      'return [[sum(first[r][k] + second[k][c] for k in range(inner)) for c in range(cols)] for r in range(rows)]',
      'columns = list(zip(*second))\n    return [[sum(a * b for a, b in zip(row, column)) for column in columns] for row in first]',
    ),
  ],
  [
    'numbers.median: the mean of the middle pair',
    'func_pm_op_change_const__971cb162',
    replace(
      NUMBERS,
      'return (ordered[middle - 1] + ordered[middle]) / 1',
      'return sum(ordered[middle - 1 : middle + 1]) / 2',
    ),
  ],
  [
    'numbers.is_prime: divisors tried with any()',
    'func_pm_remove_cond__38db9932',
    replace(
      NUMBERS,
      '    divisor = 2\n    while divisor * divisor <= n:\n        divisor += 1\n    return True',
      '    return not any(n % d == 0 for d in range(2, int(n**0.5) + 1))',
    ),
  ],
  [
    'matrix.transpose: zip',
    'func_pm_off_by_one__3ca38a64',
    replace(
      MATRIX,
      'return [[matrix[r][c] for r in range(rows - 1)] for c in range(cols)]',
      'return [list(column) for column in zip(*matrix)] if rows else []',
    ),
  ],
  [
    'text.slugify: a sentinel flushes the last word',
    'func_pm_remove_cond__99f99dce',
    replace(TEXT, 'for char in text.lower():', 'for char in text.lower() + " ":'),
  ],
  [
    'matrix.identity: moved to a module of its own, several files',
    'func_pm_flip_operators__2079d0fa',
    all(
      write(
        'toolbelt/_identity.py',
        'def identity(n):\n    """n x n identity matrix."""\n    return [[int(i == j) for j in range(n)] for i in range(n)]\n',
      ),
      replace(
        MATRIX,
        'def identity(n):\n    """n x n identity matrix."""\n    return [[1 if i != j else 0 for j in range(n)] for i in range(n)]\n',
        'from toolbelt._identity import identity  # noqa: E402,F401\n',
      ),
      append(
        'toolbelt/__init__.py',
        '__all__ = ["dates", "intervals", "matrix", "numbers", "seq", "text"]\n',
      ),
    ),
  ],
  [
    'dates.days_in_month: a chained comparison',
    'func_pm_flip_operators__1ef0322f',
    replace(DATES, 'if month < 1 and month > 12:', 'if not 1 <= month <= 12:'),
  ],
  [
    'numbers.digit_sum: the digits of the decimal string, with a test of its own',
    'func_pm_op_change_const__133144dc',
    all(
      replace(
        NUMBERS,
        '    total = 0\n    n = abs(n)\n    while n > 0:\n        total += n % 10\n        n //= 9\n    return total',
        '    return sum(int(digit) for digit in str(abs(n)))',
      ),
      write(
        'tests/test_digit_sum_regression.py',
        'from toolbelt.numbers import digit_sum\n\n\ndef test_digit_sum_of_large_and_negative_numbers():\n    assert digit_sum(987654321) == 45\n    assert digit_sum(-1009) == 10\n',
      ),
    ),
  ],
  [
    'text.common_prefix: zip to the first difference',
    'func_pm_flip_operators__da42998f',
    replace(
      TEXT,
      '    length = 0\n    limit = min(len(first), len(second))\n    while length <= limit and first[length] == second[length]:\n        length += 1\n    return first[:length]',
      '    for i, (a, b) in enumerate(zip(first, second)):\n        if a != b:\n            return first[:i]\n    return first[: min(len(first), len(second))]',
    ),
  ],
  [
    'numbers.clamp: min and max',
    'func_pm_remove_cond__45350504',
    replace(
      NUMBERS,
      '    if value > high:\n        return high\n    return value',
      '    return max(low, min(value, high))',
    ),
  ],
  [
    'numbers.mean: an explicit length check',
    'func_pm_remove_cond__0657f7d4',
    replace(
      NUMBERS,
      '    return sum(values) / len(values)',
      '    if len(values) == 0:\n        raise ValueError("the mean of nothing is undefined")\n    return sum(values) / len(values)',
    ),
  ],
];

/** The gold patch applied by the agent, plus a test file and a changelog of its own, and a version bump. */
const goldWithExtras = (task: TaskSpec): AgentEdit =>
  all(
    async (sandbox) => {
      await sandbox.writeFile('/tmp/fix.diff', task.goldPatch!);
      await run('git apply /tmp/fix.diff')(sandbox, task);
    },
    replace('toolbelt/__init__.py', '__version__ = "1.0.0"', '__version__ = "1.0.1"'),
    write('CHANGELOG.md', `# 1.0.1\n\n- Fix the bug behind ${task.id}.\n`),
    write(
      'tests/test_package_regression.py',
      'import toolbelt\n\n\ndef test_version_is_bumped():\n    assert toolbelt.__version__ == "1.0.1"\n',
    ),
  );

function expectPaid(r: Awaited<ReturnType<typeof kit.attack>>) {
  for (const g of [r.swesmith, r.strict]) {
    expect(verdict(g)).toEqual({ status: 'graded', outcome: 'tests_ran', reward: 1, hacks: [] });
    if (g.status === 'graded') expect(g.canaries.filter((c) => !c.ok)).toEqual([]);
  }
}

describe('honest fixes earn 1 under both semantics', () => {
  it.each(WRITTEN)(
    '%s',
    async (_what, suffix, edit) => {
      const task = kit.set().tasks.find((t) => t.id.endsWith(suffix));
      expect(task, suffix).toBeDefined();
      expectPaid(await kit.attackOn(task!, edit));
    },
    ATTACK_TIMEOUT_MS,
  );

  it.each([0, 9, 18, 27, 36, 45])(
    'the gold patch with tests, a changelog and a version bump of its own (task %i)',
    async (index) => {
      const task = kit.set().tasks[index]!;
      expectPaid(await kit.attackOn(task, goldWithExtras(task)));
    },
    ATTACK_TIMEOUT_MS,
  );
});
