/**
 * SWE-smith repository profiles: the test command, log parser and test-file rule of a mirror
 * (`swesmith/<owner>__<repo>.<commit8>`). Built in: SWE-smith's Python default and the Python repositories
 * whose profiles override it; everything else in the Python registry uses the default. Other languages
 * are chosen explicitly (`defineProfile`), since a row does not say which language its repository is in.
 */
import { ConfigError } from '@vime/core';
import {
  parseAutograd,
  parseCargo,
  parseGoTest,
  parseJest,
  parseMocha,
  parseMypy,
  parseParamiko,
  parsePythonProfile,
  parseSlugify,
  parseTornado,
  parseVitest,
} from './parsers/swesmith.js';
import type { LogParser } from './parsers/types.js';

/** SWE-smith's conda prefix for Python images (`/opt/miniconda3`, env `testbed`). */
export const CONDA_ACTIVATE = 'source /opt/miniconda3/bin/activate; conda activate testbed; ';
export const PYTHON_TEST_CMD = 'pytest --disable-warnings --color=no --tb=no --verbose';

/**
 * The agent's environment in a SWE-smith Python image: its conda env `testbed` first on PATH, as the
 * image's `~/.bashrc` activates it for an interactive shell (a sandbox's commands run no rc file).
 */
export const CONDA_ENV: Readonly<Record<string, string>> = {
  PATH: '/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/condabin:/opt/miniconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  CONDA_DEFAULT_ENV: 'testbed',
  CONDA_PREFIX: '/opt/miniconda3/envs/testbed',
};

/** How a repository's tests are run and parsed. */
export interface SweProfile {
  /** `owner__repo` (commit-independent) this profile applies to, or `*` for a family default. */
  key: string;
  language: 'python' | 'go' | 'rust' | 'javascript';
  /** The whole command run between the eval markers. */
  testCommand: string;
  /** Environment of every sandbox of the repository (SWE-smith's Python images: `CONDA_ENV`). */
  env?: Readonly<Record<string, string>> | undefined;
  parser: LogParser;
  /** SWE-smith `min_testing`: run only the rows' F2P and P2P test files instead of the whole suite. */
  minTesting?: boolean | undefined;
  /** Per-row command where the profile builds one (SWE-smith `get_test_cmd` overrides, e.g. mypy's `-k`). */
  commandFor?(row: { FAIL_TO_PASS: readonly string[] }): string;
  /** Test files of a row: `[FAIL_TO_PASS files, PASS_TO_PASS files]` (`get_test_files`). */
  testFiles(row: { FAIL_TO_PASS: readonly string[]; PASS_TO_PASS: readonly string[] }): [string[], string[]];
}

/** Python rule: the part of each id before the first `::`, sorted and unique. */
export function pythonTestFiles(row: {
  FAIL_TO_PASS: readonly string[];
  PASS_TO_PASS: readonly string[];
}): [string[], string[]] {
  const files = (ids: readonly string[]) => [...new Set(ids.map((id) => id.split('::')[0]!))].sort();
  return [files(row.FAIL_TO_PASS), files(row.PASS_TO_PASS)];
}

const none = (): [string[], string[]] => [[], []];

function python(key: string, testCommand: string, parser: LogParser = parsePythonProfile): SweProfile {
  return {
    key,
    language: 'python',
    testCommand: CONDA_ACTIVATE + testCommand,
    env: CONDA_ENV,
    parser,
    testFiles: pythonTestFiles,
  };
}

const minTesting = (profile: SweProfile): SweProfile => ({ ...profile, minTesting: true });

/**
 * The project's own repository (the offline task set's `vime/toolbelt`): SWE-smith's Python default with no
 * conda, plugin autoloading off (the output does not depend on the machine's pytest plugins), no bytecode written, and pytest
 * started with `-I`, so no module in the work dir can stand in for the runner or the standard library.
 */
export const OFFLINE_TEST_COMMAND = `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -I -B -m ${PYTHON_TEST_CMD} -p no:cacheprovider`;

