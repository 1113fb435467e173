import { ConfigError } from '@vime/core';
import { bubblewrapProvider } from './bubblewrap/provider.js';
import { dockerProvider } from './docker/provider.js';
import { localProvider } from './host/local-provider.js';
import type { ImageStore } from './images/store.js';
import type { SandboxProvider } from './types.js';

/** A sandbox backend. */
export type ProviderKind = 'bubblewrap' | 'docker' | 'local';

/** Options of `providerFor`. */
export interface ProviderForOptions {
  /** Where bubblewrap turns image references into rootfs folders (default `new ImageStore()`). */
  imageStore?: ImageStore | undefined;
}

/** The provider of a backend named on a command line or in a config (`--sandbox bubblewrap`). */
export function providerFor(kind: string, options: ProviderForOptions = {}): SandboxProvider {
  switch (kind) {
    case 'bubblewrap':
      return bubblewrapProvider({ imageStore: options.imageStore });
    case 'docker':
      return dockerProvider();
    case 'local':
      return localProvider();
    default:
      throw new ConfigError(
        `sandbox ${JSON.stringify(kind)} is not a backend; use bubblewrap (default), docker, or local (no isolation)`,
      );
  }
}
