#!/usr/bin/env node
import { runCli } from '@vime/core/utils';
import { serveMain } from './serve/main.js';

await runCli('vime-rollout-server', serveMain);
