/** `vime plan`: the resolved plan and its preflight report. */
import { ConfigError } from '@vime/core';
import { type CliIo, type Command, EXIT, parseFlags, shellJoin } from '@vime/core/utils';
import { slimeArgs } from '@vime/slime';
import type { LaunchPlan } from '../../plan.js';
import { preflight } from '../../preflight.js';
import { PLAN_HELP, PLAN_OPTIONS, planFrom } from '../plan-options.js';
import { printSimulation, SIMULATE_HELP, SIMULATE_OPTIONS, simulatePlan } from './simulate.js';

function printPlan(plan: LaunchPlan, io: CliIo): void {
  const jg = plan.jobGroup;
  io.stdout(`Job Group ${jg.name} (${jg.infra})\n`);
  io.stdout(
    `  ${jg.trainer.name.padEnd(10)} ${jg.trainer.accelerators}${jg.trainer.numNodes > 1 ? ` x ${jg.trainer.numNodes} nodes` : ''}\n`,
  );
  for (const job of plan.engineJobs)
    io.stdout(
      `  ${job.padEnd(10)} ${jg.engines.accelerators} (${jg.engines.kind}, port ${jg.engines.port})\n`,
    );
  io.stdout(`Engines (from the trainer): ${plan.engineUrls.join(' ')}\n`);
  if (jg.volume)
    io.stdout(
      `Volume ${jg.volume.name}: ${jg.volume.size} ${jg.volume.accessMode} at ${jg.volume.mountPath}\n`,
    );
  const s = plan.slime;
  io.stdout(
    `slime: ${s.mode} · weights ${s.weights.mode} over ${s.weights.transport} · batch ${s.rollout.batchSize} × ${s.rollout.samplesPerPrompt} = ${s.rollout.batchSize * s.rollout.samplesPerPrompt} concurrent rollouts · TP ${s.parallelism.tensor}\n`,
  );
}

/** slime's argv, or undefined when slime would reject the config (preflight reports why). */
function slimeArgvOf(plan: LaunchPlan): string[] | undefined {
  try {
    return slimeArgs(plan.slime).argv;
  } catch (error) {
    if (ConfigError.isInstance(error) && error.data?.problems) return undefined;
    throw error;
  }
}

export const planCommand: Command = {
  name: 'plan',
  synopsis: 'plan',
  summary: 'print the resolved plan and its preflight report',
  help: `Usage: vime plan [options] [--json]

Resolve the plan (Job Group, volume, slime command) and run preflight. Exits 3 when preflight finds errors.

  --json   print the resolved plan and report as JSON

${SIMULATE_HELP}

${PLAN_HELP}`,
  async run(args, io) {
    const { values } = parseFlags(
      'vime plan',
      args,
      { ...PLAN_OPTIONS, ...SIMULATE_OPTIONS, json: { type: 'boolean' } },
      { maxPositionals: 0 },
    );
    const plan = await planFrom(values, io);
    const report = preflight(plan);
    const argv = slimeArgvOf(plan);
    const extra = (['from', 'max-engines', 'target-step'] as const).find((f) => values[f] !== undefined);
    if (extra && !values.simulate)
      throw new ConfigError(`--${extra} needs --simulate; see \`vime plan --help\``);
    const simulation = values.simulate ? await simulatePlan(plan, values, io) : undefined;
    if (values.json) {
      io.stdout(
        `${JSON.stringify({ plan: { ...plan, env: undefined }, slime: argv ?? null, preflight: report, ...(simulation ? { simulation } : {}) }, null, 2)}\n`,
      );
    } else {
      printPlan(plan, io);
      io.stdout(
        argv
          ? `Command: ${shellJoin(argv, { expandVariables: true })}\n`
          : 'Command: none (slime would reject this config; see preflight)\n',
      );
      io.stdout(report.problems.length ? 'Preflight:\n' : 'Preflight: ok\n');
      for (const p of report.problems)
        io.stdout(`  ${p.severity === 'error' ? 'error' : 'warning'} ${p.path}: ${p.message}\n`);
      if (simulation) printSimulation(simulation, plan, io);
    }
    return report.ok ? EXIT.ok : EXIT.checks;
  },
};
