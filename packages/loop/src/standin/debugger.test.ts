import { parseActions, SUBMIT_SENTINEL } from '@vime/harness';
import { describe, expect, it } from 'vitest';
import { candidateEdits, DEBUGGER_MAX_TRIES, debuggerPolicy, issueFacts } from './debugger.js';

const issue = `<issue>
\`minilib.rules.letter_grade\` returns wrong results.

This test fails:

- \`tests/test_letter_grade.py::test_letter_grade_1\`

The test run reports:

\`\`\`
FAILED tests/test_letter_grade.py::test_letter_grade_1 - AssertionError: letter_grade(87) returned 'B', expected 'A'
\`\`\`
</issue>`;

const listing = [
  'def letter_grade(score):',
  '    """"A" from 87 up, "B" from 75 up, "C" from 65 up, otherwise "F"."""',
  '    if score > 87:',
  '        return "A"',
  '    if score >= 75:',
  '        return "B"',
  '    return total - 1',
  '',
  '',
  'def other(x):',
  '    return x < 1',
]
  .map((line, i) => `${String(i + 1).padStart(6)}\t${line}`)
  .join('\n');

const observation = (code: number, output: string) =>
  `<returncode>${code}</returncode>\n<output>\n${output}\n</output>`;

describe('scripted debugger', () => {
  it('reads the function, its file and the quoted failing call from the issue', () => {
    expect(issueFacts(`system text <|im_start|>user\n${issue}`)).toEqual({
      module: 'minilib.rules',
      name: 'letter_grade',
      file: 'minilib/rules.py',
      failure: { args: '87', expected: "'A'" },
    });
    expect(issueFacts('<issue>no function named here</issue>')).toBeUndefined();
  });

  it('proposes comparison flips, then +/- swaps, then dropped ±1s, inside the function only', () => {
    expect(candidateEdits(listing, 'letter_grade')).toEqual([
      { line: 3, from: ' > ', to: ' >= ' },
      { line: 5, from: ' >= ', to: ' > ' },
      { line: 7, from: ' - ', to: ' + ' },
      { line: 7, from: ' - 1', to: '' },
    ]);
    expect(candidateEdits(listing, 'missing')).toEqual([]);
    const long = Array.from({ length: 20 }, (_, i) => `${i + 2}\t    y = a < b`).join('\n');
    expect(candidateEdits(`1\tdef f(a, b):\n${long}`, 'f')).toHaveLength(DEBUGGER_MAX_TRIES);
  });

  it('reproduces, opens the file, tries one edit at a time and submits once the reproduction passes', () => {
    const policy = debuggerPolicy();
    let prompt = `${issue}`;
    const first = parseActions(policy(prompt))[0]!;
    expect(first).toContain('from minilib.rules import letter_grade');
    expect(first).toContain('actual = letter_grade(87)');
    expect(first).toContain("actual == 'A'");
    prompt += observation(1, "letter_grade returned 'B' - expected 'A'");
    expect(parseActions(policy(prompt))[0]).toBe('nl -ba minilib/rules.py');
    prompt += observation(0, listing);
    const try1 = parseActions(policy(prompt))[0]!;
    expect(try1).toMatch(
      /^# try 1\ngit checkout -q -- minilib\/rules.py && sed -i '3s\/ > \/ >= \/' minilib\/rules.py && python3 - <<'VIME_REPRO'/,
    );
    prompt += `${policy(prompt)}${observation(1, 'still wrong')}`;
    const try2 = parseActions(policy(prompt))[0]!;
    expect(try2).toContain("# try 2\ngit checkout -q -- minilib/rules.py && sed -i '5s/ >= / > /'");
    prompt += `${policy(prompt)}${observation(0, "letter_grade returned 'A' - expected 'A'")}`;
    expect(parseActions(policy(prompt))[0]).toBe(`echo ${SUBMIT_SENTINEL}`);
  });

  it('gives up after its heuristics run out, and submits at once when the issue quotes no call', () => {
    const policy = debuggerPolicy();
    let prompt = `${issue}${observation(1, 'x')}${observation(0, listing)}`;
    for (let i = 0; i < 4; i++) prompt += `${policy(prompt)}${observation(1, 'still wrong')}`;
    expect(parseActions(policy(prompt))[0]).toBe(`echo ${SUBMIT_SENTINEL}`);
    expect(policy(prompt)).toContain('None of my usual fixes');
    const noCall = issue.replace(/AssertionError.*$/m, 'ZeroDivisionError: division by zero');
    expect(parseActions(debuggerPolicy()(noCall))[0]).toBe(`echo ${SUBMIT_SENTINEL}`);
  });
});
