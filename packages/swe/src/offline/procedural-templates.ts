/**
 * The function bank of the procedural task family: small Python functions with their inputs, written with
 * marked sites where a bug operator may strike. A site is `⟨kind:text⟩`: the clean code has `text`; the
 * operator of `kind` rewrites it (see `procedural.ts`). Sites never nest. Expected outputs are not written
 * here: the generator asks the clean Python for them, so they are right by construction.
 */

/** Where an operator may strike: the comparison, arithmetic operator, constant, bound, argument pair, guard. */
export type SiteKind = 'cmp' | 'op' | 'const' | 'obo' | 'obodrop' | 'args' | 'branch';

/** One function of a generated repository: its name, marked source and test inputs (Python argument lists). */
export interface FunctionSpec {
  name: string;
  source: string;
  cases: string[];
}

/** A template of the bank: picks names, constants and inputs with `pick`/`int`. */
export interface FunctionTemplate {
  id: string;
  build(r: TemplateRandom): FunctionSpec;
}

/** The seeded choices a template makes. */
export interface TemplateRandom {
  pick<T>(items: readonly T[]): T;
  /** A whole number in [low, high]. */
  int(low: number, high: number): number;
}

const list = (values: readonly number[]) => `[${values.join(', ')}]`;

export const TEMPLATES: readonly FunctionTemplate[] = [
  {
    id: 'count_above',
    build(r) {
      const name = r.pick(['count_above', 'count_over', 'tally_above']);
      const limit = r.int(3, 9);
      return {
        name,
        source: `def ${name}(values, limit):
    """Count the values strictly greater than limit."""
    total = ⟨const:0⟩
    for value in values:
        if value ⟨cmp:>⟩ limit:
            total = total ⟨op:+⟩ 1
    return total
`,
        cases: [
          `${list([limit - 2, limit, limit + 1, limit])}, ${limit}`,
          `[], ${limit}`,
          `${list([limit + 3, limit + 4])}, ${limit}`,
          `${list([limit, limit - 1])}, ${limit}`,
        ],
      };
    },
  },
  {
    id: 'letter_grade',
    build(r) {
      const name = r.pick(['letter_grade', 'grade_of', 'band_for']);
      const a = r.int(85, 92);
      const b = a - r.int(8, 12);
      const c = b - r.int(8, 12);
      return {
        name,
        source: `def ${name}(score):
    """"A" from ${a} up, "B" from ${b} up, "C" from ${c} up, otherwise "F"."""
    if score ⟨cmp:>=⟩ ⟨const:${a}⟩:
        return "A"
⟨branch:    if score >= ${b}:
        return "B"
⟩    if score >= ${c}:
        return "C"
    return "F"
`,
        cases: [`${a}`, `${a + 3}`, `${b}`, `${b + 1}`, `${c}`, `${c - 1}`],
      };
    },
  },
  {
    id: 'running_totals',
    build(r) {
      const name = r.pick(['running_totals', 'prefix_sums', 'cumulative']);
      return {
        name,
        source: `def ${name}(values):
    """Element i of the result is the sum of values[0] .. values[i]."""
    out = []
    total = 0
    for i in range(⟨obo:len(values)⟩):
        total = total ⟨op:+⟩ values[i]
        out.append(total)
    return out
`,
        cases: [
          list([r.int(1, 5), r.int(1, 5), r.int(1, 5)]),
          '[]',
          list([r.int(2, 9)]),
          list([4, -1, 3, 2]),
        ],
      };
    },
  },
  {
    id: 'percent_of',
    build(r) {
      const name = r.pick(['percent_of', 'share_percent', 'as_percent']);
      const whole = r.pick([8, 20, 40, 50]);
      return {
        name,
        source: `def ${name}(part, whole):
    """part as a whole-number percentage of whole, rounded down; 0 when whole is 0."""
⟨branch:    if whole == 0:
        return 0
⟩    return part ⟨op:*⟩ ⟨const:100⟩ // whole
`,
        cases: [`${whole / 2}, ${whole}`, `3, 0`, `${whole}, ${whole}`, `1, ${whole}`],
      };
    },
  },
  {
    id: 'elapsed_minutes',
    build(r) {
      const name = r.pick(['elapsed_minutes', 'minutes_between', 'duration_of']);
      const start = r.int(1, 9) * 30;
      return {
        name,
        source: `def _${name}_span(first, last):
    return last ⟨op:-⟩ first


def ${name}(start, end):
    """Minutes from start to end, both minutes since midnight; an end before start is on the next day."""
    span = _${name}_span(⟨args:start, end⟩)
⟨branch:    if span < 0:
        span = span + 1440
⟩    return span
`,
        cases: [`${start}, ${start + 45}`, `${start + 20}, ${start}`, `0, 1439`, `${start}, ${start}`],
      };
    },
  },
  {
    id: 'sum_between',
    build(r) {
      const name = r.pick(['sum_between', 'sum_range', 'total_from_to']);
      const low = r.int(1, 4);
      return {
        name,
        source: `def ${name}(low, high):
    """Sum of the whole numbers from low to high, both included."""
    total = 0
    for n in range(low, high⟨obodrop: + 1⟩):
        total = total + n
    return total
`,
        cases: [`${low}, ${low + 3}`, `${low}, ${low}`, `5, 4`, `0, ${r.int(2, 6)}`],
      };
    },
  },
  {
    id: 'net_price',
    build(r) {
      const name = r.pick(['net_price', 'price_after', 'discounted']);
      const price = r.int(20, 60);
      return {
        name,
        source: `def _${name}_minus(amount, discount):
    return amount - discount


def ${name}(price, discount):
    """The price after taking off discount, never below ${0}."""
    result = _${name}_minus(⟨args:price, discount⟩)
⟨branch:    if result < 0:
        return 0
⟩    return result
`,
        cases: [`${price}, 5`, `${price}, ${price + 10}`, `${price}, 0`, `10, 3`],
      };
    },
  },
  {
    id: 'first_index',
    build(r) {
      const name = r.pick(['first_index', 'index_of', 'position_of']);
      const target = r.int(2, 9);
      return {
        name,
        source: `def ${name}(values, target):
    """Index of the first occurrence of target in values, or -1 when it is absent."""
    for i in range(len(values)):
        if values[i] ⟨cmp:==⟩ target:
            return i
    return ⟨const:-1⟩
`,
        cases: [
          `${list([1, target, target])}, ${target}`,
          `${list([target + 1])}, ${target}`,
          `${list([target])}, ${target}`,
          `[], ${target}`,
        ],
      };
    },
  },
  {
    id: 'is_leap',
    build(r) {
      const name = r.pick(['is_leap', 'leap_year', 'has_leap_day']);
      return {
        name,
        source: `def ${name}(year):
    """Gregorian leap year: divisible by 4, except centuries, which must be divisible by 400."""
    if year % ⟨const:400⟩ == 0:
        return True
⟨branch:    if year % 100 == 0:
        return False
⟩    return year % 4 ⟨cmp:==⟩ 0
`,
        cases: ['2000', '1900', `${2000 + 4 * r.int(1, 6)}`, '2023', '1600'],
      };
    },
  },
  {
    id: 'last_items',
    build(r) {
      const name = r.pick(['last_items', 'tail_of', 'take_last']);
      return {
        name,
        source: `def ${name}(values, count):
    """The last count items of values, in order; all of them when count is at least len(values)."""
⟨branch:    if count >= len(values):
        return list(values)
⟩    return values[⟨obo:len(values) - count⟩:]
`,
        cases: [
          `${list([1, 2, 3, 4, 5])}, 2`,
          `${list([7, 8])}, 5`,
          `${list([r.int(1, 9), 2, 3])}, 1`,
          `[], 0`,
        ],
      };
    },
  },
  {
    id: 'power_of',
    build(r) {
      const name = r.pick(['power_of', 'raise_to', 'pow_int']);
      const base = r.int(2, 4);
      return {
        name,
        source: `def _${name}_pow(base, exponent):
    result = 1
    for _ in range(exponent):
        result = result ⟨op:*⟩ base
    return result


def ${name}(base, exponent):
    """base raised to a whole exponent >= 0."""
    return _${name}_pow(⟨args:base, exponent⟩)
`,
        cases: [`${base}, 3`, `${base}, 0`, `${base + 1}, 2`, '5, 1'],
      };
    },
  },
  {
    id: 'count_words',
    build(r) {
      const name = r.pick(['count_long_words', 'long_word_count', 'words_longer']);
      const min = r.int(3, 5);
      return {
        name,
        source: `def ${name}(text, min_length):
    """How many space-separated words of text have at least min_length letters."""
    count = 0
    for word in text.split():
        if len(word) ⟨cmp:>=⟩ min_length:
            count = count ⟨op:+⟩ 1
    return count
`,
        cases: [
          `"${'a'.repeat(min)} bb ${'c'.repeat(min + 2)}", ${min}`,
          `"", ${min}`,
          `"${'x'.repeat(min - 1)}", ${min}`,
          `"one two three", ${min}`,
        ],
      };
    },
  },
  {
    id: 'chunk_count',
    build(r) {
      const name = r.pick(['chunk_count', 'pages_needed', 'batches_for']);
      const size = r.int(3, 6);
      return {
        name,
        source: `def ${name}(items, size):
    """How many chunks of at most size items hold items items."""
⟨branch:    if items == 0:
        return 0
⟩    return (items ⟨op:-⟩ 1) // size⟨obodrop: + 1⟩
`,
        cases: [`${size * 2}, ${size}`, `${size * 2 + 1}, ${size}`, `0, ${size}`, `1, ${size}`],
      };
    },
  },
];
