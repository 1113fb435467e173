#!/usr/bin/env node
import { runCli } from '@vime/core/utils';
import { main } from './cli/main.js';

// The first Ctrl-C stops a scrape early; the report is still written from what was scraped.
await runCli('vime-metrics', main);
