import { z } from 'zod';
import { typedArray } from './validate.js';

/** A file placed in the sandbox: before the agent loop (`files`) or after it for grading (`hiddenFiles`). */
export const StagedFileSchema = z.object({
  path: z.string().min(1),
  content: z.union([z.string(), typedArray('Uint8Array')]),
  mode: z.number().int().optional(),
});
/** A file placed in the sandbox: before the agent loop (`files`) or after it for grading (`hiddenFiles`). */
export type StagedFile = z.infer<typeof StagedFileSchema>;

/** How a finished rollout is graded. `swesmith`: hidden tests + log parser; `exitCode`: the test command's exit code. */
export const GraderSpecSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('swesmith'),
    failToPass: z.array(z.string()),
    passToPass: z.array(z.string()),
    /** Log parser id, e.g. `swesmith:<mirror>` or `pytest_v2`. */
    parser: z.string().optional(),
  }),
  z.object({ kind: z.literal('exitCode') }),
  z.object({
    kind: z.literal('custom'),
    name: z.string(),
    options: z.record(z.string(), z.unknown()).optional(),
  }),
]);
/** How a finished rollout is graded. */
export type GraderSpec = z.infer<typeof GraderSpecSchema>;

/** A dataset-agnostic task: what the agent is asked, where it runs, and how it is graded. */
export const TaskSpecSchema = z.object({
  /** Stable id (SWE-smith: `instance_id`). Groups of one prompt share it. */
  id: z.string().min(1),
  /** The task text given to the agent. */
  prompt: z.string(),
  /** Container image or prepared rootfs name the sandbox starts from. */
  image: z.string().optional(),
  /** Warm-pool name (Kubernetes-safe, ≤ 58 characters). */
  pool: z.string().optional(),
  /** Working directory inside the sandbox. */
  workdir: z.string().default('/testbed'),
  /** Command that establishes the task's start state (e.g. checks out the buggy commit). */
  setupCommand: z.string().optional(),
  files: z.array(StagedFileSchema).default([]),
  hiddenFiles: z.array(StagedFileSchema).default([]),
  /** Command that runs the tests or evaluation. */
  testCommand: z.string().optional(),
  grader: GraderSpecSchema,
  /** Reference solution as a unified diff, for self-checks. */
  goldPatch: z.string().optional(),
  metadata: z.record(z.string(), z.unknown()).default({}),
});
/** A dataset-agnostic task: what the agent is asked, where it runs and how it is graded. */
export type TaskSpec = z.output<typeof TaskSpecSchema>;
/** A task as given, before defaults are filled in. */
export type TaskSpecInput = z.input<typeof TaskSpecSchema>;
