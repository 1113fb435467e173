import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { broadcastWasmModule, TARGET } from './build-wasm.js';

describe('the committed WebAssembly kernel', () => {
  it('is the compile of the committed broadcast.wat (run scripts/build-wasm.ts after editing it)', async () => {
    expect(readFileSync(TARGET, 'utf8')).toBe(await broadcastWasmModule());
  });
});
