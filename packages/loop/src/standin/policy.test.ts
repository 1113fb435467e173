import { parseActions, SUBMIT_SENTINEL } from '@vime/harness';
import { describe, expect, it } from 'vitest';
import { codingAgentPolicy, patchedFiles } from './policy.js';

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
