import { ValidationError } from '@vime/core';

/** One stored entry of a zip archive. */
export interface ZipEntry {
  name: string;
  /** The entry's bytes (a view into the archive; torch stores entries uncompressed). */
  data: Uint8Array;
}

const EOCD = 0x06054b50;
const EOCD64_LOCATOR = 0x07064b50;
const EOCD64 = 0x06064b50;
const CENTRAL = 0x02014b50;
const LOCAL = 0x04034b50;

function fail(what: string, message: string): never {
  throw new ValidationError(what, message, { code: 'decode_error' });
}

/**
 * Read the entries of a zip archive as `torch.save` writes it: every entry stored (method 0), zip64
 * records when the archive is large. Compressed entries are refused, not inflated.
 */
export function readZip(bytes: Uint8Array, what = 'file'): Map<string, ZipEntry> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = bytes.byteLength;
  let eocd = -1;
  for (let i = len - 22; i >= Math.max(0, len - 22 - 0xffff); i--) {
    if (view.getUint32(i, true) === EOCD) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0)
    fail(what, 'not a zip archive (no end-of-central-directory record); is this a torch.save file?');
  let count = view.getUint16(eocd + 10, true);
  let dirOffset = view.getUint32(eocd + 16, true);
  if ((count === 0xffff || dirOffset === 0xffffffff) && eocd >= 20) {
    const locator = eocd - 20;
    if (view.getUint32(locator, true) === EOCD64_LOCATOR) {
      const at = Number(view.getBigUint64(locator + 8, true));
      if (at + 56 > len || view.getUint32(at, true) !== EOCD64) fail(what, 'broken zip64 end record');
      count = Number(view.getBigUint64(at + 32, true));
      dirOffset = Number(view.getBigUint64(at + 48, true));
    }
  }
  const entries = new Map<string, ZipEntry>();
  let p = dirOffset;
  for (let n = 0; n < count; n++) {
    if (p + 46 > len || view.getUint32(p, true) !== CENTRAL)
      fail(what, `broken zip central directory at byte ${p}`);
    const method = view.getUint16(p + 10, true);
    let compressed = view.getUint32(p + 20, true);
    let size = view.getUint32(p + 24, true);
    const nameLen = view.getUint16(p + 28, true);
    const extraLen = view.getUint16(p + 30, true);
    const commentLen = view.getUint16(p + 32, true);
    let local = view.getUint32(p + 42, true);
    if (p + 46 + nameLen + extraLen > len)
      fail(what, `zip central directory entry at byte ${p} runs past the end`);
    const name = new TextDecoder().decode(bytes.subarray(p + 46, p + 46 + nameLen));
    // zip64 extra field: the 64-bit values appear in this order for the fields that overflowed.
    let e = p + 46 + nameLen;
    const extraEnd = e + extraLen;
    while (e + 4 <= extraEnd) {
      const id = view.getUint16(e, true);
      const dataLen = view.getUint16(e + 2, true);
      if (e + 4 + dataLen > extraEnd) fail(what, `zip extra field of ${name} runs past its entry`);
      if (id === 0x0001) {
        let q = e + 4;
        const u64 = () => {
          if (q + 8 > e + 4 + dataLen) fail(what, `zip64 field of ${name} is too short`);
          q += 8;
          return Number(view.getBigUint64(q - 8, true));
        };
        if (size === 0xffffffff) size = u64();
        if (compressed === 0xffffffff) compressed = u64();
        if (local === 0xffffffff) local = u64();
      }
      e += 4 + dataLen;
    }
    if (method !== 0) {
      fail(
        `${what}: ${name}`,
        `zip entry is compressed (method ${method}); torch.save stores entries uncompressed`,
      );
    }
    if (local + 30 > len || view.getUint32(local, true) !== LOCAL)
      fail(what, `broken local header for ${name}`);
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    if (start + size > len)
      fail(`${what}: ${name}`, 'zip entry runs past the end of the file (truncated download?)');
    entries.set(name, { name, data: bytes.subarray(start, start + size) });
    p += 46 + nameLen + extraLen + commentLen;
  }
  return entries;
}
