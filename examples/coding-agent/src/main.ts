/**
 * The main job: the coding-agent RL loop of `@vime/loop` on its embedded defaults (`bash scripts/main.sh`),
 * or on your dataset and engines through the loop's flags (`pnpm coding-agent -- --help`).
 */
import { loopMain, runEntry } from '@vime/loop';

await runEntry('coding-agent', () => loopMain(process.argv.slice(2), process.env));
