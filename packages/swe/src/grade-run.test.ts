/** The test command rewritten to start the grader's runner, and the modules imported before pytest. */
import { describe, expect, it } from 'vitest';
import { modulesToPreimport, wrapPytestCommand } from './grade-run.js';
import { OFFLINE_TEST_COMMAND, resolveProfile } from './profiles.js';

const wrap = (command: string) => wrapPytestCommand(command, '/g/run.py', '/g/spec.json');

describe('wrapPytestCommand', () => {
  it('replaces `python -m pytest` by the runner under the same interpreter, environment and arguments', () => {
    expect(wrap(OFFLINE_TEST_COMMAND)).toBe(
      'PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python3 -I -S -B /g/run.py /g/spec.json --disable-warnings --color=no --tb=no --verbose -p no:cacheprovider',
    );
    expect(wrap('/opt/conda/bin/python3.11 -m pytest -x tests')).toBe(
      '/opt/conda/bin/python3.11 -I -S -B /g/run.py /g/spec.json -x tests',
    );
  });

  it('replaces a bare pytest after the environment set-up, with the environment python', () => {
    const conda = resolveProfile('swesmith/mewwts__addict.75284f95').testCommand;
    expect(wrap(conda)).toBe(
      'source /opt/miniconda3/bin/activate; conda activate testbed; "$(command -v python || command -v python3)" -I -S -B /g/run.py /g/spec.json --disable-warnings --color=no --tb=no --verbose',
    );
    expect(wrap('/root/.local/bin/uv run pytest --tb=no')).toBe(
      '/root/.local/bin/uv run python -I -S -B /g/run.py /g/spec.json --tb=no',
    );
    expect(wrap('pytest --color=no -rA -k "a or b"')).toBe(
      '"$(command -v python || command -v python3)" -I -S -B /g/run.py /g/spec.json --color=no -rA -k "a or b"',
    );
  });

  it('leaves commands that run no pytest to the log', () => {
    expect(wrap('python -m tornado.test --verbose')).toBeUndefined();
    expect(wrap('go test -v ./...')).toBeUndefined();
    expect(wrap('cargo test --verbose')).toBeUndefined();
    expect(wrap('npx pytest-like --x')).toBeUndefined();
  });
});

describe('modulesToPreimport', () => {
  it('the packages, then the modules of theirs the patch changed (not those it added)', () => {
    const packages = [
      { name: 'calc', path: 'src/calc' },
      { name: 'tests', path: 'tests' },
      { name: 'six', path: 'six.py' },
    ];
    expect(
      modulesToPreimport(
        packages,
        [
          'src/calc/ops.py',
          'src/calc/sub/__init__.py',
          'src/calc/__main__.py',
          'README.md',
          'tests/conftest.py',
          'src/calc/new.py',
        ],
        [
          'src/calc/__init__.py',
          'src/calc/ops.py',
          'src/calc/sub/__init__.py',
          'src/calc/__main__.py',
          'tests/conftest.py',
        ],
      ),
    ).toEqual(['calc', 'tests', 'calc.ops', 'calc.sub']);
  });
});
