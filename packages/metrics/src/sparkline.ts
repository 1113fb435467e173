const BARS = '▁▂▃▄▅▆▇█';

/**
 * A terminal sparkline (`▁▂▃▄▅▆▇█`), one character per value, scaled between `min` (default: the
 * smallest value, or 0 when all are non-negative) and `max` (default: the largest). `null`/NaN print as
 * a space. With `width`, values are first averaged into that many slices.
 */
export function sparkline(
  values: ReadonlyArray<number | null>,
  options: { min?: number | undefined; max?: number | undefined; width?: number | undefined } = {},
): string {
  let data = values;
  if (options.width !== undefined && values.length > options.width) {
    const w = options.width;
    data = Array.from({ length: w }, (_, i) => {
      const from = Math.floor((i * values.length) / w);
      const to = Math.floor(((i + 1) * values.length) / w);
      let sum = 0;
      let n = 0;
      for (let j = from; j < to; j++) {
        const v = values[j];
        if (v !== null && v !== undefined && !Number.isNaN(v)) {
          sum += v;
          n++;
        }
      }
      return n === 0 ? null : sum / n;
    });
  }
  const finite = data.filter((v): v is number => v !== null && Number.isFinite(v));
  if (finite.length === 0) return ' '.repeat(data.length);
  const lo = options.min ?? finite.reduce((a, b) => Math.min(a, b), 0);
  const hi = options.max ?? finite.reduce((a, b) => Math.max(a, b));
  return data
    .map((v) => {
      if (v === null || !Number.isFinite(v)) return ' ';
      if (hi <= lo) return BARS[0];
      const level = Math.round(((Math.min(hi, Math.max(lo, v)) - lo) / (hi - lo)) * (BARS.length - 1));
      return BARS[level];
    })
    .join('');
}
