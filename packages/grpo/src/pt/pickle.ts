import { ValidationError } from '@vime/core';

/**
 * A restricted reader for the pickle subset `torch.save` writes (protocol 2, plus the few protocol 4
 * opcodes newer writers use). It builds plain values and never calls anything: a GLOBAL resolves only
 * through the caller's `resolveGlobal`, REDUCE only through the builders that returns, and every other
 * global or opcode is refused with the byte offset.
 */

/** A Python value as read: dict → object, list/tuple → array, int → number (bigint when unsafe). */
export type PyValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | PyValue[]
  | { [key: string]: PyValue }
  | PyObject;

/** A value produced by a resolved global (a tensor, a storage type, …); opaque to the reader. */
export interface PyObject {
  readonly pyType: string;
}

/** What a GLOBAL may resolve to: a callable the reader invokes on REDUCE, or a plain marker object. */
export type PyGlobal = { call: (args: PyValue[], offset: number) => PyValue } | PyObject;

export interface UnpickleHooks {
  /** Resolve `module.name`; return undefined to refuse it. */
  resolveGlobal(module: string, name: string): PyGlobal | undefined;
  /** Resolve a persistent id (torch: a storage reference). */
  persistentLoad(pid: PyValue, offset: number): PyValue;
}

const MARK = Symbol('mark');
type StackItem = PyValue | PyGlobal | typeof MARK;

