/** Job, job-group and volume names: what SkyPilot's loader accepts (`str.isalnum()` or `-`/`_`). */
export const NAME_PATTERN = /^[A-Za-z0-9_-]+$/;
/** Env and secret keys (SkyPilot task schema). */
export const ENV_KEY_PATTERN = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** `termination_delay` durations: SkyPilot's `TIME_PATTERN_SECONDS` (bare number = seconds). */
export const DURATION_PATTERN = /^[0-9]+(s|m|h|d|w|S|M|H|D|W)?$/;
/**
 * `infra`: `cloud[/region[/zone]]`, `*` wildcards, `k8s|kubernetes[/context]`. SkyPilot writes this with
 * Python's inline `(?i:...)` flag, which JavaScript rejects, so it is rewritten with the `i` flag.
 */
export const INFRA_PATTERN = /^(?:(?:k8s|kubernetes)(?:\/.+)?|(?:\*|[a-z0-9-]+)(?:\/(?:\*|[^/\s]+)){0,2})$/i;
/** Volume `infra`: the same without wildcards. */
export const VOLUME_INFRA_PATTERN = /^(?:(?:k8s|kubernetes)(?:\/.+)?|[a-z0-9-]+(?:\/[^/\s*]+){0,2})$/i;
/** Volume sizes such as `100Gi` or a bare number of GiB. */
export const VOLUME_SIZE_PATTERN = /^[0-9]+(?:[KMGTPE]i?)?$/i;
/** `accelerators` as a string: `H100`, `H100:4`, `tpu-v5e-8:1`. */
export const ACCELERATOR_PATTERN = /^[A-Za-z0-9_.-]+(?::[0-9]+(?:\.[0-9]+)?)?$/;
