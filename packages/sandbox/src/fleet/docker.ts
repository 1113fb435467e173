/** A remote (or local) Docker engine as a fleet backend: its provider, ping and reaper over one client. */
import { DockerEngine, type DockerTls } from '../docker/engine-api.js';
import { type DockerProviderOptions, dockerProvider } from '../docker/provider.js';
import { reapEngineOrphans } from '../reap.js';
import type { FleetBackend } from './backend.js';

/** Options of `dockerBackend`. */
export interface DockerBackendOptions
  extends Omit<DockerProviderOptions, 'engine' | 'socketPath' | 'host' | 'tls'> {
  name: string;
  /** `tcp://host:port` (with `tls`) or `unix:///path/docker.sock`. */
  host: string;
  /** PEM contents of the CA that signed the engine's certificate, and this client's certificate and key. */
  tls?: DockerTls | undefined;
  capacity: number;
  createsPerSecond?: number | undefined;
  burst?: number | undefined;
}

/** A Docker engine as a fleet backend: `dockerProvider`, `GET /_ping` as its health, and its containers' reaper. */
export function dockerBackend(options: DockerBackendOptions): FleetBackend & { engine: DockerEngine } {
  const { name, host, tls, capacity, createsPerSecond, burst, ...provider } = options;
  const engine = new DockerEngine({ host, tls });
  return {
    name,
    engine,
    provider: dockerProvider({ ...provider, engine }),
    capacity,
    createsPerSecond,
    burst,
    ping: (signal) => engine.ping(signal),
    reap: (o) => reapEngineOrphans(engine, o),
    close: () => engine.close(),
  };
}
