// Fakes and fixtures for users' tests (the `@vime/core/testing` entry).
export * from './standin/index.js';
