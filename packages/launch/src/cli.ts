import { runCli } from '@vime/core/utils';
import { main } from './cli/main.js';

await runCli('vime', main);
