"""Expected outputs of the procedural task family's tests, from the clean code itself.

Reads one JSON list on stdin: [{"source": module text, "function": name, "cases": [argument list text]}].
Writes one JSON list: for each entry, the `repr` of the function's result for every case (arguments are
Python literals, read with ast.literal_eval). A case that raises is an error: the bank must be total.
"""

import ast
import json
import sys


def main():
    out = []
    for entry in json.load(sys.stdin):
        namespace = {"__name__": "procedural_oracle"}
        exec(compile(entry["source"], "<procedural>", "exec"), namespace)  # noqa: S102  (our own generated code)
        function = namespace[entry["function"]]
        results = []
        for case in entry["cases"]:
            args = ast.literal_eval(f"({case},)")
            results.append(repr(function(*args)))
        out.append(results)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
