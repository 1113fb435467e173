/** The in-process `fetch` of a capture session: a client's requests go straight into the proxy's routes. */
import { RequestError } from './dialects.js';
import { retryCountOf } from './ledger.js';
import { type Reply, responseBody } from './reply.js';
import type { BodyAccount } from './server.js';

/** The proxy's router: one request to a route, answered as a `Reply`. */
export type Dispatch = (
  method: string,
  pathname: string,
  credential: string | undefined,
  readBody: (account?: BodyAccount) => Promise<string>,
  signal: AbortSignal,
  retryCount: number,
) => Promise<Reply>;

/** A `fetch` for one session (no HTTP hop): the same routes, limits, retries and capture as the server. */
export function inProcessFetch(sessionId: string, dispatch: Dispatch, maxBodyBytes: number): typeof fetch {
  return async (input, init) => {
    const request = input instanceof Request ? input : undefined;
    const target = new URL(
      request ? request.url : input instanceof URL ? input.href : String(input),
      'http://in-process',
    );
    const method = (init?.method ?? request?.method ?? 'GET').toUpperCase();
    // a cancelled streamed body ends the turn, as a closed connection does
    const closer = new AbortController();
    const outer = init?.signal ?? request?.signal;
    if (outer?.aborted) closer.abort(outer.reason);
    outer?.addEventListener('abort', () => closer.abort(outer.reason), { once: true });
    const signal = closer.signal;
    const readBody = async (account?: BodyAccount) => {
      const body = init?.body;
      const text =
        typeof body === 'string'
          ? body
          : body instanceof Uint8Array
            ? new TextDecoder().decode(body)
            : body != null
              ? await new Response(body as ConstructorParameters<typeof Response>[0]).text()
              : request
                ? await request.text()
                : '';
      const bytes = Buffer.byteLength(text);
      if (bytes > maxBodyBytes) {
        throw new RequestError(
          413,
          `request body of ${bytes} bytes is over the proxy's limit of ${maxBodyBytes} bytes (limits.maxBodyBytes)`,
        );
      }
      const refused = account?.reserve(bytes);
      if (refused) throw refused;
      return text;
    };
    const path = target.pathname.replace(
      /^.*?(\/v1)?(\/(chat\/completions|messages(?:\/count_tokens)?|models|responses))$/,
      '$2',
    );
    const retries = new Headers(init?.headers ?? request?.headers).get('x-stainless-retry-count');
    const reply = await dispatch(method, path, sessionId, readBody, signal, retryCountOf(retries));
    return new Response(
      responseBody(reply, (reason) => closer.abort(reason)),
      { status: reply.status, headers: { 'content-type': reply.contentType, ...reply.headers } },
    );
  };
}
