/**
 * Optional sink for diagnostics. Libraries never print: they take one of these (every method optional,
 * so `console` fits) and call it with a message and structured data.
 */
export interface Logger {
  /** Log a debug message. */
  debug?(message: string, data?: Record<string, unknown>): void;
  /** Log an informational message. */
  info?(message: string, data?: Record<string, unknown>): void;
  /** Log a warning. */
  warn?(message: string, data?: Record<string, unknown>): void;
  /** Log an error. */
  error?(message: string, data?: Record<string, unknown>): void;
}