const builtins: SweProfile[] = [
  python('*', PYTHON_TEST_CMD),
  { ...python('vime__toolbelt', ''), testCommand: OFFLINE_TEST_COMMAND, env: undefined },
  // The procedural task family's generated repositories: one name, a commit per repository.
  { ...python('vime__procedural', ''), testCommand: OFFLINE_TEST_COMMAND, env: undefined },
  python('paramiko__paramiko', 'pytest -rA --color=no --disable-warnings', parseParamiko),
  python('HIPS__autograd', PYTHON_TEST_CMD, parseAutograd),
  python('tornadoweb__tornado', 'python -m tornado.test --verbose', parseTornado),
  python('un33k__python-slugify', 'python test.py --verbose', parseSlugify),
  {
    ...python('python__mypy', 'pytest --color=no -rA -k', parseMypy),
    commandFor: (row) =>
      `${CONDA_ACTIVATE}pytest --color=no -rA -k "${row.FAIL_TO_PASS.map((id) => id.split('::').at(-1)).join(' or ')}"`,
  },
  python('tkrajina__gpxpy', 'pytest test.py --verbose --color=no --tb=no --disable-warnings'),
  python('mido__mido', `${PYTHON_TEST_CMD} -rs -c /dev/null`),
  ...[
    'Project-MONAI__MONAI',
    'iterative__dvc',
    'facebookresearch__hydra',
    'dask__dask',
    'modin-project__modin',
    'conan-io__conan',
    'pandas-dev__pandas',
    'scrapy__scrapy',
    'sqlfluff__sqlfluff',
    'tobymao__sqlglot',
    'sunpy__sunpy',
    'sympy__sympy',
    'getmoto__moto',
  ].map((key) => minTesting(python(key, PYTHON_TEST_CMD))),
  minTesting(python('jax-ml__jax', `${PYTHON_TEST_CMD} -n auto`)),
  {
    ...python('pydantic__pydantic', ''),
    testCommand: `${CONDA_ACTIVATE}/root/.local/bin/uv run ${PYTHON_TEST_CMD}`,
  },
];

/** SWE-smith's Go and Rust registries (`profiles/golang.py`, `profiles/rust.py`): repo → test command override. */
const GO_REPOS = [
  'gin-gonic__gin',
  'junegunn__fzf',
  'beego__beego',
  'caddyserver__caddy',
  'cli__cli',
  'concourse__concourse',
  'etcd-io__etcd',
  'fatedier__frp',
  'go-gorm__gorm',
  'gohugoio__hugo',
  'grpc__grpc-go',
  'istio__istio',
  'jesseduffield__lazygit',
  'labstack__echo',
  'nats-io__nats-server',
  'bojanz__address',
  'prometheus__prometheus',
  'syncthing__syncthing',
  'zeromicro__go-zero',
  'arp242__goatcounter',
  'cweill__gotests',
];
const RUST_REPOS: Record<string, string | undefined> = {
  dtolnay__anyhow: undefined,
  'marshallpierce__rust-base64': undefined,
  'clap-rs__clap': 'make test-full ARGS=--verbose',
  hyperium__hyper: 'cargo test --verbose --features full',
  'rust-itertools__itertools': 'cargo test --verbose --all-features',
  'serde-rs__json': undefined,
  'rust-lang__log': undefined,
  dtolnay__semver: undefined,
  'tokio-rs__tokio': 'cargo test --verbose --features full -- --skip try_exists',
  'uuid-rs__uuid': 'cargo test --verbose --all-features',
  'rust-lang__mdBook': 'cargo test --workspace --verbose',
  'BurntSushi__rust-csv': undefined,
  servo__html5ever: undefined,
  BurntSushi__byteorder: undefined,
  chronotope__chrono: undefined,
  orium__rpds: undefined,
  'rayon-rs__rayon': undefined,
  BurntSushi__ripgrep: 'cargo test --all --verbose',
  'rust-lang__rust-clippy': undefined,
  sharkdp__hexyl: undefined,
  hatoo__oha: undefined,
  'console-rs__indicatif': undefined,
  'yoav-lavi__melody': undefined,
  'cordx56__rust-owl': undefined,
  'quinn-rs__quinn': undefined,
  anordal__shellharden: undefined,
  pemistahl__grex: undefined,
  mgdm__htmlq: undefined,
  ducaale__xh: undefined,
  'parcel-bundler__lightningcss': undefined,
  svenstaro__miniserve: undefined,
  bensadeh__tailpsin: undefined,
  mozilla__sccache: undefined,
  'boa-dev__boa': undefined,
  sharkdp__pastel: undefined,
  dtolnay__cxx: undefined,
  'rust-lang__rustfmt': undefined,
  'tealdeer-rs__tealdeer': undefined,
  'image-rs__image': undefined,
  'Byron__dua-cli': undefined,
  'serenity-rs__serenity': undefined,
  'http-rs__tide': undefined,
  rhaiscript__rhai: undefined,
  Canop__broot: undefined,
  o2sh__onefetch: undefined,
  seanmonstar__reqwest: undefined,
  bootandy__dust: undefined,
  ekzhang__bore: undefined,
  seanmonstar__warp: undefined,
  orf__gping: undefined,
  huggingface__tokenizers: 'cd ~/testbed/tokenizers && cargo test --verbose',
};

