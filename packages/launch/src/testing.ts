/**
 * Loopback stand-ins for tests (the `@vime/launch/testing` entry): a Ray dashboard answering the Jobs REST
 * API with Ray's recorded shapes. The SGLang/vLLM health stand-in is `startHealthStandIn` of
 * `@vime/core/standin`.
 *
 * @module @vime/launch/testing
 */
export { type FakeJobScript, type FakeRay, type FakeRayOptions, startFakeRay } from './testing/ray.js';
