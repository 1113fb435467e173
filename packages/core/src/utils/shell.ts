/** Options of shell quoting. */
export interface ShellQuoteOptions {
  /**
   * Leave `$VAR` / `${VAR}` references expandable: a word of plain characters and variable references is
   * double-quoted instead of single-quoted (rendered commands that name an engine address use this).
   */
  expandVariables?: boolean | undefined;
}

/** POSIX shell quoting: the string as one word for `sh -c`, whatever it holds; plain words stay bare. */
export function shellQuote(value: string, options: ShellQuoteOptions = {}): string {
  if (/^[\w@%+=:,./-]+$/.test(value)) return value;
  if (options.expandVariables && /^[\w@%+=:,./${}-]+$/.test(value)) return `"${value}"`;
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

/** An argument vector as one shell command line. */
export function shellJoin(argv: readonly string[], options: ShellQuoteOptions = {}): string {
  return argv.map((arg) => shellQuote(arg, options)).join(' ');
}
