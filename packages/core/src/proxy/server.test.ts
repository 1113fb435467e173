// The pre-parse JSON scan of the capture proxy (`checkJsonShape`): depth and value counts must be those
// of the JSON structure, whatever brackets, commas, quotes and backslashes its strings hold.
import { describe, expect, it } from 'vitest';
import { checkJsonShape } from './server.js';

const limits = (maxJsonDepth: number, maxJsonValues: number) => ({ maxJsonDepth, maxJsonValues });
const refused = async (text: string, l = limits(3, 10)) => {
  try {
    await checkJsonShape(text, l);
    return undefined;
  } catch (error) {
    return (error as { status: number }).status;
  }
};

describe('checkJsonShape', () => {
  it('counts containers and commas of the structure only', async () => {
    expect(await refused('{"a":[1,2,3],"b":{"c":4}}')).toBeUndefined(); // 3 containers + 4 commas
    expect(await refused('[1,2,3,4,5,6,7,8,9,10,11]')).toBe(413);
    expect(await refused('[[[1]]]')).toBeUndefined();
    expect(await refused('[[[[1]]]]')).toBe(400);
  });

  it('skips strings whole: brackets, commas, escaped quotes and backslash runs inside them', async () => {
    const strings = [
      '"[[[[[[[[,,,,,,,,,,,,{{{{"',
      '"a \\" [[[[[[[[ ,,,,,,,,,,,, still a string"',
      '"ends in a backslash \\\\"',
      '"\\\\\\" [[[[[[ ,,,,,,,,,,,,,, \\\\\\\\"',
      '"\\u005b\\u005b\\u005b\\u005b"',
    ];
    for (const s of strings) {
      expect(JSON.parse(s)).toEqual(expect.any(String)); // each is one valid JSON string
      expect(await refused(`{"k":${s},"v":[${s}]}`), s).toBeUndefined();
    }
    // the structure after an escaped-backslash string is counted again
    expect(await refused('["\\\\",[[[1]]]]')).toBe(400);
  });

  it('leaves text that is not JSON to the parser', async () => {
    expect(await refused('{"unterminated: [[[[[[[[[[')).toBeUndefined();
    expect(await refused('not json')).toBeUndefined();
  });

  it('scans a large body in slices, yielding to other work between them', async () => {
    const text = `[${'"x",'.repeat(2_000_000)}1]`; // 8 MB
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    await checkJsonShape(text, limits(64, 3_000_000));
    clearInterval(timer);
    expect(ticks).toBeGreaterThan(1);
    expect(await refused(text, limits(64, 1_000_000))).toBe(413);
  });
});
