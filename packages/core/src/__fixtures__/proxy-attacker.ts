/**
 * The attacker of the capture-proxy hardening tests, run as its own process (see `startAttacker`):
 * streams oversize bodies, posts bodies of many tiny items and opens raw sockets that dribble bytes, then reports what the proxy did.
 */
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';

export type AttackCommand =
  /** POST `{"messages": [{"role": "user", "content": "<bytes of fill>"}], "max_tokens": 16}`, 1 MiB at a time. */
  | { op: 'stream'; url: string; bytes: number; headers: Record<string, string>; fill?: string | undefined }
  /** POST a turn of `count` tiny items of one kind (see `manyItems`), all at once. */
  | { op: 'items'; url: string; dialect: 'openai' | 'anthropic'; shape: ItemShape; count: number }
  /** POST one body of about `bytes` bytes of distinct source-like text, spelled as `spell` says. */
  | { op: 'body'; url: string; spell: BodySpell; bytes: number }
  | {
      op: 'sockets';
      url: string;
      /**
       * What each socket sends, one byte every `everyMs` (all at once for 0; an empty string: connect and say nothing); a
       * `{ now, dribble }` pair sends `now` at once, then dribbles.
       */
      scripts: Array<string | { now: string; dribble: string }>;
      everyMs: number;
      /** How long to wait for the proxy to close each socket. */
      waitMs: number;
    };

export type ItemShape = 'messages' | 'parts' | 'tools' | 'toolCalls';

/**
 * Where a large body puts its text: one Anthropic user message, the system prompt or a tool result;
 * an OpenAI history of many distinct 1.5 KB messages; Responses `instructions` or many input items.
 */
export type BodySpell =
  | 'anthropic-message'
  | 'anthropic-system'
  | 'anthropic-tool-result'
  | 'openai-messages'
  | 'responses-instructions'
  | 'responses-items';

export type AttackResult<C extends AttackCommand> = C extends { op: 'stream' | 'items' | 'body' }
  ? { status: number; text: string; retryAfter?: string | undefined } | { error: string }
  : Array<{ closed: boolean; received: string }>;

/** Stream a JSON-looking body of `bytes` bytes; resolves with the answer, or the socket error. */
function stream(url: string, bytes: number, headers: Record<string, string>, fill = 'a'): Promise<AttackResult<{ op: 'stream' } & AttackCommand>> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } });
    const chunk = Buffer.alloc(1 << 20, fill);
    let sent = 0;
    let done = false;
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => {
        done = true;
        resolve({ status: res.statusCode ?? 0, text });
      });
    });
    req.on('error', (e) => {
      if (!done) resolve({ error: (e as NodeJS.ErrnoException).code ?? e.message });
    });
    req.write('{"messages": [{"role": "user", "content": "');
    const pump = () => {
      while (sent < bytes && !req.destroyed && !done) {
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      if (!req.destroyed && !done) req.end('"}], "max_tokens": 16}');
    };
    pump();
  });
}

