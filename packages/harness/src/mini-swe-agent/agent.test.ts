import { describe, expect, it } from 'vitest';
import { parseActions } from './agent.js';
import { formatErrorTemplate, OBSERVATION_LIMIT, observationTemplate } from './templates.js';

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
