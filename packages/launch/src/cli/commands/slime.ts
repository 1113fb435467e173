/** `vime slime args`: slime's argv for the plan. */
import { shellJoin } from '@vime/core/utils';
import { slimeArgs } from '@vime/slime';
import { type Command, EXIT, parseFlags } from '../command.js';
import { PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';

export const slimeArgsCommand: Command = {
  name: 'slime args',
  synopsis: 'slime args',
  summary: "print slime's argv for the plan",
  help: `Usage: vime slime args [options] [--json]

Print the slime command (python3 train_async.py|train.py ...) as one shell line, or as a JSON array.

${PLAN_HELP}`,
  async run(args, io) {
    const { values } = parseFlags('slime args', args, { ...PLAN_OPTIONS, json: { type: 'boolean' } });
    const { argv } = slimeArgs((await planFrom(values, io)).slime);
    io.stdout(values.json ? `${JSON.stringify(argv)}\n` : `${shellJoin(argv, { expandVariables: true })}\n`);
    return EXIT.ok;
  },
};
