#!/usr/bin/env node
import { runCli } from '@vime/core/utils';
import { standInMain } from './standin/server.js';

await runCli('vime-standin', standInMain);
