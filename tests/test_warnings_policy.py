"""The project's warning policy (pyproject's ``filterwarnings``, conftest's ``NOTEBOOK_WARNINGS``): a
DeprecationWarning or FutureWarning attributed to gemlab's own code, or to a notebook's cells, fails
the test; one that a library raises about itself does not. Checked by running pytest, with this
project's configuration, on test files and notebooks written here: a warning is attributed to a
module by its ``__name__``, so the test files run their "gemlab" and "library" code under those names.

Locally, Tinker's deprecated ``*_async`` methods do not warn, so the notebooks, examples,
benchmarks and experiment drivers are also read for calls of any method the installed SDK deprecates."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
import tinker
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent

CASES = textwrap.dedent(
    '''
    import textwrap


    def module(name, source, **names):
        """Run ``source`` as the module called ``name`` (a warning's ``stacklevel`` points into it)."""
        namespace = {"__name__": name, **names}
        exec(compile(textwrap.dedent(source), name.replace(".", "/") + ".py", "exec"), namespace)
        return namespace


    library = module("some_library", """
        import warnings

        def old_api():
            warnings.warn("old_api is deprecated", FutureWarning, stacklevel=2)  # blames its caller

        def internals():
            warnings.warn("something inside the library is deprecated", DeprecationWarning)  # blames itself
    """)
    gemlab = module("gemlab.some_module", """
        import warnings

        def deprecates_itself():
            warnings.warn("gemlab's own deprecation", DeprecationWarning)

        def calls_old_api():
            old_api()

        def calls_internals():
            internals()

        def deprecates_for_its_caller():
            warnings.warn("a gemlab function its caller should stop using", FutureWarning, stacklevel=2)
    """, old_api=library["old_api"], internals=library["internals"])


    def test_gemlab_deprecating_its_own_code():
        gemlab["deprecates_itself"]()


    def test_gemlab_calling_a_deprecated_library_api():
        gemlab["calls_old_api"]()


    def test_a_library_deprecating_its_own_internals():
        gemlab["calls_internals"]()


    def test_a_test_calling_a_deprecated_gemlab_function():
        gemlab["deprecates_for_its_caller"]()
    '''
)


def run_pytest(folder: Path, *args: str) -> tuple[dict[str, str], str]:
    """pytest on ``folder`` with this project's pyproject.toml (and conftest.py as a plugin): each
    test's outcome by name, and the whole output."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(folder),
         "-p", "no:cacheprovider", "-p", "conftest", "-rA", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes = {
        match[2]: match[1]
        for match in re.finditer(r"^(PASSED|FAILED) \S+?::(\w*)", done.stdout, re.MULTILINE)
    }
    return outcomes, done.stdout + done.stderr


@pytest.mark.slow  # a pytest subprocess
def test_deprecations_attributed_to_gemlab_fail_and_library_ones_do_not(tmp_path: Path):
    (tmp_path / "test_cases.py").write_text(CASES)
    outcomes, output = run_pytest(tmp_path, "test_cases.py")
    assert outcomes == {
        "test_gemlab_deprecating_its_own_code": "FAILED",
        "test_gemlab_calling_a_deprecated_library_api": "FAILED",
        "test_a_library_deprecating_its_own_internals": "PASSED",
        "test_a_test_calling_a_deprecated_gemlab_function": "PASSED",
    }, output
    assert "DeprecationWarning: gemlab's own deprecation" in output
    assert "FutureWarning: old_api is deprecated" in output
    assert "something inside the library is deprecated" in output  # shown in the summary, not an error


@pytest.mark.slow  # a pytest subprocess running notebooks
def test_a_deprecation_in_a_notebook_cell_fails_the_notebook(tmp_path: Path):
    cells = {
        "cell_deprecation": "import warnings\nwarnings.warn('a deprecated call in a cell', FutureWarning)",
        "library_deprecation": (  # a FutureWarning is shown by default: this one only printed
            "exec(\"import warnings\\nwarnings.warn('the library deprecates itself', FutureWarning)\", "
            "{'__name__': 'some_library'})"
        ),
    }
    for name, source in cells.items():
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), tmp_path / f"{name}.ipynb")
    outcomes, output = run_pytest(tmp_path, *(f"{name}.ipynb" for name in cells))
    assert outcomes == {"cell_deprecation": "FAILED", "library_deprecation": "PASSED"}, output
    assert "a deprecated call in a cell" in output


def deprecated_sdk_methods() -> set[str]:
    """The methods the installed tinker SDK deprecates on every one of its four clients that has
    them (``get_server_capabilities``, deprecated on ServiceClient only, cannot be told by name)."""
    deprecated: dict[str, set[bool]] = {}
    for client in (tinker.ServiceClient, tinker.TrainingClient, tinker.SamplingClient, tinker.RestClient):
        for name, member in inspect.getmembers(client):
            if not name.startswith("_"):
                deprecated.setdefault(name, set()).add(hasattr(member, "__deprecated__"))
    return {name for name, states in deprecated.items() if states == {True}}


def deprecated_calls(source: str, deprecated: set[str]) -> list[str]:
    """The deprecated methods ``source`` (a notebook cell, magics allowed, or a script) reaches as
    ``something.name``."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    return sorted({node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in deprecated})


def test_the_sdks_deprecated_methods_are_found_in_a_cell():
    deprecated = deprecated_sdk_methods()
    assert {"sample_async", "create_sampling_client_async", "load_state_with_optimizer"} <= deprecated
    assert not {"sample", "create_sampling_client", "get_server_capabilities"} & deprecated
    cell = (
        "%time x = 1\nclient = await service.create_sampling_client_async(model_path=p)\nclient.sample(prompt, "
        "1, params)"
    )
    assert deprecated_calls(cell, deprecated) == ["create_sampling_client_async"]


def test_notebooks_examples_and_benchmarks_call_no_deprecated_sdk_method():
    deprecated = deprecated_sdk_methods()
    found = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        for index, cell in enumerate(cells):
            if cell.cell_type == "code" and (names := deprecated_calls(cell.source, deprecated)):
                found[f"{path.name} cell {index}"] = names
    scripts = [
        *(ROOT / "examples").glob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "research" / "experiments").glob("*.py"),
    ]
    for path in sorted(scripts):
        if names := deprecated_calls(path.read_text(), deprecated):
            found[str(path.relative_to(ROOT))] = names
    assert not found, f"calls of methods tinker {tinker.__version__} deprecates: {found}"
