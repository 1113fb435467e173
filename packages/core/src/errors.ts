/**
 * Errors. Every error Vime throws is a `VimeError` with a stable string `code`, an optional `cause`
 * and optional structured `data`. Each class carries its own marker under a global symbol, and its
 * static `isInstance` checks that marker: the guard keeps working when two copies of a package end up in
 * one process (where `instanceof` does not), and `SandboxError.isInstance` is true only for sandbox
 * errors (and their subclasses), never for any `VimeError`.
 */

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

/** Options of every Vime error: its cause, data and code. */
export interface VimeErrorOptions {
  cause?: unknown;
  data?: Record<string, unknown> | undefined;
}

/** The marker symbol of an error class: `Symbol.for('vime.error.<Name>')`, shared by every bundle. */
export function errorMarker(name: string): symbol {
  return Symbol.for(`vime.error.${name}`);
}

/** Whether `value` carries `marker` (set by the class's constructor and by every subclass's). */
export function hasErrorMarker(value: unknown, marker: symbol): boolean {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[marker] === true;
}

const vimeMarker = errorMarker('VimeError');

/** The base of every error Vime throws: a string `code`, an optional `cause` and `data`. */
export class VimeError extends Error {
  readonly [vimeMarker] = true;
  readonly code: VimeErrorCode;
  readonly data: Record<string, unknown> | undefined;

  constructor(code: VimeErrorCode, message: string, options: VimeErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.data = options.data;
  }

  /** Any Vime error, from any copy of `@vime/core`. */
  static isInstance(value: unknown): value is VimeError {
    return hasErrorMarker(value, vimeMarker);
  }
}

const configMarker = errorMarker('ConfigError');

/** Bad options or configuration supplied by the caller. */
export class ConfigError extends VimeError {
  readonly [configMarker] = true;
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('invalid_config', message, options);
  }

  /** Whether `value` is a `ConfigError`, from any copy of this package. */
  static override isInstance(value: unknown): value is ConfigError {
    return hasErrorMarker(value, configMarker);
  }
}

const validationMarker = errorMarker('ValidationError');

/** Data that failed validation or decoding; `path` names the offending field (e.g. `[3].tokens[7]`). */
export class ValidationError extends VimeError {
  readonly [validationMarker] = true;
  readonly path: string;
  constructor(
    path: string,
    message: string,
    options: VimeErrorOptions & { code?: VimeErrorCode | undefined } = {},
  ) {
    super(options.code ?? 'validation_error', path ? `${path}: ${message}` : message, options);
    this.path = path;
  }

  /** Whether `value` is a `ValidationError`, from any copy of this package. */
  static override isInstance(value: unknown): value is ValidationError {
    return hasErrorMarker(value, validationMarker);
  }
}

const engineMarker = errorMarker('EngineError');

/**
 * Options of an `EngineError`: whether a retry may succeed, the HTTP status, the URL and the server's retry
 * delay.
 */
export interface EngineErrorOptions extends VimeErrorOptions {
  isRetryable?: boolean | undefined;
  status?: number | undefined;
  url?: string | undefined;
  /** The server's `Retry-After`, in milliseconds. */
  retryAfterMs?: number | undefined;
}

/** An inference engine or HTTP upstream failed. `isRetryable` tells a caller whether to try again. */
export class EngineError extends VimeError {
  readonly [engineMarker] = true;
  readonly isRetryable: boolean;
  readonly status: number | undefined;
  readonly url: string | undefined;
  readonly retryAfterMs: number | undefined;
  constructor(message: string, options: EngineErrorOptions = {}) {
    super('engine_error', message, options);
    this.isRetryable = options.isRetryable ?? false;
    this.status = options.status;
    this.url = options.url;
    this.retryAfterMs = options.retryAfterMs;
  }

  /** Whether `value` is an `EngineError`, from any copy of this package. */
  static override isInstance(value: unknown): value is EngineError {
    return hasErrorMarker(value, engineMarker);
  }
}

const sandboxMarker = errorMarker('SandboxError');

/** A sandbox could not be created, reached or used. */
export class SandboxError extends VimeError {
  readonly [sandboxMarker] = true;
  constructor(message: string, options: VimeErrorOptions & { code?: VimeErrorCode | undefined } = {}) {
    super(options.code ?? 'sandbox_error', message, options);
  }

  /** Whether `value` is a `SandboxError`, from any copy of this package. */
  static override isInstance(value: unknown): value is SandboxError {
    return hasErrorMarker(value, sandboxMarker);
  }
}

const gradingMarker = errorMarker('GradingError');

/** Grading could not produce a trustworthy verdict (an infrastructure problem, never a reward of 0). */
export class GradingError extends VimeError {
  readonly [gradingMarker] = true;
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('grading_error', message, options);
  }

  /** Whether `value` is a `GradingError`, from any copy of this package. */
  static override isInstance(value: unknown): value is GradingError {
    return hasErrorMarker(value, gradingMarker);
  }
}

const driftMarker = errorMarker('DriftError');

/** A trajectory's tokens could not be reconciled with what the engine sampled. */
export class DriftError extends VimeError {
  readonly [driftMarker] = true;
  constructor(message: string, options: VimeErrorOptions = {}) {
    super('drift_error', message, options);
  }

  /** Whether `value` is a `DriftError`, from any copy of this package. */
  static override isInstance(value: unknown): value is DriftError {
    return hasErrorMarker(value, driftMarker);
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
