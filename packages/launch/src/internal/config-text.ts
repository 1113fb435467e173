// Parse a config file's text (YAML, or JSON by extension) into a value; a syntax error names the file,
// the line and the column, and shows the line with a caret under the column.
import { ConfigError } from '@vime/core';
import { parse as locateJsonErrors, type ParseError } from 'jsonc-parser';
import { parseDocument } from 'yaml';

/** 1-based line and column of a character offset. */
function position(text: string, offset: number): { line: number; col: number } {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const lines = before.split('\n');
  return { line: lines.length, col: lines.at(-1)!.length + 1 };
}

function syntaxError(label: string, text: string, offset: number, message: string): ConfigError {
  const { line, col } = position(text, offset);
  const source = (text.split('\n')[line - 1] ?? '').replace(/\r$/, '');
  const shown = source.length > 120 ? `${source.slice(0, 120)}…` : source;
  const caret = col - 1 <= 120 ? `\n  ${shown}\n  ${' '.repeat(col - 1)}^` : '';
  return new ConfigError(`${label}: line ${line}, column ${col}: ${message}${caret}`, {
    data: { line, column: col },
  });
}

function parseJson(text: string, label: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    // V8 names the offset for most errors; for an unexpected token it does not, so a tolerant JSON
    // parser locates the first error instead.
    const message = (error as Error).message;
    const at = /at position (\d+)/.exec(message);
    const errors: ParseError[] = [];
    locateJsonErrors(text, errors, { disallowComments: true, allowTrailingComma: false });
    const offset = at ? Number(at[1]) : (errors[0]?.offset ?? text.length);
    const reason = message
      .replace(/(?: in JSON)? at position \d+.*$/s, '')
      .replace(/, .*is not valid JSON$/s, '')
      .replace(/ \(line \d+ column \d+\)$/, '');
    throw syntaxError(label, text, offset, `${reason} (not valid JSON)`);
  }
}

function parseYaml(text: string, label: string): unknown {
  const doc = parseDocument(text, { prettyErrors: false });
  const error = doc.errors[0];
  if (error) {
    const message =
      error.code === 'MULTIPLE_DOCS'
        ? 'a config holds one YAML document; remove the second "---"'
        : error.message;
    throw syntaxError(label, text, error.pos[0], message);
  }
  return doc.toJS();
}

/** The value in `text`, read as JSON when `file` ends in `.json`, else as YAML. `label` starts messages. */
export function parseConfigText(text: string, file: string, label: string): unknown {
  return file.toLowerCase().endsWith('.json') ? parseJson(text, label) : parseYaml(text, label);
}
