/**
 * Optional sink for diagnostics. Libraries never print: they take one of these (every method optional,
 * so `console` fits) and call it with a message and structured data.
 */
export interface Logger {
  debug?(message: string, data?: Record<string, unknown>): void;
  info?(message: string, data?: Record<string, unknown>): void;
  warn?(message: string, data?: Record<string, unknown>): void;
  error?(message: string, data?: Record<string, unknown>): void;
}
