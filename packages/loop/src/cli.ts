#!/usr/bin/env node
import { runEntry } from './cli/entry.js';
import { loopMain } from './cli/main.js';

await runEntry('vime-loop', () => loopMain(process.argv.slice(2), process.env));
