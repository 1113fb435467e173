import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BoundedOutput } from './bounded-output.js';

describe('BoundedOutput', () => {
  it('keeps everything under the cap', () => {
    const b = new BoundedOutput(100);
    b.push(Buffer.from('hello '));
    b.push(Buffer.from('world'));
    expect(b.text()).toBe('hello world');
    expect(b.truncated).toBe(false);
  });

  it('keeps exactly the first and last half of any chunking beyond the cap', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 30 }),
        fc.integer({ min: 2, max: 200 }),
        (chunks, max) => {
          const b = new BoundedOutput(max);
          for (const c of chunks) b.push(Buffer.from(c));
          const all = Buffer.concat(chunks.map((c) => Buffer.from(c)));
          expect(b.total).toBe(all.length);
          const head = Math.ceil(max / 2);
          const tail = Math.floor(max / 2);
          if (all.length <= max) {
            expect(b.truncated).toBe(false);
            expect(b.text()).toBe(new TextDecoder().decode(all));
          } else {
            expect(b.truncated).toBe(true);
            const dropped = all.length - head - tail;
            const dec = new TextDecoder();
            expect(b.text()).toBe(
              `${dec.decode(all.subarray(0, head))}\n[… ${dropped} bytes elided …]\n${dec.decode(all.subarray(all.length - tail))}`,
            );
          }
        },
      ),
    );
  });

  it('decodes invalid UTF-8 with replacement characters', () => {
    const b = new BoundedOutput(100);
    b.push(Buffer.from([0x61, 0xff, 0xfe, 0x62]));
    expect(b.text()).toBe('a\uFFFD\uFFFDb');
  });
});
