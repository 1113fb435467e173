/** Ray Jobs REST shapes (`ray/dashboard/modules/job/common.py`, `pydantic_models.py`). */
import { z } from 'zod';

/** Schema of a job's status. */
export const JobStatusSchema = z.enum(['PENDING', 'RUNNING', 'STOPPED', 'SUCCEEDED', 'FAILED']);
/** A Ray job's status. */
export type JobStatus = z.infer<typeof JobStatusSchema>;

/** Terminal statuses never change again. */
export const TERMINAL_STATUSES: ReadonlySet<JobStatus> = new Set(['STOPPED', 'SUCCEEDED', 'FAILED']);
/** Whether a job status is final (it never changes again). */
export const isTerminal = (status: JobStatus): boolean => TERMINAL_STATUSES.has(status);

const optional = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

/** Schema of a job's details, as Ray's Jobs API returns them. */
export const JobDetailsSchema = z.looseObject({
  type: z.enum(['SUBMISSION', 'DRIVER']),
  job_id: optional(z.string()),
  submission_id: optional(z.string()),
  driver_info: optional(z.looseObject({ id: z.string(), node_ip_address: z.string(), pid: z.string() })),
  status: JobStatusSchema,
  entrypoint: z.string(),
  message: optional(z.string()),
  error_type: optional(z.string()),
  /** Unix milliseconds. */
  start_time: optional(z.number()),
  end_time: optional(z.number()),
  metadata: optional(z.record(z.string(), z.string())),
  runtime_env: optional(z.record(z.string(), z.unknown())),
  driver_agent_http_address: optional(z.string()),
  driver_node_id: optional(z.string()),
  driver_exit_code: optional(z.number()),
});
/** A job's details, as Ray's Jobs API returns them. */
export type JobDetails = z.infer<typeof JobDetailsSchema>;

/** Schema of a job's runtime environment. */
export const RuntimeEnvSchema = z.looseObject({
  env_vars: z.record(z.string(), z.string()).optional(),
  /** Over REST this must already be a remote URI (`gcs://_ray_pkg_<hash>.zip`, `s3://...`). */
  working_dir: z.string().optional(),
  py_modules: z.array(z.string()).optional(),
  pip: z.union([z.array(z.string()), z.record(z.string(), z.unknown())]).optional(),
  excludes: z.array(z.string()).optional(),
  config: z.record(z.string(), z.unknown()).optional(),
});
/** A job's runtime environment: env vars, working dir, pip packages. */
export type RuntimeEnv = z.infer<typeof RuntimeEnvSchema>;

/** The POST body. Ray refuses unknown keys (400 TypeError), so this schema is strict. */
export const JobSubmitRequestSchema = z.strictObject({
  entrypoint: z.string().min(1, 'entrypoint is the shell command to run'),
  /** Idempotency key: a second submit with the same id returns the first job instead of running again. */
  submission_id: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]+$/, 'letters, digits and _ . : - only')
    .optional(),
  runtime_env: RuntimeEnvSchema.optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  entrypoint_num_cpus: z.number().min(0).optional(),
  entrypoint_num_gpus: z.number().min(0).optional(),
  entrypoint_memory: z.number().int().min(0).optional(),
  entrypoint_resources: z.record(z.string(), z.number()).optional(),
});
/** A job submission, as posted to Ray's Jobs API. */
export type JobSubmitRequest = z.input<typeof JobSubmitRequestSchema>;

/** Schema of Ray's answer to a submission. */
export const SubmitResponseSchema = z.looseObject({
  submission_id: z.string(),
  job_id: optional(z.string()),
});
/** Schema of Ray's version endpoint. */
export const VersionSchema = z.looseObject({
  version: z.string(),
  ray_version: z.string(),
  ray_commit: z.string(),
  session_name: optional(z.string()),
});
/** The Ray and Jobs API versions a dashboard reports. */
export type RayVersion = z.infer<typeof VersionSchema>;
/** Schema of Ray's job list. */
export const JobListSchema = z.array(JobDetailsSchema);
/** Schema of Ray's logs answer. */
export const LogsSchema = z.looseObject({ logs: z.string() });
/** Schema of Ray's stop answer. */
export const StopSchema = z.looseObject({ stopped: z.boolean() });
/** Schema of Ray's delete answer. */
export const DeleteSchema = z.looseObject({ deleted: z.boolean() });
