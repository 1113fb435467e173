/** `vime slime args`: slime's argv for the plan. */
import { type Command, EXIT, parseFlags, shellJoin } from '@vime/core/utils';
import { slimeArgs } from '@vime/slime';
import { PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';

export const slimeArgsCommand: Command = {
  name: 'slime args',
  synopsis: 'slime args',
  summary: "print slime's argv for the plan",
  help: `Usage: vime slime args [options] [--json]

Print the slime command (python3 train_async.py|train.py ...) as one shell line, or as a JSON array.

${PLAN_HELP}`,
  async run(args, io) {
    const { values } = parseFlags(
      'vime slime args',
      args,
      { ...PLAN_OPTIONS, json: { type: 'boolean' } },
      { maxPositionals: 0 },
    );
    const { argv } = slimeArgs((await planFrom(values, io)).slime);
    io.stdout(values.json ? `${JSON.stringify(argv)}\n` : `${shellJoin(argv, { expandVariables: true })}\n`);
    return EXIT.ok;
  },
};
