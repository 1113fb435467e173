/**
 * Stand-ins for the hosted vendors' servers, for tests and for trying the providers without an account:
 * loopback HTTP servers that answer the routes and JSON each vendor's official SDK calls (built from the
 * vendors' published API specs and SDK clients, not the vendors' services), running each sandbox's commands
 * as local processes under bubblewrap. Labelled as stand-ins wherever their output appears.
 *
 * @module @vime/sandbox-hosted/testing
 */
export {
  type DaytonaBox,
  type DaytonaStandin,
  type DaytonaStandinOptions,
  startDaytonaStandin,
} from './standins/daytona.js';
export { type E2bStandin, type E2bStandinOptions, startE2bStandin } from './standins/e2b.js';
export { LocalBox } from './standins/local-box.js';
export {
  type ModalBox,
  type ModalStandin,
  type ModalStandinOptions,
  startModalStandin,
} from './standins/modal.js';
