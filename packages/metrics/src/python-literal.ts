/** A value of Python's literal syntax, as `repr()` prints dicts of metrics. */
export type PyValue = number | string | boolean | null | PyValue[] | { [key: string]: PyValue };

class LiteralParser {
  i = 0;
  constructor(readonly s: string) {}

  fail(): never {
    throw new SyntaxError(`unexpected ${JSON.stringify(this.s.slice(this.i, this.i + 12))} at ${this.i}`);
  }

  ws(): void {
    while (this.i < this.s.length && /\s/.test(this.s[this.i]!)) this.i++;
  }

  value(): PyValue {
    this.ws();
    const c = this.s[this.i];
    if (c === '{') return this.dict();
    if (c === '[' || c === '(') return this.list(c === '[' ? ']' : ')');
    if (c === "'" || c === '"') return this.string(c);
    return this.atom();
  }

  dict(): { [key: string]: PyValue } {
    const out: { [key: string]: PyValue } = {};
    this.i++;
    for (;;) {
      this.ws();
      if (this.s[this.i] === '}') {
        this.i++;
        return out;
      }
      const key = this.value();
      this.ws();
      if (this.s[this.i] !== ':') this.fail();
      this.i++;
      out[String(key)] = this.value();
      this.ws();
      if (this.s[this.i] === ',') this.i++;
      else if (this.s[this.i] !== '}') this.fail();
    }
  }

  list(close: string): PyValue[] {
    const out: PyValue[] = [];
    this.i++;
    for (;;) {
      this.ws();
      if (this.s[this.i] === close) {
        this.i++;
        return out;
      }
      out.push(this.value());
      this.ws();
      if (this.s[this.i] === ',') this.i++;
      else if (this.s[this.i] !== close) this.fail();
    }
  }

  string(quote: string): string {
    let out = '';
    this.i++;
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      if (c === quote) {
        this.i++;
        return out;
      }
      if (c === '\\') {
        const e = this.s[this.i + 1];
        out += e === 'n' ? '\n' : e === 't' ? '\t' : (e ?? '');
        this.i += 2;
      } else {
        out += c;
        this.i++;
      }
    }
    return this.fail();
  }

  atom(): PyValue {
    const m = /^[-+]?(?:[A-Za-z_][\w.]*|\d[\d_]*(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)/.exec(
      this.s.slice(this.i, this.i + 64),
    );
    if (!m) this.fail();
    const token = m[0];
    this.i += token.length;
    switch (token) {
      case 'True':
        return true;
      case 'False':
        return false;
      case 'None':
        return null;
      case 'nan':
      case '-nan':
        return Number.NaN;
      case 'inf':
      case '+inf':
        return Number.POSITIVE_INFINITY;
      case '-inf':
        return Number.NEGATIVE_INFINITY;
    }
    if (/^[-+]?[A-Za-z_]/.test(token)) {
      // numpy / torch scalar reprs such as np.float64(1.5) or tensor(3): keep the wrapped value.
      this.ws();
      if (this.s[this.i] !== '(') this.fail();
      const inner = this.list(')');
      return inner.length === 1 ? inner[0]! : inner;
    }
    return Number(token.replaceAll('_', ''));
  }
}

/** Parse a Python literal (`repr()` of dicts, lists, numbers, strings, True/False/None, nan/inf). */
export function parsePythonLiteral(text: string): PyValue {
  const p = new LiteralParser(text);
  const v = p.value();
  p.ws();
  if (p.i !== text.length) p.fail();
  return v;
}
