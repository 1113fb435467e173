import { errorMarker, hasErrorMarker, VimeError, type VimeErrorOptions } from '@vime/core';

const harnessMarker = errorMarker('HarnessError');

/**
 * A harness could not be installed or run: the download, the pinned integrity, the unpacking, or a run
 * that ended without an answer of its own (killed, out of time). `code` says which.
 */
export class HarnessError extends VimeError {
  readonly [harnessMarker] = true;
  constructor(
    code: 'harness_install' | 'integrity_mismatch' | 'harness_run',
    message: string,
    options: VimeErrorOptions = {},
  ) {
    super(code, message, options);
  }

  /** Whether `value` is a `HarnessError`, from any copy of this package. */
  static override isInstance(value: unknown): value is HarnessError {
    return hasErrorMarker(value, harnessMarker);
  }
}
