import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { RayJobsClient, renderJobGroup, resolvePlan, validateSkyPilotYaml } from '@vime/launch';
import { startFakeRay } from '@vime/launch/testing';
import { type Bench, fmt, time } from './harness.js';

/** Run a Python snippet that prints one JSON number: milliseconds per iteration (median). */
async function python(script: string, input: string): Promise<number> {
  // Asynchronous: the Ray stand-in answering Python's requests lives in this process.
  const child = promisify(execFile)('python3', ['-c', script], { encoding: 'utf8' });
  child.child.stdin?.end(input);
  return Number((await child).stdout.trim());
}

const PY_TIMER = `
import statistics, sys, time
def median_ms(fn, n):
    for _ in range(5): fn()
    s = []
    for _ in range(n):
        t = time.perf_counter(); fn(); s.append((time.perf_counter() - t) * 1000)
    return statistics.median(s)
`;

export default {
  name: 'launch',
  description: 'SkyPilot YAML render + validation vs PyYAML, Ray Jobs client round trips vs Python requests',
  async run() {
    // 1. The 3-engine reference Job Group: our render and full loader-rule validation, against PyYAML
    //    merely loading the same text (the first step SkyPilot's own loader takes).
    const plan = resolvePlan({ engines: { count: 3 } });
    const text = renderJobGroup(plan.jobGroup);
    const render = await time(() => renderJobGroup(plan.jobGroup), { iterations: 300, warmup: 30 });
    const validate = await time(() => validateSkyPilotYaml(text), { iterations: 300, warmup: 30 });
    const pyLoad = await python(
      `${PY_TIMER}
import yaml
text = sys.stdin.read()
print(median_ms(lambda: list(yaml.safe_load_all(text)), 300))`,
      text,
    );
    const yamlRatio = validate.median / pyLoad;

    // 2. Ray Jobs REST: submit + get against a loopback dashboard stand-in, our undici client vs
    //    Python requests (what `ray job submit` uses underneath).
    const ray = await startFakeRay({ script: { pendingMs: 60_000 } });
    const client = new RayJobsClient({ address: ray.url });
    let n = 0;
    const ours = await time(
      async () => {
        const { submissionId } = await client.submit({
          entrypoint: 'python3 train.py',
          submission_id: `ts-${n++}`,
        });
        await client.get(submissionId);
      },
      { iterations: 300, warmup: 20 },
    );
    const pyRequests = await python(
      `${PY_TIMER}
import itertools, requests
url = sys.stdin.read().strip()
s = requests.Session()
c = itertools.count()
def once():
    sid = f"py-{next(c)}"
    s.post(url + "/api/jobs/", json={"entrypoint": "python3 train.py", "submission_id": sid}).raise_for_status()
    s.get(url + "/api/jobs/" + sid).raise_for_status()
print(median_ms(once, 300))`,
      ray.url,
    );
    await client.close();
    await ray.close();
    const rayRatio = ours.median / pyRequests;

    return [
      {
        title: 'SkyPilot Job Group (3 engines): render and validate under the loader rules',
        columns: ['operation', 'median', 'vs PyYAML load'],
        rows: [
          ['vime renderJobGroup', fmt.ms(render.median), fmt.ratio(render.median / pyLoad)],
          ['vime validateSkyPilotYaml (parse + all rules)', fmt.ms(validate.median), fmt.ratio(yamlRatio)],
          ['PyYAML safe_load_all (reference, parse only)', fmt.ms(pyLoad), fmt.ratio(1)],
        ],
        checks: [
          {
            target: 'full validation costs no more than PyYAML parsing the same text (≤ 1.0×)',
            measured: fmt.ratio(yamlRatio),
            ok: yamlRatio <= 1,
          },
        ],
      },
      {
        title: 'Ray Jobs REST on loopback: submit + get round trip',
        columns: ['client', 'median per round trip', 'ratio'],
        rows: [
          ['vime RayJobsClient (undici)', fmt.ms(ours.median), fmt.ratio(rayRatio)],
          ['Python requests.Session (reference)', fmt.ms(pyRequests), fmt.ratio(1)],
        ],
        checks: [
          {
            target: 'round trip no slower than Python requests (≤ 1.0×)',
            measured: fmt.ratio(rayRatio),
            ok: rayRatio <= 1,
          },
        ],
        notes: [
          'The dashboard stand-in runs in the benchmark process, so its own work counts against the vime client.',
        ],
      },
    ];
  },
} satisfies Bench;
