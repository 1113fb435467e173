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
  const m = new PickleMachine(new PickleBytes(bytes, what), hooks);
  for (;;) {
    const at = m.input.p;
    const op = m.input.u8();
    if (op === STOP) {
      if (m.stack.length !== 1) m.input.fail('pickle stack not empty at STOP', at);
      return m.value(m.stack[0]!, at);
    }
    const run = OPCODES.get(op);
    if (!run) return m.input.fail(`unsupported pickle opcode 0x${op.toString(16).padStart(2, '0')}`, at);
    run(m, at, op);
  }
}

/** The pickle's bytes, read forward; every failure names the byte offset. */
class PickleBytes {
  p = 0;
  private readonly view: DataView;
  private readonly text = new TextDecoder('utf-8', { fatal: true });

  constructor(
    readonly bytes: Uint8Array,
    private readonly what: string,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  fail(message: string, at = this.p): never {
    throw new ValidationError(
      this.what,
      `${message} (byte ${at}); only tensor dumps written by torch.save are read`,
      { code: 'decode_error' },
    );
  }

  private need(n: number): void {
    if (this.p + n > this.bytes.length) this.fail('pickle ends early');
  }

  u8(): number {
    this.need(1);
    return this.bytes[this.p++]!;
  }

  u16(): number {
    this.need(2);
    const v = this.view.getUint16(this.p, true);
    this.p += 2;
    return v;
  }

  u32(): number {
    this.need(4);
    const v = this.view.getUint32(this.p, true);
    this.p += 4;
    return v;
  }

  i32(): number {
    this.need(4);
    const v = this.view.getInt32(this.p, true);
    this.p += 4;
    return v;
  }

  /** BINFLOAT's big-endian double. */
  f64be(): number {
    this.need(8);
    const v = this.view.getFloat64(this.p, false);
    this.p += 8;
    return v;
  }

  take(n: number): Uint8Array {
    this.need(n);
    const out = this.bytes.subarray(this.p, this.p + n);
    this.p += n;
    return out;
  }

  /** A newline-terminated text argument (GLOBAL's module and name). */
  line(): string {
    const end = this.bytes.indexOf(0x0a, this.p);
    if (end < 0) this.fail('unterminated GLOBAL');
    const s = this.utf8(this.bytes.subarray(this.p, end), this.p);
    this.p = end + 1;
    return s;
  }

  utf8(raw: Uint8Array, at: number): string {
    try {
      return this.text.decode(raw);
    } catch {
      return this.fail('string is not valid UTF-8', at);
    }
  }
}

/** The unpickler's stack and memo, with the checks every opcode needs before it touches them. */
class PickleMachine {
  readonly stack: StackItem[] = [];
  readonly memo = new Map<number, StackItem>();

  constructor(
    readonly input: PickleBytes,
    readonly hooks: UnpickleHooks,
  ) {}

  push(item: StackItem): void {
    this.stack.push(item);
  }

  pop(): StackItem {
    if (this.stack.length === 0) this.input.fail('pickle stack underflow');
    return this.stack.pop()!;
  }

  /** A stack item that may be stored as data: not a MARK, not a builder. */
  value(item: StackItem, at: number): PyValue {
    if (item === MARK) this.input.fail('unexpected MARK', at);
    if (isGlobal(item)) this.input.fail('a builder was used as a value', at);
    return item as PyValue;
  }

  popValue(at: number): PyValue {
    return this.value(this.pop(), at);
  }

  /** The items above the topmost MARK, which is removed with them. */
  popMark(at: number): PyValue[] {
    const k = this.stack.lastIndexOf(MARK);
    if (k < 0) this.input.fail('missing MARK', at);
    return this.stack
      .splice(k)
      .slice(1)
      .map((x) => this.value(x, at));
  }

  top(at: number): StackItem {
    if (this.stack.length === 0) this.input.fail('pickle stack underflow', at);
    return this.stack[this.stack.length - 1]!;
  }

