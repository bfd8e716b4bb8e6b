"""Install requirements into a virtualenv with uv when it can, with pip otherwise; `make` calls it.

PyTorch's CUDA build pulls several GB of NVIDIA wheels; pip unpacks them one at a time, uv in parallel
(benchmarks/bench_install.py measures both). uv does not read pip's configuration, so pip's effective
settings for `pip install` (``pip config list`` of the venv's pip: its config files, then PIP_* variables)
are translated into uv's flags and environment: index URLs, find-links, constraints and the like. A
setting that changes what pip would install and that has no translation here makes it use pip instead,
as do a uv that cannot be installed and a uv install that fails; each says why in one line. Run::

    .venv/bin/python tools/venv_install.py [--installer auto|uv|pip] [-e SPEC ...] [REQUIREMENT ...]

``auto`` (the default) tries uv and falls back to pip; ``uv`` fails instead of falling back; ``pip`` runs
``pip install --no-compile`` only. Standard library only: it runs before anything else is installed.

``--create VENV`` (run by the base Python) makes the venv. When that Python's pip can act on another
environment (``pip --python``, pip 22.3+), the venv starts without pip (``venv`` would spend ~7 s of CPU
byte-compiling its own copy) and the base pip works for it; uv then installs pip into the venv with
everything else, and the pip fallback bootstraps it with ``ensurepip`` first, so the finished venv has its
pip either way.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import re
import subprocess
import sys
import venv
from pathlib import Path
from typing import Mapping, Sequence

PREFIX = "venv_install:"
INSTALLERS = ("auto", "uv", "pip")
# Where pip reads a `pip install` setting from, lowest precedence first: the [global] section of its
# config files, their [install] section, then PIP_* environment variables (`pip config list` shows these
# as ":env:.NAME"; os.environ is read too, so the function works from the environment alone).
SECTIONS = ("global", "install", ":env:")
# pip's repeatable settings: a config value lists them separated by white space; one uv flag each.
LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraints",
         "trusted-host": "--allow-insecure-host"}
# Package lists that pip separates by commas (``:all:``, ``:none:`` or names).
COMMA_LISTS = {"only-binary": "--only-binary", "no-binary": "--no-binary"}
SINGLE = {"index-url": "--index-url"}
FLAGS = {"no-index": ["--no-index"], "pre": ["--prerelease", "allow"]}
# How pip reaches the network, not what it installs: handed to uv as environment variables.
NETWORK_ENV = {"cert": ("SSL_CERT_FILE",), "client-cert": ("SSL_CLIENT_CERT",),
               "proxy": ("HTTPS_PROXY", "HTTP_PROXY"), "timeout": ("UV_HTTP_TIMEOUT",),
               "default-timeout": ("UV_HTTP_TIMEOUT",)}
# Settings that change neither what is installed nor how it is fetched (output, caching, pip's own
# checks; --no-compile is passed to both installers explicitly).
IGNORED = frozenset({
    "cache-dir", "no-cache-dir", "disable-pip-version-check", "no-input", "retries", "resume-retries",
    "progress-bar", "quiet", "verbose", "no-color", "log", "log-file", "root-user-action",
    "require-virtualenv", "break-system-packages", "no-python-version-warning", "config-file",
    "keyring-provider", "exists-action", "isolated", "build-tracker", "req-tracker",
    "no-warn-script-location", "no-warn-conflicts", "compile", "no-compile",
})
TRUE, FALSE = ("1", "y", "yes", "t", "true", "on"), ("0", "n", "no", "f", "false", "off")
# The first pip whose --python option runs it for another environment's interpreter.
PIP_PYTHON_OPTION = (22, 3)


class Fallback(Exception):
    """uv cannot do this install faithfully; the message says why (pip does it instead)."""


class Untranslatable(Fallback):
    """A pip setting that changes what is installed and has no uv translation here."""


def _name(key: str) -> str:
    return key.strip().lower().replace("_", "-")


def effective(pip_config: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """pip's effective value of each setting for `pip install`: PIP_* variables over the config files'
    [install] section over their [global] one (``pip_config`` as `pip config list` prints it)."""
    out: dict[str, str] = {}
    for section in SECTIONS:
        for key, value in pip_config.items():
            sec, _, name = key.partition(".")
            if sec == section and name:
                out[_name(name)] = value
    for key, value in env.items():
        if key.startswith("PIP_"):
            out[_name(key[4:])] = value
    return out


def _flag(name: str, value: str) -> bool:
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    raise Untranslatable(f"pip's {name}={value!r} is not a yes/no value")


def uv_args(pip_config: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """uv pip install's flags that make it install what pip, so configured, would: every index is
    searched for the best version (pip's behaviour; uv's default stops at the first index holding a
    package), then pip's index, find-links, constraint, binary and prerelease settings. Raises
    Untranslatable for a setting that would change what pip installs and that uv cannot be given."""
    args = ["--index-strategy", "unsafe-best-match"]
    for name, value in sorted(effective(pip_config, env).items()):
        if name in LISTS:
            args += [a for item in value.split() for a in (LISTS[name], item)]
        elif name in COMMA_LISTS:
            items = value.replace(",", " ").split()
            args += [a for item in items for a in (COMMA_LISTS[name], item)]
        elif name in SINGLE:
            args += [SINGLE[name], value.strip()]
        elif name in FLAGS:
            args += FLAGS[name] if _flag(name, value) else []
        elif name not in NETWORK_ENV and name not in IGNORED:
            raise Untranslatable(f"pip's setting {name}={value!r} has no uv translation here")
    return args


def uv_env(pip_config: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The environment variables that give uv pip's network settings (certificate bundle, proxy, timeout)."""
    out: dict[str, str] = {}
    for name, value in effective(pip_config, env).items():
        for var in NETWORK_ENV.get(name, ()):
            out[var] = value.strip()
    return out