export function unpickle(bytes: Uint8Array, hooks: UnpickleHooks, what = 'data.pkl'): PyValue {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const text = new TextDecoder('utf-8', { fatal: true });
  const stack: StackItem[] = [];
  const memo = new Map<number, StackItem>();
  let p = 0;
  const fail = (message: string, at = p): never => {
    throw new ValidationError(
      what,
      `${message} (byte ${at}); only tensor dumps written by torch.save are read`,
      {
        code: 'decode_error',
      },
    );
  };
  const need = (n: number) => {
    if (p + n > bytes.length) fail('pickle ends early');
  };
  const u8 = () => {
    need(1);
    return bytes[p++]!;
  };
  const u16 = () => {
    need(2);
    const v = view.getUint16(p, true);
    p += 2;
    return v;
  };
  const u32 = () => {
    need(4);
    const v = view.getUint32(p, true);
    p += 4;
    return v;
  };
  const take = (n: number) => {
    need(n);
    const out = bytes.subarray(p, p + n);
    p += n;
    return out;
  };
  const line = () => {
    const end = bytes.indexOf(0x0a, p);
    if (end < 0) fail('unterminated GLOBAL');
    const s = decodeText(text, bytes.subarray(p, end), fail, p);
    p = end + 1;
    return s;
  };
  const pop = (): StackItem => {
    if (stack.length === 0) fail('pickle stack underflow');
    return stack.pop()!;
  };
  const value = (item: StackItem, at: number): PyValue => {
    if (item === MARK) fail('unexpected MARK', at);
    if (isGlobal(item)) fail('a builder was used as a value', at);
    return item as PyValue;
  };
  const popMark = (at: number): PyValue[] => {
    const k = stack.lastIndexOf(MARK);
    if (k < 0) fail('missing MARK', at);
    const items = stack.splice(k).slice(1);
    return items.map((x) => value(x, at));
  };
  const top = (at: number) => {
    if (stack.length === 0) fail('pickle stack underflow', at);
    return stack[stack.length - 1]!;
  };
  const setItems = (target: StackItem, items: PyValue[], at: number) => {
    if (!isDict(target)) fail('SETITEM(S) on something that is not a dict', at);
    for (let i = 0; i + 1 < items.length; i += 2) {
      const key = items[i];
      if (typeof key !== 'string' && typeof key !== 'number') fail(`unsupported dict key ${typeof key}`, at);
      // defineProperty: a key such as "__proto__" stays an ordinary own key.
      Object.defineProperty(target, String(key), {
        value: items[i + 1],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  };

  for (;;) {
    const at = p;
    const op = u8();
    switch (op) {
      case 0x80: // PROTO
        if (u8() > 4) fail('pickle protocol above 4', at);
        break;
      case 0x95: // FRAME (protocol 4): framing only
        take(8);
        break;
      case 0x2e: {
        // STOP
        if (stack.length !== 1) fail('pickle stack not empty at STOP', at);
        return value(stack[0]!, at);
      }
      case 0x7d: // EMPTY_DICT
        stack.push(newDict());
        break;
      case 0x5d: // EMPTY_LIST
        stack.push([]);
        break;
      case 0x29: // EMPTY_TUPLE
        stack.push([]);
        break;
      case 0x28: // MARK
        stack.push(MARK);
        break;
      case 0x64: {
        // DICT
        const d = newDict();
        setItems(d, popMark(at), at);
        stack.push(d);
        break;
      }
      case 0x6c: // LIST
      case 0x74: // TUPLE
        stack.push(popMark(at));
        break;
      case 0x85: // TUPLE1
        stack.push([value(pop(), at)]);
        break;
      case 0x86: {
        // TUPLE2
        const b = value(pop(), at);
        stack.push([value(pop(), at), b]);
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = value(pop(), at);
        const b = value(pop(), at);
        stack.push([value(pop(), at), b, c]);
        break;
      }
      case 0x73: {
        // SETITEM
        const v = value(pop(), at);
        const k = value(pop(), at);
        setItems(top(at), [k, v], at);
        break;
      }
      case 0x75: {
        // SETITEMS
        const items = popMark(at);
        setItems(top(at), items, at);
        break;
      }
      case 0x61: {
        // APPEND
        const v = value(pop(), at);
        const list = top(at);
        if (!Array.isArray(list)) fail('APPEND to something that is not a list', at);
        (list as PyValue[]).push(v);
        break;
      }
      case 0x65: {
        // APPENDS
        const items = popMark(at);
        const list = top(at);
        if (!Array.isArray(list)) fail('APPENDS to something that is not a list', at);
        for (const v of items) (list as PyValue[]).push(v);
        break;
      }
      case 0x4e: // NONE
        stack.push(null);
        break;
      case 0x88: // NEWTRUE
        stack.push(true);
        break;
      case 0x89: // NEWFALSE
        stack.push(false);
        break;
      case 0x4b: // BININT1
        stack.push(u8());
        break;
      case 0x4d: // BININT2
        stack.push(u16());
        break;
      case 0x4a: // BININT
        need(4);
        stack.push(view.getInt32(p, true));
        p += 4;
        break;
      case 0x8a: {
        // LONG1
        const n = u8();
        stack.push(decodeLong(take(n)));
        break;
      }
      case 0x47: // BINFLOAT (big-endian double)
        need(8);
        stack.push(view.getFloat64(p, false));
        p += 8;
        break;
      case 0x58: // BINUNICODE
        stack.push(decodeText(text, take(u32()), fail, at));
        break;
      case 0x8c: // SHORT_BINUNICODE
        stack.push(decodeText(text, take(u8()), fail, at));
        break;
      case 0x43: // SHORT_BINBYTES
        stack.push(take(u8()).slice());
        break;
      case 0x42: // BINBYTES
        stack.push(take(u32()).slice());
        break;
      case 0x71: // BINPUT
        memo.set(u8(), top(at));
        break;
      case 0x72: // LONG_BINPUT
        memo.set(u32(), top(at));
        break;
      case 0x94: // MEMOIZE
        memo.set(memo.size, top(at));
        break;
      case 0x68: // BINGET
      case 0x6a: {
        // LONG_BINGET
        const key = op === 0x68 ? u8() : u32();
        if (!memo.has(key)) fail(`memo key ${key} was never stored`, at);
        stack.push(memo.get(key)!);
        break;
      }
      case 0x63: {
        // GLOBAL
        const module = line();
        const name = line();
        const resolved = hooks.resolveGlobal(module, name);
        if (!resolved)
          return fail(`refusing pickle global ${module}.${name}: not a type a torch tensor dump uses`, at);
        stack.push(resolved);
        break;
      }
      case 0x93: {
        // STACK_GLOBAL (protocol 4)
        const name = value(pop(), at);
        const module = value(pop(), at);
        if (typeof module !== 'string' || typeof name !== 'string')
          fail('STACK_GLOBAL needs two strings', at);
        const resolved = hooks.resolveGlobal(module as string, name as string);
        if (!resolved)
          return fail(`refusing pickle global ${module}.${name}: not a type a torch tensor dump uses`, at);
        stack.push(resolved);
        break;
      }
      case 0x52: {
        // REDUCE
        const args = value(pop(), at);
        const callable = pop();
        if (!isGlobal(callable) || !('call' in callable))
          fail('REDUCE on something that is not a known builder', at);
        if (!Array.isArray(args)) fail('REDUCE arguments are not a tuple', at);
        stack.push((callable as { call: (a: PyValue[], o: number) => PyValue }).call(args as PyValue[], at));
        break;
      }
      case 0x51: // BINPERSID
        stack.push(hooks.persistentLoad(value(pop(), at), at));
        break;
      default:
        fail(`unsupported pickle opcode 0x${op.toString(16).padStart(2, '0')}`, at);
    }
  }
}

const globals = new WeakSet<object>();
/** Mark a builder as callable by REDUCE; builders themselves can never be stored as data. */
export function pyGlobal<T extends PyGlobal>(g: T): T {
  globals.add(g);
  return g;
}
function isGlobal(x: StackItem): x is PyGlobal {
  return typeof x === 'object' && x !== null && globals.has(x);
}

const dicts = new WeakSet<object>();
function newDict(): { [key: string]: PyValue } {
  const d: { [key: string]: PyValue } = {};
  dicts.add(d);
  return d;
}
function isDict(x: StackItem): x is { [key: string]: PyValue } {
  return typeof x === 'object' && x !== null && dicts.has(x);
}

function decodeText(
  text: { decode(input: Uint8Array): string },
  raw: Uint8Array,
  fail: (m: string, at?: number) => never,
  at: number,
): string {
  try {
    return text.decode(raw);
  } catch {
    return fail('string is not valid UTF-8', at);
  }
}

/** Little-endian two's-complement integer of any width; a number when it is safe, else a bigint. */
function decodeLong(raw: Uint8Array): number | bigint {
  if (raw.length === 0) return 0;
  let v = 0n;
  for (let i = raw.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(raw[i]!);
  if (raw[raw.length - 1]! & 0x80) v -= 1n << BigInt(raw.length * 8);
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}