  setItems(target: StackItem, items: PyValue[], at: number): void {
    if (!isDict(target)) this.input.fail('SETITEM(S) on something that is not a dict', at);
    for (let i = 0; i + 1 < items.length; i += 2) {
      const key = items[i];
      if (typeof key !== 'string' && typeof key !== 'number') {
        this.input.fail(`unsupported dict key ${typeof key}`, at);
      }
      // defineProperty: a key such as "__proto__" stays an ordinary own key.
      Object.defineProperty(target, String(key), {
        value: items[i + 1],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }

  append(items: PyValue[], at: number, opcode: 'APPEND' | 'APPENDS'): void {
    const list = this.top(at);
    if (!Array.isArray(list)) this.input.fail(`${opcode} to something that is not a list`, at);
    for (const v of items) (list as PyValue[]).push(v);
  }

  /** A GLOBAL only through the caller's resolver: anything it does not know is refused. */
  global(module: string, name: string, at: number): void {
    const resolved = this.hooks.resolveGlobal(module, name);
    if (!resolved) {
      this.input.fail(`refusing pickle global ${module}.${name}: not a type a torch tensor dump uses`, at);
    }
    this.push(resolved);
  }

  /** REDUCE calls only a builder a resolved global gave. */
  reduce(at: number): void {
    const args = this.popValue(at);
    const callable = this.pop();
    if (!isGlobal(callable) || !('call' in callable)) {
      this.input.fail('REDUCE on something that is not a known builder', at);
    }
    if (!Array.isArray(args)) this.input.fail('REDUCE arguments are not a tuple', at);
    this.push((callable as { call: (a: PyValue[], o: number) => PyValue }).call(args as PyValue[], at));
  }

  memoGet(key: number, at: number): void {
    if (!this.memo.has(key)) this.input.fail(`memo key ${key} was never stored`, at);
    this.push(this.memo.get(key)!);
  }
}

const STOP = 0x2e;

type Opcode = (m: PickleMachine, at: number, op: number) => void;

/** Every opcode the reader accepts (STOP ends the loop); any other byte is refused. */
const OPCODES = new Map<number, Opcode>([
  // Framing and protocol
  [
    0x80, // PROTO
    (m, at) => {
      if (m.input.u8() > 4) m.input.fail('pickle protocol above 4', at);
    },
  ],
  [0x95, (m) => void m.input.take(8)], // FRAME (protocol 4): framing only
  // Containers
  [0x7d, (m) => m.push(newDict())], // EMPTY_DICT
  [0x5d, (m) => m.push([])], // EMPTY_LIST
  [0x29, (m) => m.push([])], // EMPTY_TUPLE
  [0x28, (m) => m.push(MARK)], // MARK
  [
    0x64, // DICT
    (m, at) => {
      const d = newDict();
      m.setItems(d, m.popMark(at), at);
      m.push(d);
    },
  ],
  [0x6c, (m, at) => m.push(m.popMark(at))], // LIST
  [0x74, (m, at) => m.push(m.popMark(at))], // TUPLE
  [0x85, (m, at) => m.push([m.popValue(at)])], // TUPLE1
  [
    0x86, // TUPLE2
    (m, at) => {
      const b = m.popValue(at);
      m.push([m.popValue(at), b]);
    },
  ],
  [
    0x87, // TUPLE3
    (m, at) => {
      const c = m.popValue(at);
      const b = m.popValue(at);
      m.push([m.popValue(at), b, c]);
    },
  ],
  [
    0x73, // SETITEM
    (m, at) => {
      const v = m.popValue(at);
      const k = m.popValue(at);
      m.setItems(m.top(at), [k, v], at);
    },
  ],
  [
    0x75, // SETITEMS
    (m, at) => {
      const items = m.popMark(at);
      m.setItems(m.top(at), items, at);
    },
  ],
  [0x61, (m, at) => m.append([m.popValue(at)], at, 'APPEND')], // APPEND
  [0x65, (m, at) => m.append(m.popMark(at), at, 'APPENDS')], // APPENDS
  // Scalars
  [0x4e, (m) => m.push(null)], // NONE
  [0x88, (m) => m.push(true)], // NEWTRUE
  [0x89, (m) => m.push(false)], // NEWFALSE
  [0x4b, (m) => m.push(m.input.u8())], // BININT1
  [0x4d, (m) => m.push(m.input.u16())], // BININT2
  [0x4a, (m) => m.push(m.input.i32())], // BININT
  [0x8a, (m) => m.push(decodeLong(m.input.take(m.input.u8())))], // LONG1
  [0x47, (m) => m.push(m.input.f64be())], // BINFLOAT
  [0x58, (m, at) => m.push(m.input.utf8(m.input.take(m.input.u32()), at))], // BINUNICODE
  [0x8c, (m, at) => m.push(m.input.utf8(m.input.take(m.input.u8()), at))], // SHORT_BINUNICODE
  [0x43, (m) => m.push(m.input.take(m.input.u8()).slice())], // SHORT_BINBYTES
  [0x42, (m) => m.push(m.input.take(m.input.u32()).slice())], // BINBYTES
  // Memo
  [0x71, (m, at) => void m.memo.set(m.input.u8(), m.top(at))], // BINPUT
  [0x72, (m, at) => void m.memo.set(m.input.u32(), m.top(at))], // LONG_BINPUT
  [0x94, (m, at) => void m.memo.set(m.memo.size, m.top(at))], // MEMOIZE
  [0x68, (m, at) => m.memoGet(m.input.u8(), at)], // BINGET
  [0x6a, (m, at) => m.memoGet(m.input.u32(), at)], // LONG_BINGET
  // Globals, calls and persistent ids: only what the caller's hooks allow
  [0x63, (m, at) => m.global(m.input.line(), m.input.line(), at)], // GLOBAL
  [
    0x93, // STACK_GLOBAL (protocol 4)
    (m, at) => {
      const name = m.popValue(at);
      const module = m.popValue(at);
      if (typeof module !== 'string' || typeof name !== 'string') {
        m.input.fail('STACK_GLOBAL needs two strings', at);
      }
      m.global(module as string, name as string, at);
    },
  ],
  [0x52, (m, at) => m.reduce(at)], // REDUCE
  [0x51, (m, at) => m.push(m.hooks.persistentLoad(m.popValue(at), at))], // BINPERSID
]);

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

/** Little-endian two's-complement integer of any width; a number when it is safe, else a bigint. */
function decodeLong(raw: Uint8Array): number | bigint {
  if (raw.length === 0) return 0;
  let v = 0n;
  for (let i = raw.length - 1; i >= 0; i--) v = (v << 8n) | BigInt(raw[i]!);
  if (raw[raw.length - 1]! & 0x80) v -= 1n << BigInt(raw.length * 8);
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}
