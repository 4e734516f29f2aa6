"""The first minute (issue 55): ``--help`` and every refused argument answer before PyTorch, GEM and
the local backend load; ``import gemlab`` is cheap and its names all resolve; ``python -m gemlab``
lists the commands; running out of memory while loading is one line."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import gemlab
from gemlab.__main__ import COMMANDS
from gemlab.model_names import QWEN3_4B_INSTRUCT, TINY

ROOT = Path(__file__).resolve().parents[1]
# the local backend's package is light to import (its names load on first use); its models and clients are not
# what a model needs
MODEL = ("torch", "transformers", "peft", "tinker", "tinker_emulator.models", "tinker_emulator.service_client")
HEAVY = (*MODEL, "gem", "reasoning_gym", "matplotlib", "pandas", "fastapi", "tinker_cookbook")

# (arguments to python -m, how a line of the answer starts, exit status)
FAST = [
    (["gemlab.train", "--help"], "usage: python -m gemlab.train", 0),
    (["gemlab.train", "learnig_rate=0.1"], "gemlab.train: unknown key 'learnig_rate'", 2),
    (
        ["gemlab.train", "preset=laptop", "learning_rate=-1"],
        "gemlab.train: learning_rate must be a positive number, got -1.0",
        2,
    ),
    (["gemlab.train", "preset=big"], "gemlab.train: Unknown preset 'big'. Known presets: gem, laptop", 2),
    (["gemlab.train", "max_steps=often"], "gemlab.train: max_steps must be an integer, got 'often'", 2),
    (
        ["gemlab.train"],
        f"gemlab.train: {QWEN3_4B_INSTRUCT} is a Tinker model: set TINKER_API_KEY for Tinker, or use "
        "preset=laptop to train here",
        2,
    ),
    (["gemlab.doctor", "--help"], "usage: python -m gemlab.doctor", 0),
    (["gemlab.doctor", "--steps", "0"], "python -m gemlab.doctor: error: --steps must be at least 1, got 0", 2),
    (["gemlab"], "gemlab's commands (each takes --help):", 0),
    (["gemlab.openai_endpoint", "--help"], "usage: python -m gemlab.openai_endpoint", 0),
    (["gemlab.openai_endpoint", "--model", "m", "--port", "70000"], "--port must be in 0..65535, got 70000", 2),
    (
        ["gemlab.openai_endpoint", "--model", "m", "--host", "0.0.0.0"],
        "--host 0.0.0.0 reaches beyond this machine: set --api-key or $GEMLAB_SERVE_API_KEY",
        2,
    ),
    (["gemlab.atropos", "--help"], "usage: python -m gemlab.atropos", 0),
    (["gemlab.atropos", "learnig_rate=0.1"], "gemlab.atropos: expected key=value with a key of: model_name", 2),
    (["gemlab.cookbook", "--help"], "Entry point: CLIConfig", 0),
    (["gemlab.cookbook", "nokey=1"], "gemlab.cookbook: Extraneous argument 'nokey'", 2),
    (["gemlab.tiny", "--help"], "usage: python -m gemlab.tiny", 0),
    (["gemlab.tiny", "gemlab/nope"], "python -m gemlab.tiny: error: unknown tiny model(s) ['gemlab/nope']", 2),
]


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("TINKER_API_KEY", "GEMLAB_LOCAL_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    return env


def _run_measured(args: list[str], tmp_path: Path) -> tuple[int, str, float]:
    """Run ``python -m ARGS``: (exit status, stdout and stderr, the child's own CPU seconds, user + system,
    from ``os.wait4``: what it computed, whatever else the machine is doing)."""
    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", *args], stdout=sink, stderr=subprocess.STDOUT, env=_environment(), cwd=tmp_path
        )
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return child.returncode, out.read_text(), usage.ru_utime + usage.ru_stime


@pytest.mark.slow
@pytest.mark.parametrize(("args", "line", "status"), FAST, ids=[" ".join(args) for args, _, _ in FAST])
def test_help_and_refusals_answer_within_2_cpu_seconds(tmp_path: Path, args: list[str], line: str, status: int) -> None:
    """The issue's bound, in CPU seconds of the child, so a loaded machine does not move it: these
    answers cost 0.03-0.2 s of CPU since the heavy imports wait for the work (2-core AMD EPYC); they
    cost 5.5-6.6 s when ``import gemlab`` loaded PyTorch, GEM and the local backend. 2 s is 10x the
    one and a third of the other: a slower CPU passes, a heavy import brought back fails."""
    code, output, cpu_s = _run_measured(args, tmp_path)
    assert code == status, output
    assert any(said.startswith(line) for said in output.splitlines()), output
    assert cpu_s < 2.0, f"python -m {' '.join(args)} took {cpu_s:.2f} s of CPU"


@pytest.mark.slow
def test_help_and_refusals_load_none_of_the_heavy_packages() -> None:
    """What keeps them fast, said without a clock: none of PyTorch, GEM, the local backend, FastAPI or the
    cookbook is imported (GEM's registry only where an env id is to be checked: the test below)."""
    probe = (
        "import contextlib, io, sys\n"
        "from gemlab import doctor, train\n"
        "from gemlab.__main__ import main\n"
        "from gemlab.atropos import __main__ as atropos\n"
        "from gemlab.cookbook import __main__ as cookbook\n"
        "from gemlab.openai_endpoint import __main__ as endpoint\n"
        "from gemlab.tiny import registry\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    main()\n"
        "    for argv in (['--help'], ['learnig_rate=1'], ['preset=laptop', 'gamma=2'], ['preset=big'], []):\n"
        "        train.main(argv)\n"
        "    for argv in (['--help'], ['nokey=1']):\n"
        "        atropos.main(argv), cookbook.main(argv)\n"
        "    sys.argv[1:] = ['--help']\n"
        "    for call in (lambda: doctor.main(['--help']), lambda: endpoint.parse_args(['--help']), registry.main):\n"
        "        try:\n"
        "            call()\n"
        "        except SystemExit:\n"
        "            pass\n"
        f"print(sorted(name for name in {HEAVY!r} if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_environment(), cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["env_id=game:Wordle"], ["env_wrappers=concatt"], ["eval_env_id=rg:no-such-task"]])
def test_an_unknown_env_or_wrapper_is_refused_before_a_model_loads(argv: list[str]) -> None:
    """GEM's registry is read (1.0 s of CPU on this project's 2-core EPYC), PyTorch and the model never
    load (3.3 s when the Trainer refused it)."""
    probe = (
        "import contextlib, io, sys\n"
        "from gemlab import train\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        f"    code = train.main(['preset=laptop', *{argv!r}])\n"
        f"print(code, err.getvalue().count(chr(10)), sorted(name for name in {MODEL!r} if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_environment(), cwd=ROOT)
    assert result.stdout.strip() == "2 1 []", result.stdout + result.stderr


@pytest.mark.slow
def test_import_gemlab_is_cheap_and_every_name_resolves() -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import sys, gemlab; print(sorted(name for name in {HEAVY!r} if name in sys.modules))"],
        capture_output=True, text=True, env=_environment(), cwd=ROOT,
    )  # fmt: skip
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
    for name in gemlab.__all__:
        assert getattr(gemlab, name) is not None, name
    from gemlab import Trainer, make_config  # the README's Python API

    assert Trainer.__module__ == "gemlab.trainer" and make_config("laptop").model_name == TINY
    with pytest.raises(AttributeError, match="module 'gemlab' has no attribute 'Trainr'"):
        gemlab.Trainr  # noqa: B018 (the attribute access is the test)
    assert gemlab.plots.__name__ == "gemlab.plots"  # a submodule, as when this package imported them all


def test_python_m_gemlab_lists_every_command() -> None:
    """Each command it names exists: a module with a ``__main__`` (or the module itself), or a script."""
    for command, what in COMMANDS:
        words = command.split()
        if words[1] == "-m":
            package = ROOT.joinpath(*words[2].split("."))
            assert (package / "__main__.py").is_file() or package.with_suffix(".py").is_file(), command
        else:
            assert (ROOT / words[1]).is_file(), command
        assert what
    named = " ".join(command for command, _ in COMMANDS)
    for name in (
        "gemlab.train",
        "gemlab.doctor",
        "gemlab.openai_endpoint",
        "reproduce_gem.py",
        "gemlab.atropos",
        "gemlab.cookbook",
        "gemlab.tiny",
    ):
        assert name in named


def _limited(megabytes: int):
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (megabytes * 2**20, megabytes * 2**20))

    return limit


@pytest.mark.slow
@pytest.mark.parametrize("megabytes", [400, 800])
def test_an_address_space_too_small_to_load_is_one_line(tmp_path: Path, megabytes: int) -> None:
    """Under an address-space limit (``ulimit -v``) PyTorch or GEM cannot load: it used to end in a
    14-59-line traceback (``MemoryError``, ``failed to map segment from shared object``), or at 400 MB in
    PyTorch's C++ abort (the doctor); now both refuse it before loading."""
    argv = [sys.executable, "-m", "gemlab.train", "preset=laptop", "max_steps=1", f"log_dir={tmp_path}"]
    result = subprocess.run(
        argv, capture_output=True, text=True, env=_environment(), cwd=tmp_path, preexec_fn=_limited(megabytes)
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"gemlab.train: out of memory before loading: this process may use {megabytes * 2**20 / 1e9:.1f} "
        "GB of address space (ulimit -v)"
    ), result.stderr
    assert "a gemlab/tiny run needs about 1.2 GB" in result.stderr and result.stderr.endswith(
        "; raise the limit, then rerun\n"
    )
    doctor_argv = [sys.executable, "-m", "gemlab.doctor", "--steps", "1"]
    doctor = subprocess.run(
        doctor_argv, capture_output=True, text=True, env=_environment(), cwd=tmp_path, preexec_fn=_limited(megabytes)
    )
    assert doctor.returncode == 1 and doctor.stderr == "", doctor.stderr
    assert (
        "problem: out of memory before loading: " in doctor.stdout
        and "(SmolLM2's files and the laptop steps were not checked)" in doctor.stdout
    )


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        OSError(12, "Cannot allocate memory"),
        ImportError("libtorch_cpu.so: failed to map segment from shared object"),
    ],
)
def test_the_shapes_of_out_of_memory_while_loading_are_known(error: BaseException) -> None:
    """What ``python -m`` answers when loading fails above that limit, or under another one (a cgroup)."""
    from gemlab.cli import ran_out_of_memory, run

    def failing() -> int:
        raise error

    assert ran_out_of_memory(error)
    assert run("gemlab.x", failing) == 1
    assert not ran_out_of_memory(ImportError("No module named 'gem'")) and not ran_out_of_memory(
        OSError(2, "No such file")
    )
    with pytest.raises(ImportError):
        run("gemlab.x", lambda: (_ for _ in ()).throw(ImportError("No module named 'gem'")))


def test_the_front_page_is_short_with_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 10_000, f"README.md is {len(readme.encode())} bytes"
    section = readme.split("## Two commands\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```bash\n", 1)[1].split("```", 1)[0]
    assert len([line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]) == 2


def _markdown(name: str) -> str:
    import json

    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def test_notebooks_10_and_11_link_to_each_other_and_00s_map_names_11() -> None:
    assert "(11_tool_use.ipynb)" in _markdown("10_smollm2")
    assert "(10_smollm2.ipynb)" in _markdown("11_tool_use")
    assert "11. [11_tool_use](11_tool_use.ipynb)" in _markdown("00_backends")
