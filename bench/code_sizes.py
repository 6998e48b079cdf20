"""The largest classes (lines, attributes assigned on self) and functions of the codec, the
model and the proxy: how the structure reads, as numbers.

    python bench/code_sizes.py [CHECKOUT]     # default: this checkout
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def sizes(root: Path) -> list[tuple[int, str, int | None]]:
    rows: list[tuple[int, str, int | None]] = []
    files = [f for pkg in ("proxy", "protocol", "metrics") for f in sorted((root / pkg).glob("*.py"))]
    for f in files:
        if f.name.endswith("_now.py"):  # generated twins
            continue
        for n in ast.walk(ast.parse(f.read_text())):
            where = f"{f.parent.name}/{f.name}:{getattr(n, 'name', '')}"
            if isinstance(n, ast.ClassDef):
                attrs = {m.attr for m in ast.walk(n) if isinstance(m, ast.Attribute) and isinstance(m.ctx, ast.Store)
                         and isinstance(m.value, ast.Name) and m.value.id == "self"}
                rows.append((n.end_lineno - n.lineno + 1, "class " + where, len(attrs)))  # type: ignore[operator]
            elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                rows.append((n.end_lineno - n.lineno + 1, "def " + where, None))  # type: ignore[operator]
    return sorted(rows, reverse=True)


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    rows = sizes(root)
    for lines, name, attrs in rows[:12]:
        print(f"{lines:5d}  {name}" + (f" ({attrs} attributes)" if attrs is not None else ""))
    funcs = [r[0] for r in rows if r[1].startswith("def")]
    print(f"functions: {len(funcs)}, over 40 lines: {sum(x > 40 for x in funcs)}, longest: {max(funcs)}")


if __name__ == "__main__":
    main()
