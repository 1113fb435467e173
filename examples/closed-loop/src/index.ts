export {
  bundledTokenizerDir,
  exampleDir,
  type PolicyServerOptions,
  pythonEnv,
  type RunningPolicyServer,
  startPolicyServer,
} from './policy-server.js';
