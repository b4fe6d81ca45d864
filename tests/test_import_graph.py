"""The library (model, kernels, weights, conversion, FPN, deployment helpers, image I/O) imports no application
(the run engine and the task packages): every import of every module, relative and inside functions included."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "swinlite"
APPLICATIONS = ("swinlite.engine", "swinlite.classification", "swinlite.detection", "swinlite.segmentation")


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (``from x import y`` counts x and x.y)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return found


def _is_application(name: str) -> bool:
    return any(name == app or name.startswith(f"{app}.") for app in APPLICATIONS)


def test_relative_imports_resolve_as_python_does():
    path = PACKAGE / "detection" / "models.py"
    assert {"swinlite.fpn", "swinlite.engine.model", "swinlite.detection.config"} <= imports(path)
    assert "swinlite.fpn.build_fpn_backbone" in imports(PACKAGE / "detection" / "__init__.py")


def test_the_library_imports_no_application():
    edges = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        if _is_application(module):
            continue
        edges |= {(module, name) for name in imports(path) if _is_application(name)}
    assert edges == set(), "library modules import applications: " + ", ".join(f"{a} -> {b}" for a, b in sorted(edges))
