/**
 * Just enough tar (POSIX ustar + pax long names) for the Docker archive endpoints: pack a few files or
 * folders, and read the entries of an archive the engine returns.
 */

export interface TarEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  mode: number;
  uid: number;
  gid: number;
  content: Uint8Array;
  linkname: string;
}

const BLOCK = 512;
const encoder = new TextEncoder();

function writeString(header: Uint8Array, offset: number, length: number, value: string): void {
  header.set(encoder.encode(value).subarray(0, length), offset);
}

function writeOctal(header: Uint8Array, offset: number, length: number, value: number): void {
  writeString(header, offset, length, `${value.toString(8).padStart(length - 1, '0')}\0`);
}

function headerBlock(
  name: string,
  typeflag: string,
  size: number,
  options: { mode: number; uid: number; gid: number; mtime: number; linkname?: string | undefined },
): Uint8Array {
  const h = new Uint8Array(BLOCK);
  writeString(h, 0, 100, name);
  writeOctal(h, 100, 8, options.mode & 0o7777);
  writeOctal(h, 108, 8, options.uid);
  writeOctal(h, 116, 8, options.gid);
  writeOctal(h, 124, 12, size);
  writeOctal(h, 136, 12, options.mtime);
  h.fill(0x20, 148, 156); // checksum is computed with its own field as spaces
  writeString(h, 156, 1, typeflag);
  if (options.linkname) writeString(h, 157, 100, options.linkname);
  writeString(h, 257, 6, 'ustar\0');
  writeString(h, 263, 2, '00');
  let sum = 0;
  for (const b of h) sum += b;
  writeString(h, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
  return h;
}

function padded(content: Uint8Array): Uint8Array[] {
  const rest = content.length % BLOCK;
  return rest === 0 ? [content] : [content, new Uint8Array(BLOCK - rest)];
}

/** A pax extended header carrying a path too long for ustar's 100-byte name field. */
function paxPath(name: string, options: { mtime: number }): Uint8Array[] {
  const body = ` path=${name}\n`;
  const bodyLen = encoder.encode(body).length;
  // The record length counts its own digits.
  let len = bodyLen + String(bodyLen).length;
  while (bodyLen + String(len).length !== len) len = bodyLen + String(len).length;
  const record = encoder.encode(`${len}${body}`);
  return [
    headerBlock('././@PaxHeader', 'x', record.length, { mode: 0o644, uid: 0, gid: 0, mtime: options.mtime }),
    ...padded(record),
  ];
}

export interface PackEntry {
  name: string;
  type: 'file' | 'dir';
  content?: string | Uint8Array | undefined;
  mode?: number | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
}

/** Pack entries into a tar archive (in memory; meant for single files and folder stubs). */
export function packTar(entries: readonly PackEntry[]): Buffer {
  const blocks: Uint8Array[] = [];
  const mtime = Math.floor(Date.now() / 1000);
  for (const e of entries) {
    const content =
      e.type === 'dir'
        ? new Uint8Array()
        : typeof e.content === 'string'
          ? encoder.encode(e.content)
          : (e.content ?? new Uint8Array());
    const name = e.type === 'dir' && !e.name.endsWith('/') ? `${e.name}/` : e.name;
    const options = {
      mode: e.mode ?? (e.type === 'dir' ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      mtime,
    };
    if (encoder.encode(name).length > 100) blocks.push(...paxPath(name, options));
    blocks.push(headerBlock(name, e.type === 'dir' ? '5' : '0', content.length, options));
    if (content.length > 0) blocks.push(...padded(content));
  }
  blocks.push(new Uint8Array(BLOCK * 2));
  return Buffer.concat(blocks);
}

function readString(block: Uint8Array, offset: number, length: number): string {
  const slice = block.subarray(offset, offset + length);
  const end = slice.indexOf(0);
  return new TextDecoder().decode(end === -1 ? slice : slice.subarray(0, end));
}

function readOctal(block: Uint8Array, offset: number, length: number): number {
  const text = readString(block, offset, length).trim();
  return text === '' ? 0 : Number.parseInt(text, 8);
}

/** Parse every entry of a tar archive (ustar, pax `path`/`linkpath`, GNU long names). */
export function unpackTar(archive: Uint8Array): TarEntry[] {
  const entries: TarEntry[] = [];
  let offset = 0;
  let longName: string | undefined;
  let longLink: string | undefined;
  while (offset + BLOCK <= archive.length) {
    const h = archive.subarray(offset, offset + BLOCK);
    if (h.every((b) => b === 0)) break;
    const size = readOctal(h, 124, 12);
    const typeflag = String.fromCharCode(h[156] ?? 0x30);
    const body = archive.subarray(offset + BLOCK, offset + BLOCK + size);
    offset += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
    if (typeflag === 'x') {
      const text = new TextDecoder().decode(body);
      for (const m of text.matchAll(/\d+ (path|linkpath)=([^\n]*)\n/g)) {
        if (m[1] === 'path') longName = m[2];
        else longLink = m[2];
      }
      continue;
    }
    if (typeflag === 'L' || typeflag === 'K') {
      const value = readString(body, 0, body.length);
      if (typeflag === 'L') longName = value;
      else longLink = value;
      continue;
    }
    if (typeflag === 'g') continue;
    const prefix = readString(h, 345, 155);
    const name = longName ?? (prefix ? `${prefix}/${readString(h, 0, 100)}` : readString(h, 0, 100));
    entries.push({
      name,
      type:
        typeflag === '0' || typeflag === '\0' || typeflag === '7'
          ? 'file'
          : typeflag === '5'
            ? 'dir'
            : typeflag === '2'
              ? 'symlink'
              : 'other',
      mode: readOctal(h, 100, 8),
      uid: readOctal(h, 108, 8),
      gid: readOctal(h, 116, 8),
      content: body,
      linkname: longLink ?? readString(h, 157, 100),
    });
    longName = undefined;
    longLink = undefined;
  }
  return entries;
}
