export {
  AnthropicRequestSchema,
  type ChatRequest,
  type Dialect,
  OpenAIChatRequestSchema,
  type TurnReply,
} from './dialects.js';
export {
  type CaptureProxy,
  type CaptureProxyOptions,
  type CaptureSession,
  captureFetch,
  type ProxyEvents,
  type ProxyTurnEvent,
  type SessionOptions,
  startCaptureProxy,
} from './proxy.js';
