#!/usr/bin/env node
import { main } from './cli/main.js';

// The first Ctrl-C stops a scrape early; the report is still written from what was scraped.
const controller = new AbortController();
process.once('SIGINT', () => controller.abort(new Error('interrupted')));

process.exitCode = await main(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  cwd: process.cwd(),
  signal: controller.signal,
});
