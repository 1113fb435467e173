/**
 * Checks that need the grading sandbox itself, run there after the patch is applied and before the tests:
 * which names the sandbox's own Python treats as standard-library modules, which folders are packages
 * (a module in a folder that is not a package can land on the import path), and what the changed runner
 * configuration files say once parsed. Its answer is a list of `HackFlag`s as JSON.
 */
import type { Sandbox } from '@vime/sandbox';
import type { HackFlag } from './antihack.js';
import { sh } from './git.js';

/** Top-level modules of the test runners; a patch that adds one shadows the runner. */
const RUNNER_MODULES = [
  'pytest',
  '_pytest',
  'py',
  'pluggy',
  'iniconfig',
  'unittest',
  'doctest',
  'nose',
  'xdist',
];

const PROBE = String.raw`
import configparser, json, os, sys
paths = json.load(sys.stdin)
added = set(paths["added"])
changed = paths["added"] + paths["changed"]
stdlib = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
runner = set(json.loads(sys.argv[1]))
flags = []
def flag(kind, detail):
    flags.append({"kind": kind, "detail": detail})
def is_package(folder):
    return os.path.isfile(os.path.join(folder, "__init__.py"))
for path in changed:
    if not os.path.exists(path):
        continue
    parts = path.split("/")
    # The module a new file defines at the top of a folder that could be on sys.path.
    for depth in range(len(parts) if path in added else 0):
        folder = "/".join(parts[:depth]) or "."
        if depth > 0 and is_package(folder):
            continue
        name = parts[depth]
        module = name[:-3] if depth == len(parts) - 1 and name.endswith(".py") else (name if depth < len(parts) - 1 else None)
        if module and (module in stdlib or module in runner):
            flag("module_shadowing", "%s defines a module %r that shadows %s" % (path, module, "the test runner" if module in runner else "the standard library"))
            break
    base = parts[-1]
    try:
        if base in ("tox.ini", "setup.cfg"):
            cp = configparser.ConfigParser(interpolation=None)
            cp.read(path)
            section = "pytest" if base == "tox.ini" else "tool:pytest"
            if cp.has_section(section):
                flag("test_config_changed", "%s has a [%s] section after the patch" % (path, section))
        elif base == "pyproject.toml":
            text = open(path, encoding="utf-8", errors="replace").read()
            if "[tool.pytest" in text or "tool.pytest" in text:
                flag("test_config_changed", "%s configures pytest after the patch" % path)
    except Exception as e:
        flag("test_config_changed", "%s is a runner configuration file that no longer parses: %s" % (path, e))
json.dump(flags, sys.stdout)
`;

/**
 * Run the probe over the paths the patch added and changed in the grading sandbox (Python repositories only). A probe that
 * cannot run adds nothing: the patch-level checks still apply, and the tests decide.
 */
export async function sandboxHacks(
  sandbox: Sandbox,
  files: { added: readonly string[]; changed: readonly string[] },
  options: { python?: string | undefined; signal?: AbortSignal | undefined } = {},
): Promise<HackFlag[]> {
  if (files.added.length + files.changed.length === 0) return [];
  await sandbox.writeFile('.git/vime-probe.py', PROBE, options.signal ? { signal: options.signal } : {});
  const r = await sh(
    sandbox,
    `${options.python ?? 'python3'} -I .git/vime-probe.py '${JSON.stringify(RUNNER_MODULES)}'`,
    {
      signal: options.signal,
      timeoutMs: 60_000,
      stdin: JSON.stringify(files),
    },
  );
  if (r.exitCode !== 0) return [];
  try {
    return JSON.parse(r.stdout) as HackFlag[];
  } catch {
    return [];
  }
}
