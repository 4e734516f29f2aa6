"""The packages' layout: no import circles in gemlab/ or tinker_emulator/; the Tinker emulator
(tinker_emulator/) imports nothing from gemlab; the pipeline (the modules flat in gemlab/) imports no
role (the other folders: notebook helpers, the lab, the studies, the OpenAI endpoint, the Atropos
loop, the tiny model, the cookbook adapter), so the roles stand on the pipeline and never the other
way round. data/ holds only what notebooks, tests and code read, and notebooks show only images
under notebooks/ or data/ and are committed clean (no outputs, a unique id per cell).

The import graph is read from the source with ``ast``: every ``import``/``from ... import`` of a
gemlab or tinker_emulator module, at module level and inside functions alike (a function-level import that dodges a
circle is still a circle)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gemlab"
EMULATOR = PACKAGE.parent / "tinker_emulator"


def module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports in ``source`` (``from gemlab.x
    import y`` counts as ``gemlab.x.y`` when that is a module, else ``gemlab.x``; relative imports
    are resolved), wherever the import statement stands."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # import gemlab.a.b.c -> the deepest module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(packages: tuple[Path, ...] = (PACKAGE, EMULATOR)) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, for every module under ``packages``."""
    files = sorted(path for package in packages for path in package.rglob("*.py"))
    names = {path: module_name(path) for path in files}
    modules = set(names.values())
    return {
        names[path]: imported_modules(path.read_text(), names[path], path.name == "__init__.py", modules)
        for path in files
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


# A package's __init__ importing its own modules is how packages export names; the edges that
# matter for circles are between modules, so ``gemlab.x`` -> ``gemlab.x.y`` (parent to child) is
# left out, as is the implicit child -> parent import Python does for every submodule.
def module_graph(packages: tuple[Path, ...] = (PACKAGE, EMULATOR)) -> dict[str, set[str]]:
    graph = import_graph(packages)
    return {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    source = "def f():\n    from gemlab.b import g\n    import gemlab.c.d as d\nfrom . import e\n"
    modules = {"gemlab", "gemlab.a", "gemlab.b", "gemlab.c", "gemlab.e"}
    assert imported_modules(source, "gemlab.a", False, modules) == {"gemlab.b", "gemlab.c", "gemlab.e"}


def test_circles_are_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_gemlab_or_the_emulator() -> None:
    found = circles(module_graph())
    assert not found, "import circles in gemlab/ or tinker_emulator/: " + "; ".join(
        " <-> ".join(group) for group in found
    )


def test_the_emulator_stands_alone() -> None:
    outside = {
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if name == "tinker_emulator" or name.startswith("tinker_emulator.")
        for target in targets
        if not (target == "tinker_emulator" or target.startswith("tinker_emulator."))
    }
    assert not outside, "tinker_emulator/ must import nothing from gemlab: " + "; ".join(sorted(outside))


def roles(package: Path = PACKAGE) -> set[str]:
    """The role folders: every subpackage of gemlab."""
    return {f"gemlab.{p.parent.name}" for p in package.glob("*/__init__.py")}


def test_the_pipeline_imports_no_role() -> None:
    folders = roles()
    assert {
        "gemlab.studies",
        "gemlab.openai_endpoint",
        "gemlab.atropos",
        "gemlab.notebook",
        "gemlab.lab",
        "gemlab.tiny",
    } <= folders
    pipeline = {
        name: targets
        for name, targets in import_graph().items()
        if name.startswith("gemlab.") and name.count(".") == 1 and name not in folders
    }
    assert "gemlab.step" in pipeline and "gemlab.envs" in pipeline
    upward = {
        f"{name} imports {target}"
        for name, targets in pipeline.items()
        for target in targets
        if any(target == role or target.startswith(role + ".") for role in folders)
    }
    assert not upward, "the pipeline must not import a role (move the code down into the pipeline): " + "; ".join(
        sorted(upward)
    )


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in tests/helpers/; a test module is never imported by another."""
    tests = PACKAGE.parent / "tests"
    found = set()
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found |= {
                f"{path.relative_to(tests)} imports {n}" for n in names if n.rpartition(".")[2].startswith("test_")
            }
    assert not found, "move shared test code to tests/helpers/: " + "; ".join(sorted(found))


WIDGET_BARS = {"tqdm.auto", "tqdm.autonotebook", "tqdm.notebook"}


def widget_bar_imports(source: str) -> set[str]:
    """The modules of tqdm's notebook (widget) bars that ``source`` imports, wherever it imports them."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found & WIDGET_BARS


def test_widget_bar_imports_are_found() -> None:
    source = "from tqdm.auto import tqdm\ndef f():\n    from tqdm import notebook\nfrom tqdm import tqdm\n"
    assert widget_bar_imports(source) == {"tqdm.auto", "tqdm.notebook"}


def test_gemlabs_progress_bars_are_text_bars() -> None:
    """In a notebook a widget bar (``tqdm.auto``) flickers JupyterLab's kernel status to Idle while
    the cell runs; gemlab's bars are ``tqdm.tqdm`` on stdout, which a notebook shows as text."""
    files = sorted([*PACKAGE.rglob("*.py"), *EMULATOR.rglob("*.py")])
    found = {module_name(path): widget_bar_imports(path.read_text()) for path in files}
    assert not {name: bars for name, bars in found.items() if bars}, found


def test_scripts_import_nothing_from_the_tests() -> None:
    """Benchmarks, experiment drivers and examples run from an install: they import the packages
    (gemlab, tinker_emulator) and libraries, never ``tests``."""
    root = PACKAGE.parent
    scripts = sorted(
        [
            *(root / "benchmarks").glob("*.py"),
            *(root / "research" / "experiments").glob("*.py"),
            *(root / "examples").glob("*.py"),
        ]
    )
    assert len(scripts) > 10
    found = set()
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found |= {f"{path.relative_to(root)} imports {n}" for n in names if n == "tests" or n.startswith("tests.")}
    assert not found, "move what a script needs out of tests/: " + "; ".join(sorted(found))


def string_literals(source: str) -> set[str]:
    """Every string constant in ``source``."""
    return {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_data_holds_only_what_is_read() -> None:
    """Every folder in data/ is opened by a notebook's code, a test or the code (its name, or
    ``data/<name>``, as a string in a code cell or a .py file); runs that only the research notes
    cite belong in research/data/."""
    root = PACKAGE.parent
    sources = [
        path.read_text()
        for folder in ("gemlab", "tinker_emulator", "tests", "benchmarks", "examples")
        for path in (root / folder).rglob("*.py")
    ]
    sources += [
        "".join(cell["source"])
        for notebook in sorted((root / "notebooks").glob("*.ipynb"))
        for cell in json.loads(notebook.read_text())["cells"]
        if cell["cell_type"] == "code"
    ]
    strings = set().union(*map(string_literals, sources))
    folders = sorted(path.name for path in (root / "data").iterdir() if path.is_dir())
    assert "runs" in folders
    unread = [name for name in folders if not strings & {name, f"data/{name}", f"../data/{name}"}]
    assert not unread, f"nothing reads data/{unread}: move them to research/data/ (git mv) and update their citations"


MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)|<img\b[^>]*\bsrc=[\"']([^\"']+)")


def test_markdown_images_are_found() -> None:
    text = '![a](../data/x.png) and <img width="3" src="y.svg"> and [a link](z.md)'
    assert [a or b for a, b in MARKDOWN_IMAGE.findall(text)] == ["../data/x.png", "y.svg"]


def test_notebooks_show_only_images_of_the_kit() -> None:
    """A notebook's markdown shows images under notebooks/ or data/ only, and they exist: the kit
    works without research/ (and Jupyter serves nothing outside its root)."""
    root = PACKAGE.parent
    wrong = []
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            for a, b in MARKDOWN_IMAGE.findall("".join(cell["source"])) if cell["cell_type"] == "markdown" else []:
                image = (notebook.parent / (a or b)).resolve()
                if not image.is_file() or not (
                    image.is_relative_to(root / "notebooks") or image.is_relative_to(root / "data")
                ):
                    wrong.append(f"{notebook.name}: {a or b}")
    assert not wrong, "notebooks show images under notebooks/ or data/: " + "; ".join(wrong)


def test_notebooks_are_committed_clean_and_valid() -> None:
    """Notebooks are committed without outputs or execution counts, and valid for nbformat 4.5: every
    cell has a unique id (a cell without one is a warning today and a hard error in later nbformat)."""
    import nbformat

    wrong = []
    for notebook in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb")):
        content = json.loads(notebook.read_text())
        cells = content["cells"]
        ids = [cell.get("id") for cell in cells]
        if None in ids:
            wrong.append(f"{notebook.name}: {ids.count(None)} cells without an id")
        elif len(set(ids)) < len(ids):
            wrong.append(f"{notebook.name}: cell ids not unique")
        if any(cell.get("outputs") or cell.get("execution_count") for cell in cells):
            wrong.append(f"{notebook.name}: committed with outputs")
        try:
            nbformat.validate(content, version=4, version_minor=content["nbformat_minor"])
        except nbformat.ValidationError as error:
            wrong.append(f"{notebook.name}: {error.message}")
    assert not wrong, "; ".join(wrong)


def code_strings(source: str) -> list[ast.Constant]:
    """The string constants of ``source`` that are not docstrings (or other bare string statements)."""
    tree = ast.parse(source)
    bare = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare
    ]


def test_model_names_and_env_ids_come_from_their_registries() -> None:
    """gemlab's code names a model through ``gemlab.model_names`` and an env through
    ``gemlab.env_ids``: no other module writes one as a literal (docstrings aside)."""
    from gemlab import env_ids, model_names

    registries = {
        "model_names.py": {
            value for name, value in vars(model_names).items() if name.isupper() and isinstance(value, str)
        },
        "env_ids.py": {value for name, value in vars(env_ids).items() if name.isupper() and isinstance(value, str)},
    }
    assert model_names.SMOLLM2 in registries["model_names.py"] and env_ids.GUESS_EASY in registries["env_ids.py"]
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r} (use gemlab/{registry})"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in code_strings(path.read_text())
        for registry, values in registries.items()
        if node.value in values and path != PACKAGE / registry
    ]
    assert not found, found


