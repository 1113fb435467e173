#!/usr/bin/env node
import { runCli } from '@vime/core/utils';
import { loopMain } from './cli/main.js';

await runCli('vime-loop', loopMain);
