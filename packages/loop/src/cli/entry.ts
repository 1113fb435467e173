/** How the example's entry points end: a user's mistake is one line and exit 2, never a stack trace. */
import { ConfigError, ValidationError, VimeError } from '@vime/core';

export async function runEntry(name: string, main: () => Promise<number | undefined>): Promise<void> {
  try {
    process.exitCode = (await main()) ?? 0;
  } catch (error) {
    if (ConfigError.isInstance(error) || ValidationError.isInstance(error)) {
      console.error(`${name}: ${error.message}`);
      process.exitCode = 2;
    } else if (VimeError.isInstance(error)) {
      console.error(`${name}: ${error.message}`);
      // a stop by signal exits as the shell reports one (128 + its number)
      const code = error.data?.exitCode;
      process.exitCode = typeof code === 'number' ? code : 1;
    } else {
      console.error(error instanceof Error ? (error.stack ?? error.message) : error);
      process.exitCode = 1;
    }
  }
}
