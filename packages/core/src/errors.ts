/**
 * Errors. Every error Vime throws is a `VimeError` with a stable string `code`, an optional `cause`
 * and optional structured `data`. `VimeError.isInstance` uses a global symbol so it keeps working
 * when two copies of the package end up in one process (where `instanceof` does not).
 */

const brand = Symbol.for('vime.error');

export type VimeErrorCode =
  | 'invalid_argument'
  | 'invalid_config'
  | 'decode_error'
  | 'validation_error'
  | 'engine_error'
  | 'sandbox_error'
  | 'grading_error'
  | 'drift_error'
  | 'queue_error'
  | 'aborted'
  | 'timeout'
  | (string & {});

export interface VimeErrorOptions {
  cause?: unknown;
  data?: Record<string, unknown>;
}

export class VimeError extends Error {
  readonly [brand] = true;
  readonly code: VimeErrorCode;
  readonly data: Record<string, unknown> | undefined;

  constructor(code: VimeErrorCode, message: string, options: VimeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.data = options.data;
  }

  /** Brand check that survives duplicate bundles of `@vime/core`. */
  static isInstance(value: unknown): value is VimeError {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[brand] === true;
  }
}

/** Bad options or configuration supplied by the caller. */
export class ConfigError extends VimeError {
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('invalid_config', message, options);
  }
}

/** Data that failed validation or decoding; `path` names the offending field (e.g. `[3].tokens[7]`). */
export class ValidationError extends VimeError {
  readonly path: string;
  constructor(path: string, message: string, options: VimeErrorOptions & { code?: VimeErrorCode } = {}) {
    super(options.code ?? 'validation_error', path ? `${path}: ${message}` : message, options);
    this.path = path;
  }
}

/** An inference engine or HTTP upstream failed. `isRetryable` tells a caller whether to try again. */
export class EngineError extends VimeError {
  readonly isRetryable: boolean;
  readonly status: number | undefined;
  readonly url: string | undefined;
  constructor(
    message: string,
    options: VimeErrorOptions & { isRetryable?: boolean; status?: number; url?: string } = {},
  ) {
    super('engine_error', message, options);
    this.isRetryable = options.isRetryable ?? false;
    this.status = options.status;
    this.url = options.url;
  }
}

/** A sandbox could not be created, reached or used. */
export class SandboxError extends VimeError {
  constructor(message: string, options: VimeErrorOptions & { code?: VimeErrorCode } = {}) {
    super(options.code ?? 'sandbox_error', message, options);
  }
}

/** Grading could not produce a trustworthy verdict (an infrastructure problem, never a reward of 0). */
export class GradingError extends VimeError {
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('grading_error', message, options);
  }
}

/** A trajectory's tokens could not be reconciled with what the engine sampled. */
export class DriftError extends VimeError {
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('drift_error', message, options);
  }
}

/** Describe a value's kind for error messages: `string "abc"`, `array(3)`, `Float32Array(12)`, `null`. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return `array(${value.length})`;
  if (ArrayBuffer.isView(value))
    return `${value.constructor.name}(${(value as unknown as ArrayLike<unknown>).length ?? value.byteLength})`;
  switch (typeof value) {
    case 'string': {
      const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
      return `string ${JSON.stringify(shown)}`;
    }
    case 'number':
      return `number ${String(value)}`;
    case 'bigint':
      return `bigint ${value}n`;
    case 'boolean':
      return `boolean ${value}`;
    case 'object':
      return value.constructor && value.constructor !== Object ? value.constructor.name : 'object';
    default:
      return typeof value;
  }
}
