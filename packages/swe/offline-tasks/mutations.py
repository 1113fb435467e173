"""List procedural bug candidates for Python modules, the way SWE-smith's `func_pm_*` transforms do.

Usage: python3 mutations.py ROOT FILE...   (FILE relative to ROOT)
Prints a JSON list; each candidate names its kind, file, function, the character span it replaces and the
replacement text. Nothing is written: the caller applies, validates and keeps or drops each candidate.
"""

import ast
import json
import sys

ARITH_CHANGE = {ast.Add: "-", ast.Sub: "+", ast.Mult: "+", ast.FloorDiv: "/", ast.Div: "//", ast.Mod: "//"}
ARITH_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%", ast.Pow: "**"}
COMPARE_FLIP = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==", ast.In: "not in", ast.NotIn: "in"}
COMPARE_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in"}
NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


class Candidates(ast.NodeVisitor):
    def __init__(self, path, source):
        self.path = path
        self.source = source
        self.line_starts = [0]
        for line in source.split("\n"):
            self.line_starts.append(self.line_starts[-1] + len(line) + 1)
        self.function = None
        self.out = []

    def offset(self, line, col):
        return self.line_starts[line - 1] + col

    def span(self, node):
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def add(self, kind, start, end, replacement, description):
        if self.function is None:
            return
        self.out.append(
            {
                "kind": kind,
                "file": self.path,
                "function": self.function,
                "start": start,
                "end": end,
                "replacement": replacement,
                "description": description,
            }
        )

    def visit_FunctionDef(self, node):
        outer, self.function = self.function, node.name
        self.visit_body(node.body)
        for statement in node.body:
            self.visit(statement)
        self.function = outer

    def between(self, left, right):
        return self.span(left)[1], self.span(right)[0]

    def visit_BinOp(self, node):
        gap_start, gap_end = self.between(node.left, node.right)
        gap = self.source[gap_start:gap_end]
        symbol = ARITH_TEXT.get(type(node.op))
        if symbol is not None and gap.count(symbol) == 1 and (symbol != "/" or "//" not in gap) and (symbol != "*" or "**" not in gap):
            at = gap_start + gap.index(symbol)
            change = ARITH_CHANGE.get(type(node.op))
            if change is not None:
                self.add("func_pm_op_change", at, at + len(symbol), change, f"`{symbol}` became `{change}`")
            if isinstance(node.op, NON_COMMUTATIVE):
                start, end = self.span(node)
                left = ast.get_source_segment(self.source, node.left)
                right = ast.get_source_segment(self.source, node.right)
                if left != right and not self.source[start:end].startswith("("):
                    self.add("func_pm_op_swap", start, end, f"{right}{gap}{left}", f"operands of `{symbol}` swapped")
        self.generic_visit(node)

    def visit_Compare(self, node):
        if len(node.ops) == 1:
            gap_start, gap_end = self.between(node.left, node.comparators[0])
            gap = self.source[gap_start:gap_end]
            op = type(node.ops[0])
            symbol = COMPARE_TEXT.get(op)
            if symbol is not None and gap.strip() == symbol:
                at = gap_start + gap.index(symbol)
                flipped = COMPARE_FLIP[op]
                self.add("func_pm_flip_operators", at, at + len(symbol), flipped, f"`{symbol}` became `{flipped}`")
                if op in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
                    start, end = self.span(node)
                    left = ast.get_source_segment(self.source, node.left)
                    right = ast.get_source_segment(self.source, node.comparators[0])
                    self.add("func_pm_op_swap", start, end, f"{right}{gap}{left}", f"operands of `{symbol}` swapped")
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        if len(node.values) == 2:
            gap_start, gap_end = self.between(node.values[0], node.values[1])
            gap = self.source[gap_start:gap_end]
            word = "and" if isinstance(node.op, ast.And) else "or"
            other = "or" if word == "and" else "and"
            if gap.strip() == word:
                at = gap_start + gap.index(word)
                self.add("func_pm_flip_operators", at, at + len(word), other, f"`{word}` became `{other}`")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if type(node.value) is int:
            start, end = self.span(node)
            changed = node.value + 1 if node.value < 2 else node.value - 1
            self.add("func_pm_op_change_const", start, end, str(changed), f"constant {node.value} became {changed}")

    def visit_Call(self, node):
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if isinstance(node.func, ast.Name) and node.func.id == "range" and node.args and not node.keywords:
            stop = node.args[-1] if len(node.args) <= 2 else node.args[1]
            start, end = self.span(stop)
            text = ast.get_source_segment(self.source, stop)
            self.add("func_pm_off_by_one", start, end, f"{text} - 1", f"range bound `{text}` became `{text} - 1`")
        if len(positional) >= 2 and len(positional) == len(node.args):
            first, second = positional[0], positional[1]
            a = ast.get_source_segment(self.source, first)
            b = ast.get_source_segment(self.source, second)
            if a != b:
                start = self.span(first)[0]
                end = self.span(second)[1]
                gap = self.source[self.span(first)[1] : self.span(second)[0]]
                name = ast.get_source_segment(self.source, node.func)
                self.add("func_pm_swap_args", start, end, f"{b}{gap}{a}", f"arguments of `{name}(...)` swapped")
        self.generic_visit(node)

    def visit_Slice(self, node):
        if node.upper is not None:
            start, end = self.span(node.upper)
            text = ast.get_source_segment(self.source, node.upper)
            self.add("func_pm_off_by_one", start, end, f"{text} + 1", f"slice bound `{text}` became `{text} + 1`")
        self.generic_visit(node)

    def visit_body(self, body):
        if len(body) < 2:
            return
        for statement in body:
            if isinstance(statement, ast.If) and not statement.orelse:
                start = self.line_starts[statement.lineno - 1]
                end = self.line_starts[statement.end_lineno]
                if self.source[start : self.offset(statement.lineno, statement.col_offset)].strip() == "":
                    test = ast.get_source_segment(self.source, statement.test)
                    self.add("func_pm_remove_cond", start, end, "", f"the `if {test}:` block was removed")

    def generic_visit(self, node):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt) and self.function is not None:
                self.visit_body(block)
        super().generic_visit(node)


def main():
    root = sys.argv[1]
    out = []
    for path in sys.argv[2:]:
        with open(f"{root}/{path}", encoding="utf-8") as f:
            source = f.read()
        visitor = Candidates(path, source)
        for node in ast.parse(source).body:
            visitor.visit(node)
        out.extend(visitor.out)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
