// Base URLs a user writes (engine and dashboard addresses), checked before anything connects.
import { ConfigError } from '../errors.js';

/**
 * `value` as an http(s) URL with a host, else a `ConfigError` that shows the value and `example`. Plain
 * `new URL` accepts `localhost:30000` as a URL with scheme `localhost:`, so the scheme is checked too.
 */
export function httpUrl(value: string, what: string, example: string): URL {
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    // reported below
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    throw new ConfigError(`${what} ${JSON.stringify(value)} is not an http(s) URL; write it as ${example}`, {
      data: { value },
    });
  }
  return url;
}