async function openSocket(
  url: string,
  script: string | { now: string; dribble: string },
  everyMs: number,
  waitMs: number,
) {
  const { hostname, port } = new URL(url);
  const socket: Socket = connect({ host: hostname, port: Number(port) });
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (c: string) => {
    received += c;
  });
  socket.on('error', () => {});
  const closed = new Promise<boolean>((resolve) => socket.once('close', () => resolve(true)));
  await new Promise<void>((resolve) => {
    socket.once('connect', () => resolve());
    socket.once('error', () => resolve());
  });
  let slow = typeof script === 'string' ? script : script.dribble;
  if (typeof script !== 'string') socket.write(script.now);
  if (everyMs === 0) {
    socket.write(slow);
    slow = '';
  }
  void (async () => {
    for (let i = 0; i < slow.length && !socket.destroyed; i++) {
      socket.write(slow[i]!);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  const timer = new Promise<boolean>((r) => setTimeout(() => r(false), waitMs));
  const result = await Promise.race([closed, timer]);
  socket.destroy();
  return { closed: result, received };
}

/** A turn's body holding `count` distinct tiny messages, content parts, tools or tool calls. */
function manyItems(dialect: 'openai' | 'anthropic', shape: ItemShape, count: number): string {
  const n = Array.from({ length: count }, (_, i) => i);
  const user = (content: unknown) => ({ role: 'user', content });
  const openai = dialect === 'openai';
  const body = {
    messages: [user('hi')] as unknown[],
    tools: [] as unknown[],
    max_tokens: 16,
  };
  if (shape === 'messages') body.messages = n.map((i) => ({ role: i % 2 ? 'assistant' : 'user', content: `note ${i}` }));
  if (shape === 'parts') body.messages = [user(n.map((i) => ({ type: 'text', text: `part ${i}` })))];
  if (shape === 'tools') {
    body.tools = n.map((i) =>
      openai
        ? { type: 'function', function: { name: `t${i}`, parameters: { type: 'object' } } }
        : { name: `t${i}`, input_schema: { type: 'object' } },
    );
  }
  if (shape === 'toolCalls') {
    const calls = openai
      ? { content: '', tool_calls: n.map((i) => ({ id: `c${i}`, type: 'function', function: { name: 'f', arguments: '{}' } })) }
      : { content: n.map((i) => ({ type: 'tool_use', id: `c${i}`, name: 'f', input: {} })) };
    body.messages = [user('hi'), { role: 'assistant', ...calls }, user('go on')];
  }
  return JSON.stringify(body);
}

/** `bytes` of distinct source-like lines (nothing a tokenizer cache has seen), cut into `parts`. */
function distinctText(bytes: number, parts = 1): string[] {
  const salt = Math.random().toString(36).slice(2);
  const out: string[] = [];
  let line = 0;
  for (let p = 0; p < parts; p++) {
    const lines: string[] = [];
    let size = 0;
    const want = Math.floor(bytes / parts);
    while (size < want) {
      const text = `def handler_${salt}_${line}(event, ctx):  # line ${line++}\n    return process(event.payload)\n`;
      lines.push(text);
      size += text.length;
    }
    out.push(lines.join('').slice(0, want));
  }
  return out;
}

function spelledBody(spell: BodySpell, bytes: number): string {
  const user = (content: unknown) => ({ role: 'user', content });
  switch (spell) {
    case 'anthropic-message':
      return JSON.stringify({ max_tokens: 16, messages: [user(distinctText(bytes)[0])] });
    case 'anthropic-system':
      return JSON.stringify({ max_tokens: 16, system: distinctText(bytes)[0], messages: [user('hi')] });
    case 'anthropic-tool-result':
      return JSON.stringify({
        max_tokens: 16,
        messages: [
          user('list the files'),
          { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'bash', input: { cmd: 'ls' } }] },
          user([{ type: 'tool_result', tool_use_id: 't1', content: distinctText(bytes)[0] }]),
        ],
      });
    case 'openai-messages':
      return JSON.stringify({
        max_tokens: 16,
        messages: distinctText(bytes, Math.ceil(bytes / 1536)).map((t, i) => ({
          role: i % 2 ? 'assistant' : 'user',
          content: t,
        })),
      });
    case 'responses-instructions':
      return JSON.stringify({ input: 'hi', instructions: distinctText(bytes)[0] });
    case 'responses-items':
      return JSON.stringify({
        input: distinctText(bytes, Math.ceil(bytes / 3072)).map((t) => ({ type: 'message', role: 'user', content: t })),
      });
  }
}

/** POST a whole body; resolves with the answer, or the socket error. */
function post(url: string, body: string): Promise<AttackResult<{ op: 'body' } & AttackCommand>> {
  return new Promise((resolve) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      const retryAfter = res.headers['retry-after'];
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text, retryAfter }));
    });
    req.on('error', (e) => resolve({ error: (e as NodeJS.ErrnoException).code ?? e.message }));
    req.end(body);
  });
}

process.on('message', async ({ id, command }: { id: number; command: AttackCommand }) => {
  const result =
    command.op === 'stream'
      ? await stream(command.url, command.bytes, command.headers, command.fill)
      : command.op === 'items'
        ? await post(command.url, manyItems(command.dialect, command.shape, command.count))
        : command.op === 'body'
          ? await post(command.url, spelledBody(command.spell, command.bytes))
        : await Promise.all(command.scripts.map((s) => openSocket(command.url, s, command.everyMs, command.waitMs)));
  process.send?.({ id, result });
});
process.send?.({ ready: true });
process.on('disconnect', () => process.exit(0));
