#!/usr/bin/env node
import { runCli } from '@vime/core/utils';
import { main } from './command.js';

// The check and the audit are synchronous: a Ctrl-C ends them at once, as Node does by default.
await runCli('vime-grpo', main, { handleSignals: false });
