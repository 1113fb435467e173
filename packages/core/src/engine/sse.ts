/** Server-sent events as an engine writes them: the `data:` payload of each event, in order. */
export async function* sseData(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of body) {
    buffer += decoder.decode(chunk, { stream: true });
    if (buffer.includes('\r')) buffer = buffer.replace(/\r\n?/g, '\n');
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const data = eventData(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (data !== undefined) yield data;
      end = buffer.indexOf('\n\n');
    }
  }
  const data = eventData(buffer + decoder.decode());
  if (data !== undefined) yield data;
}

/** The joined `data:` lines of one event (undefined for comments and events without data). */
function eventData(block: string): string | undefined {
  let data: string | undefined;
  for (const line of block.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const value = line.slice(line[5] === ' ' ? 6 : 5);
    data = data === undefined ? value : `${data}\n${value}`;
  }
  return data;
}
