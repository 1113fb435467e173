import { MARKERS } from './eval-report.js';

/**
 * The eval script SWE-smith writes (`set -uxo pipefail`, the `: '>>>>> …'` markers traced by `set -x`), plus
 * SWE-bench 5's exit-code record after the end marker so a log can be checked against the runner's verdict.
 */
export function evalScript(options: { workdir: string; testCommand: string }): string {
  return [
    '#!/bin/bash',
    'set -uxo pipefail',
    `cd ${options.workdir}`,
    `: '${MARKERS.start}'`,
    options.testCommand,
    'VIME_TEST_EXIT_CODE=$?',
    `: '${MARKERS.end}'`,
    `echo '${MARKERS.exitCode}: '"$VIME_TEST_EXIT_CODE"`,
    '',
  ].join('\n');
}