/** Family defaults for repositories of other languages (their per-repo commands vary; pass your own). */
export const LANGUAGE_PROFILES: Readonly<Record<'go' | 'rust' | 'jest' | 'mocha' | 'vitest', SweProfile>> = {
  go: { key: '*', language: 'go', testCommand: 'go test -v ./...', parser: parseGoTest, testFiles: none },
  rust: {
    key: '*',
    language: 'rust',
    testCommand: 'cargo test --verbose',
    parser: parseCargo,
    testFiles: none,
  },
  jest: {
    key: '*',
    language: 'javascript',
    testCommand: 'npx jest --verbose',
    parser: parseJest,
    testFiles: none,
  },
  mocha: {
    key: '*',
    language: 'javascript',
    testCommand: 'npm test -- --verbose',
    parser: parseMocha,
    testFiles: none,
  },
  vitest: {
    key: '*',
    language: 'javascript',
    testCommand: 'npx vitest run --reporter verbose',
    parser: parseVitest,
    testFiles: none,
  },
};

/**
 * SWE-smith `get_test_cmd` for a row: the profile's own rule, else with `min_testing` the command followed by
 * the F2P then P2P test files, else the command alone (the whole suite).
 */
export function testCommandFor(
  profile: SweProfile,
  row: { FAIL_TO_PASS: readonly string[]; PASS_TO_PASS: readonly string[] },
): string {
  if (profile.commandFor) return profile.commandFor(row);
  if (!profile.minTesting) return profile.testCommand;
  const [f2p, p2p] = profile.testFiles(row);
  const files = [...f2p, ...p2p];
  return files.length > 0 ? `${profile.testCommand} ${files.join(' ')}` : profile.testCommand;
}

/** `swesmith/owner__repo.commit8` or `owner__repo.commit8` → `owner__repo`. */
export function profileKey(mirrorOrRepoName: string): string {
  const name = mirrorOrRepoName.startsWith('swesmith/')
    ? mirrorOrRepoName.slice('swesmith/'.length)
    : mirrorOrRepoName;
  const dot = name.lastIndexOf('.');
  return dot > 0 ? name.slice(0, dot) : name;
}

/** A profile for your own repository (e.g. another language, or a command without conda). */
export function defineProfile(
  profile: Partial<SweProfile> & Pick<SweProfile, 'key' | 'testCommand'>,
): SweProfile {
  if (!profile.key)
    throw new ConfigError('defineProfile: `key` must be "owner__repo" (e.g. "vime__pyutils")');
  return { language: 'python', parser: parsePythonProfile, testFiles: pythonTestFiles, ...profile };
}

/**
 * The profile of a mirror. Profiles passed in `extra` win over the built-ins; a Python repository SWE-smith
 * does not override gets the default Python profile, as SWE-smith's registry does.
 */
export function resolveProfile(mirrorOrRepoName: string, extra: readonly SweProfile[] = []): SweProfile {
  const key = profileKey(mirrorOrRepoName);
  const lower = key.toLowerCase();
  const found =
    extra.find((p) => p.key.toLowerCase() === lower) ?? builtins.find((p) => p.key.toLowerCase() === lower);
  if (found) return found;
  if (GO_REPOS.some((r) => r.toLowerCase() === lower)) return { ...LANGUAGE_PROFILES.go, key };
  const rust = Object.keys(RUST_REPOS).find((r) => r.toLowerCase() === lower);
  if (rust)
    return {
      ...LANGUAGE_PROFILES.rust,
      key,
      testCommand: RUST_REPOS[rust] ?? LANGUAGE_PROFILES.rust.testCommand,
    };
  return builtins[0]!;
}