def reads_of_gemlab(source: str) -> list[str]:
    """Paths into the gemlab package in ``source``: ``... __file__ ... / "gemlab"`` joins, and
    strings such as ``"gemlab/tiny/assets/models.json"`` (a model name, ``gemlab/tiny``, is no path)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.right, ast.Constant)
            and node.right.value == "gemlab"
        ):
            if "__file__" in ast.unparse(node.left):
                found.append(ast.unparse(node))
    found += [
        node.value
        for node in code_strings(source)
        if node.value.startswith("gemlab/") and (node.value.count("/") > 1 or "." in node.value)
    ]
    return found


def test_reads_of_gemlab_are_found() -> None:
    source = (
        'A = Path(__file__).parent.parent / "gemlab" / "tiny"\nB = Path.home() / ".cache" / "gemlab"\nC = '
        '"gemlab/tiny-chat"\nD = "gemlab/x/models.json"\n'
    )
    assert reads_of_gemlab(source) == ["Path(__file__).parent.parent / 'gemlab'", "gemlab/x/models.json"]


def test_the_emulator_reads_no_file_of_gemlab() -> None:
    """Beyond imports: the emulator opens nothing of gemlab's by path (its model catalogue is its own)."""
    found = {
        f"{path.relative_to(PACKAGE.parent)}: {read}"
        for path in sorted(EMULATOR.rglob("*.py"))
        for read in reads_of_gemlab(path.read_text())
    }
    assert not found, found
