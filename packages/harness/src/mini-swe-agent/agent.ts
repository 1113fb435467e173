/**
 * A TypeScript agent speaking mini-swe-agent's text-based protocol. It talks to any OpenAI-compatible
 * endpoint (here: the capture proxy, with the session id as API key) and runs each action in a sandbox.
 */
import { machine, release, type } from 'node:os';
import type OpenAI from 'openai';
import {
  ACTION_FENCE,
  formatErrorTemplate,
  instanceTemplate,
  observationTemplate,
  SUBMIT_SENTINEL,
  systemTemplate,
} from './templates.js';

/** How a mini-swe-agent run ended. */
export type ExitStatus = 'Submitted' | 'LimitsExceeded' | 'RepeatedFormatError';

/** What a mini-swe-agent run ended with. */
export interface AgentResult {
  exitStatus: ExitStatus;
  /** Text after the submit sentinel line. */
  submission: string;
  /** Model calls made. */
  steps: number;
  formatErrors: number;
  execs: number;
}

/** Options of `runAgent`. */
export interface AgentOptions {
  client: OpenAI;
  model: string;
  task: string;
  /** Runs one action in a fresh shell. */
  exec: (command: string) => Promise<{ exitCode: number | null; output: string; timedOut: boolean }>;
  /** Model calls allowed; 0 means no limit. */
  stepLimit?: number | undefined;
  maxConsecutiveFormatErrors?: number | undefined;
  maxTokens?: number | undefined;
  signal?: AbortSignal | undefined;
}

const actionPattern = new RegExp(`\`\`\`${ACTION_FENCE}\\s*\\n(.*?)\\n\`\`\``, 'gs');

/** The fenced actions of one reply, stripped. */
export function parseActions(text: string): string[] {
  return [...text.matchAll(actionPattern)].map((m) => m[1]!.trim());
}

/**
 * Run mini-swe-agent's protocol: ask the model, run the command it fences, show the output, until it submits.
 */
export async function runAgent(options: AgentOptions): Promise<AgentResult> {
  const { client, model, exec, signal } = options;
  const stepLimit = options.stepLimit ?? 0;
  const maxFormatErrors = options.maxConsecutiveFormatErrors ?? 3;
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: systemTemplate },
    {
      role: 'user',
      content: instanceTemplate({
        task: options.task,
        system: type(),
        release: release(),
        machine: machine(),
      }),
    },
  ];
  let steps = 0;
  let execs = 0;
  let formatErrors = 0;
  let consecutive = 0;
  for (;;) {
    if (stepLimit > 0 && steps >= stepLimit)
      return { exitStatus: 'LimitsExceeded', submission: '', steps, formatErrors, execs };
    signal?.throwIfAborted();
    const completion = await client.chat.completions.create(
      { model, messages, ...(options.maxTokens ? { max_tokens: options.maxTokens } : {}) },
      signal ? { signal } : {},
    );
    steps++;
    const choice = completion.choices[0];
    const reply = choice?.message.content ?? '';
    messages.push({ role: 'assistant', content: reply });
    const actions = parseActions(reply);
    if (actions.length !== 1) {
      formatErrors++;
      if (++consecutive >= maxFormatErrors)
        return { exitStatus: 'RepeatedFormatError', submission: '', steps, formatErrors, execs };
      messages.push({
        role: 'user',
        content: formatErrorTemplate(actions.length, choice?.finish_reason ?? null),
      });
      continue;
    }
    consecutive = 0;
    const result = await exec(actions[0]!);
    execs++;
    const lines = result.output.trimStart().split('\n');
    if (lines[0]?.trim() === SUBMIT_SENTINEL && result.exitCode === 0) {
      return { exitStatus: 'Submitted', submission: lines.slice(1).join('\n'), steps, formatErrors, execs };
    }
    messages.push({
      role: 'user',
      content: observationTemplate({
        exitCode: result.timedOut ? -1 : result.exitCode,
        output: result.output,
        ...(result.timedOut
          ? { exception: 'The command timed out and was killed. Try a faster command.' }
          : {}),
      }),
    });
  }
}
