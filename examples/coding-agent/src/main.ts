/**
 * The main job: the coding-agent RL loop of `@vime/loop` on its embedded defaults (`bash scripts/main.sh`),
 * or on your dataset and engines through the loop's flags (`pnpm coding-agent -- --help`).
 */
import { runCli } from '@vime/core/utils';
import { loopMain } from '@vime/loop';

await runCli('coding-agent', loopMain);
