/**
 * Image references as the Docker engine reads them (`swesmith/foo`, `127.0.0.1:5000/a/b:tag`,
 * `name@sha256:…`), normalised so that names written by `docker save`, skopeo or containerd match the
 * name a dataset row gives.
 */
import { ConfigError } from '@vime/core';

/** An image reference split into its parts, with Docker Hub's defaults filled in. */
export interface ImageReference {
  /** Registry host (`docker.io` when the name has none). */
  registry: string;
  /** Repository path (`library/` added for Docker Hub's one-part names). */
  repository: string;
  tag: string | undefined;
  digest: string | undefined;
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DIGEST = /^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/;
const TAG = /^[\w][\w.-]{0,127}$/;

/** Parse a reference; a malformed one is a `ConfigError` naming it. */
export function parseImageReference(reference: string, field = 'image'): ImageReference {
  const bad = (why: string) =>
    new ConfigError(
      `${field} ${JSON.stringify(reference)} is not an image reference (${why}); write it as docker does, e.g. "swebench/swesmith.x86_64.owner_1776_repo.abc12345" or "registry:5000/name:tag"`,
    );
  if (typeof reference !== 'string' || reference.length === 0 || /\s/.test(reference))
    throw bad('empty or has spaces');
  let rest = reference;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw bad(`digest ${JSON.stringify(digest)}`);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw bad(`tag ${JSON.stringify(tag)}`);
  }
  const parts = rest.split('/');
  let registry = 'docker.io';
  const first = parts[0]!;
  if (parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost')) {
    registry = first;
    parts.shift();
  }
  if (registry === 'index.docker.io') registry = 'docker.io';
  if (registry === 'docker.io' && parts.length === 1) parts.unshift('library');
  for (const part of parts) if (!COMPONENT.test(part)) throw bad(`path component ${JSON.stringify(part)}`);
  return { registry, repository: parts.join('/'), tag: tag ?? (digest ? undefined : 'latest'), digest };
}

/** The fully qualified form (`docker.io/library/x:latest`): equal for every spelling of one image. */
export function canonicalImage(reference: string): string {
  const ref = parseImageReference(reference);
  return `${ref.registry}/${ref.repository}${ref.tag ? `:${ref.tag}` : ''}${ref.digest ? `@${ref.digest}` : ''}`;
}

/** The `fromImage` and `tag` of the engine's `POST /images/create` for a reference. */
export function pullQuery(reference: string): { fromImage: string; tag: string | undefined } {
  const ref = parseImageReference(reference);
  const name = `${ref.registry}/${ref.repository}`;
  return ref.digest
    ? { fromImage: `${name}@${ref.digest}`, tag: undefined }
    : { fromImage: name, tag: ref.tag };
}

/** Whether a name found in an archive (a RepoTag, an annotation) names `reference`. */
export function sameImage(found: string, reference: string): boolean {
  try {
    return canonicalImage(found) === canonicalImage(reference);
  } catch {
    return false;
  }
}
