import { describe, expect, it } from 'vitest';
import { parseActions } from './agent.js';
import { codingAgentPolicy, patchedFiles } from './policy.js';
import { formatErrorTemplate, OBSERVATION_LIMIT, observationTemplate, SUBMIT_SENTINEL } from './templates.js';

describe('mini-swe-agent text protocol', () => {
  it('finds fenced actions, stripped', () => {
    expect(parseActions('THOUGHT: x\n\n```mswea_bash_command\n  ls -la  \n```')).toEqual(['ls -la']);
    expect(parseActions('```mswea_bash_command\na\n```\n```mswea_bash_command\nb\n```')).toEqual(['a', 'b']);
    expect(parseActions('```bash\nls\n```')).toEqual([]);
    expect(parseActions('```mswea_bash_command\ncat <<EOF > f\nx\nEOF\n```')).toEqual([
      'cat <<EOF > f\nx\nEOF',
    ]);
  });

  it('shows short outputs whole and elides long ones to head + tail', () => {
    expect(observationTemplate({ exitCode: 0, output: 'ok\n' })).toBe(
      '<returncode>0</returncode>\n<output>\nok\n</output>',
    );
    const long = `${'a'.repeat(6000)}${'b'.repeat(6000)}`;
    const shown = observationTemplate({ exitCode: 1, output: long });
    expect(shown).toContain(`<output_head>\n${'a'.repeat(OBSERVATION_LIMIT / 2)}\n</output_head>`);
    expect(shown).toContain('<elided_chars>\n2000 characters elided\n</elided_chars>');
    expect(shown).toContain(`<output_tail>\n${'b'.repeat(OBSERVATION_LIMIT / 2)}\n</output_tail>`);
    expect(observationTemplate({ exitCode: null, output: '', exception: 'timed out' })).toMatch(
      /^<exception>timed out<\/exception>\n<returncode>-1/,
    );
  });

  it('explains format errors', () => {
    expect(formatErrorTemplate(2, 'stop')).toContain('Expected exactly 1 action, found 2.');
    expect(formatErrorTemplate(0, 'length')).toContain('output token limit');
  });
});

describe('stand-in coding policy', () => {
  const patch =
    'diff --git a/lib/m.py b/lib/m.py\n--- a/lib/m.py\n+++ b/lib/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n';
  const task = {
    problemStatement: 'The value of x is wrong when computing totals.',
    goldPatch: patch,
    workdir: '/testbed',
  };

  it('explores, then fixes, then submits, reading its state from the conversation', () => {
    const policy = codingAgentPolicy([task], { odds: { gold: 1, wrong: 0, malformed: 0 } });
    const start = `<|im_start|>user\n${task.problemStatement}<|im_end|>`;
    expect(policy(start)).toContain('ls -R');
    expect(policy(`${start}<returncode>0</returncode>`)).toContain('nl -ba lib/m.py');
    const fix = policy(`${start}<returncode>0</returncode><returncode>0</returncode>`);
    expect(parseActions(fix)[0]).toContain('git apply /tmp/fix.patch');
    expect(parseActions(fix)[0]).toContain('+x = 2');
    expect(
      policy(`${start}${fix}<returncode>0</returncode><returncode>0</returncode><returncode>0</returncode>`),
    ).toContain(SUBMIT_SENTINEL);
  });

  it('mixes outcomes by the configured odds', () => {
    const policy = codingAgentPolicy([task], { seed: 3 });
    const prompt = `${task.problemStatement}<returncode>0</returncode><returncode>0</returncode>`;
    const kinds = new Set(
      Array.from({ length: 60 }, () => {
        const r = policy(prompt);
        return r.includes('git apply')
          ? 'gold'
          : r.includes('reviewed')
            ? 'wrong'
            : parseActions(r).length === 0
              ? 'malformed'
              : '?';
      }),
    );
    expect(kinds).toEqual(new Set(['gold', 'wrong', 'malformed']));
  });

  it('reads the files a patch touches', () => {
    expect(patchedFiles(patch)).toEqual(['lib/m.py']);
  });
});