def parse_config_list(text: str) -> dict[str, str]:
    """`pip config list`'s output (``section.name='value'`` per line, the value as Python's repr) as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            out[key.strip()] = str(ast.literal_eval(value.strip()))
        except (ValueError, SyntaxError):
            out[key.strip()] = value.strip()
    return out


def _run(cmd: Sequence[str], env: Mapping[str, str] | None = None, quiet: bool = False
         ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; with ``quiet`` its output is kept for a failure message instead of shown."""
    kw = {"capture_output": True, "text": True} if quiet else {}
    return subprocess.run(list(cmd), env=None if env is None else dict(env), check=False, **kw)


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    return f": {lines[-1]}" if lines else ""


def pip_version(python: str) -> tuple[int, ...] | None:
    """The version of ``python``'s pip, or None when it has none."""
    proc = _run([python, "-m", "pip", "--version"], quiet=True)
    m = re.match(r"pip (\d+)\.(\d+)", proc.stdout or "") if proc.returncode == 0 else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def base_python(python: str) -> str | None:
    """The interpreter a venv was made from (its pyvenv.cfg's ``executable``, else ``home``/python3)."""
    cfg = Path(python).parent.parent / "pyvenv.cfg"
    try:
        lines = cfg.read_text().splitlines()
    except OSError:
        return None
    keys = {k.strip(): v.strip() for k, sep, v in (ln.partition("=") for ln in lines) if sep}
    for exe in (keys.get("executable"), str(Path(keys.get("home", "")) / "python3") if keys.get("home") else None):
        if exe and Path(exe).is_file():
            return exe
    return None


def pip_command(python: str) -> list[str]:
    """How to run pip for the venv of ``python``: its own pip, else the base Python's acting on it
    (``pip --python``); Fallback when neither exists."""
    if pip_version(python) is not None:
        return [python, "-m", "pip"]
    base = base_python(python)
    if base and (pip_version(base) or (0,)) >= PIP_PYTHON_OPTION:
        return [base, "-m", "pip", "--python", python]
    raise Fallback("the venv has no pip and its base Python's pip cannot act on it")


def create(path: str, base_pip: tuple[int, ...] | None) -> None:
    """Make the venv at ``path``: without pip when the base pip (version ``base_pip``) can act on it."""
    venv.EnvBuilder(with_pip=(base_pip or (0,)) < PIP_PYTHON_OPTION, symlinks=os.name != "nt").create(path)


def pip_config(pip: Sequence[str]) -> dict[str, str]:
    """The venv's pip's configuration (`pip config list`: its files and PIP_* variables)."""
    proc = _run([*pip, "config", "list"], quiet=True)
    if proc.returncode != 0:
        raise Fallback(f"`pip config list` failed (exit {proc.returncode}{_last_line(proc)})")
    return parse_config_list(proc.stdout)


