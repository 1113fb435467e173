// Loopback stand-ins for tests (the `@vime/launch/testing` entry): a Ray dashboard answering the Jobs
// REST API with Ray's recorded shapes, and SGLang/vLLM health endpoints with scripted start-up.
export { closedPort, type FakeEngine, type HealthScript, startFakeEngine } from './testing/engines.js';
export { type FakeJobScript, type FakeRay, type FakeRayOptions, startFakeRay } from './testing/ray.js';