def find_uv(python: str, pip: Sequence[str], env: Mapping[str, str]) -> str:
    """A uv executable: the venv's own, else one on PATH, else one installed into the venv by ``pip``."""
    own = Path(python).parent / "uv"
    if own.is_file():
        return str(own)
    on_path = shutil.which("uv", path=env.get("PATH", os.defpath))
    if on_path:
        return on_path
    proc = _run([*pip, "install", "-q", "uv"], quiet=True)
    if proc.returncode != 0 or not own.is_file():
        raise Fallback(f"uv could not be installed (pip exit {proc.returncode}{_last_line(proc)})")
    return str(own)


def uv_plan(python: str, requirements: Sequence[str], env: Mapping[str, str]
            ) -> tuple[list[str], dict[str, str], str]:
    """The uv command, its environment and the line announcing it; Fallback when uv cannot do it."""
    pip = pip_command(python)
    config = pip_config(pip)
    flags = uv_args(config, env)
    uv = find_uv(python, pip, env)
    if pip[0] != python:  # a venv made without pip gets it from uv, with everything else
        requirements = [*requirements, "pip"]
    version = _run([uv, "--version"], quiet=True)
    if version.returncode != 0:
        raise Fallback(f"{uv} --version failed (exit {version.returncode})")
    passed = sorted({n for n in effective(config, env) if n in LISTS or n in COMMA_LISTS or n in SINGLE
                     or n in FLAGS or n in NETWORK_ENV})
    cmd = [uv, "pip", "install", "-q", "--python", python, "--no-compile-bytecode", *flags, *requirements]
    name = " ".join(version.stdout.split()[:2])  # "uv 0.13.9", without the build's target triple
    line = (f"{PREFIX} installing with {name} (pip's settings passed on: "
            f"{', '.join(passed) or 'none'}; `make INSTALLER=pip` uses pip)")
    return cmd, {**env, **uv_env(config, env)}, line


def pip_install(python: str, requirements: Sequence[str]) -> int:
    """`pip install -q --no-compile` into the venv; 0 or a one-line error's exit status."""
    print(f"{PREFIX} installing with pip", flush=True)
    if pip_version(python) is None:  # a venv made without pip: its own first
        rc = _run([python, "-m", "ensurepip", "--default-pip"], quiet=True).returncode
        if rc != 0:
            print(f"{PREFIX} error: ensurepip failed (exit {rc})", file=sys.stderr)
            return rc
    rc = _run([python, "-m", "pip", "install", "-q", "--no-compile", *requirements]).returncode
    if rc != 0:
        print(f"{PREFIX} error: pip install failed (exit {rc})", file=sys.stderr)
    return rc


def install(python: str, requirements: Sequence[str], installer: str, env: Mapping[str, str]) -> int:
    """Install ``requirements`` into the venv of ``python`` with ``installer``; the exit status."""
    if installer != "pip":
        try:
            cmd, uv_environ, line = uv_plan(python, requirements, env)
            print(line, flush=True)
            rc = _run(cmd, env=uv_environ).returncode
            if rc == 0:
                return 0
            raise Fallback(f"uv's install failed (exit {rc})")
        except Fallback as why:
            if installer == "uv":
                print(f"{PREFIX} error: {why}", file=sys.stderr)
                return 1
            print(f"{PREFIX} {why}; installing with pip instead", flush=True)
    return pip_install(python, requirements)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: parse, check, install; the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", help="the venv's Python (default: the one running this, if it is a venv's)")
    ap.add_argument("--installer", default="auto", help="auto (uv, else pip), uv or pip")
    ap.add_argument("--create", metavar="VENV", help="make the venv VENV (run by the base Python) and stop")
    ap.add_argument("-e", "--editable", action="append", default=[], metavar="SPEC")
    ap.add_argument("requirements", nargs="*")
    args = ap.parse_args(argv)
    if args.create:
        create(args.create, pip_version(sys.executable))
        return 0
    requirements = [a for spec in args.editable for a in ("-e", spec)] + args.requirements
    python = args.python or (sys.executable if sys.prefix != sys.base_prefix else None)
    problem = (f"--installer must be one of {', '.join(INSTALLERS)}, not {args.installer!r}"
               if args.installer not in INSTALLERS else
               "not run from a virtualenv's Python; pass --python .venv/bin/python" if python is None else
               f"no Python at {python}" if not Path(python).is_file() else
               "nothing to install" if not requirements else None)
    if problem:
        print(f"{PREFIX} error: {problem}", file=sys.stderr)
        return 2
    return install(python, requirements, args.installer, os.environ)


if __name__ == "__main__":
    sys.exit(main())
