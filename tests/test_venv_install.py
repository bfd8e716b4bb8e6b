"""tools/venv_install.py, `make`'s installer: pip's configuration translated into uv's flags, and the fallback
to pip (run against a fake venv Python and a fake uv that record what they were asked to do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import venv_install as vi  # noqa: E402

# This machine's pip configuration, as `pip config list` prints it.
CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_this_machines_pip_config_becomes_uv_flags_and_environment():
    config = vi.parse_config_list(CONFIG_LIST)
    assert config["global.extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert vi.uv_args(config, {}) == [
        "--index-strategy", "unsafe-best-match",
        "--constraints", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels"]
    assert vi.uv_env(config, {}) == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_nothing_configured_still_searches_every_index_like_pip():
    assert vi.uv_args({}, {"HOME": "/root", "PIPX_HOME": "/x"}) == ["--index-strategy", "unsafe-best-match"]
    assert vi.uv_env({}, {}) == {}


def test_env_variables_beat_the_install_section_which_beats_global():
    config = {"global.index-url": "https://g/simple", "install.index-url": "https://i/simple"}
    assert vi.uv_args(config, {})[-2:] == ["--index-url", "https://i/simple"]
    assert vi.uv_args(config, {"PIP_INDEX_URL": "https://e/simple"})[-2:] == ["--index-url", "https://e/simple"]
    # a later source replaces a list, it does not extend it (pip's rule)
    lists = {"global.find-links": "/a /b", ":env:.find-links": "/c"}
    assert vi.uv_args(lists, {})[2:] == ["--find-links", "/c"]
    # other commands' sections do not apply to `pip install`
    assert vi.uv_args({"download.index-url": "https://d/simple", "list.format": "json"}, {})[2:] == []


def test_lists_split_on_white_space_and_commas_where_pip_does():
    config = {"global.constraint": "c1.txt\nc2.txt", "global.trusted-host": "a.example b.example:8080",
              "global.only-binary": ":all:", "install.no-binary": "foo,bar"}
    assert vi.uv_args(config, {})[2:] == [
        "--constraints", "c1.txt", "--constraints", "c2.txt",
        "--no-binary", "foo", "--no-binary", "bar", "--only-binary", ":all:",
        "--allow-insecure-host", "a.example", "--allow-insecure-host", "b.example:8080"]


@pytest.mark.parametrize(("value", "flags"), [("1", ["--no-index", "--prerelease", "allow"]),
                                              ("yes", ["--no-index", "--prerelease", "allow"]), ("off", []), ("0", [])])
def test_yes_no_settings(value, flags):
    assert vi.uv_args({}, {"PIP_NO_INDEX": value, "PIP_PRE": value})[2:] == flags


def test_proxy_and_client_certificate_go_to_uv_as_environment():
    env = {"PIP_PROXY": "http://proxy:3128", "PIP_CLIENT_CERT": "/c.pem", "PIP_TIMEOUT": "9"}
    assert vi.uv_args({}, env)[2:] == []
    assert vi.uv_env({}, env) == {"HTTPS_PROXY": "http://proxy:3128", "HTTP_PROXY": "http://proxy:3128",
                                  "SSL_CLIENT_CERT": "/c.pem", "UV_HTTP_TIMEOUT": "9"}


@pytest.mark.parametrize(("config", "env", "named"), [
    ({}, {"PIP_USER": "1"}, "user"), ({"global.target": "/t"}, {}, "target"),
    ({"install.prefer-binary": "true"}, {}, "prefer-binary"),
    ({}, {"PIP_NO_BUILD_ISOLATION": "0"}, "no-build-isolation"),
    ({}, {"PIP_NO_INDEX": "maybe"}, "no-index")])
def test_a_setting_uv_cannot_be_given_is_refused_by_name(config, env, named):
    with pytest.raises(vi.Untranslatable, match=named):
        vi.uv_args(config, env)


def test_output_and_caching_settings_change_nothing():
    env = {"PIP_NO_CACHE_DIR": "1", "PIP_ROOT_USER_ACTION": "ignore", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_PROGRESS_BAR": "off", "PIP_CONFIG_FILE": "/etc/pip.conf"}
    assert vi.uv_args({}, env) == ["--index-strategy", "unsafe-best-match"] and vi.uv_env({}, env) == {}


# A fake venv Python: `-m pip config list` prints CONFIG_LIST, `-m pip install uv` writes a fake uv beside it
# (or fails), any other `-m pip install` and the fake uv log their arguments and exit as FAKE_* say. With
# FAKE_NO_PIP the venv has no pip; the same script as the base Python (`-m pip --python VENV ...`) has one.
FAKE = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(sys.argv[0]))
args = sys.argv[1:]
via = ""
if args[:3] == ["-m", "pip", "--python"]:  # a base Python's pip acting on the venv
    here, args, via = os.path.dirname(args[3]), ["-m", "pip", *args[4:]], "base-"
def log(who):
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps([via + who, args]) + "\\n")
if args[:3] == ["-m", "pip", "--version"]:
    if os.environ.get("FAKE_NO_PIP") and os.path.basename(here) == "bin":  # the venv's, not the base's
        sys.exit(1)
    print("pip 23.2.1 from /fake (python 3.11)")
    sys.exit(0)
if args == ["-m", "ensurepip", "--default-pip"]:
    log("ensurepip")
    sys.exit(0)
if os.path.basename(sys.argv[0]) == "uv":
    if args == ["--version"]:
        print("uv 9.9.9 (fake)")
        sys.exit(0)
    log("uv")
    sys.exit(int(os.environ.get("FAKE_UV_RC", "0")))
if args[:4] == ["-m", "pip", "config", "list"]:
    print(os.environ["FAKE_CONFIG"], end="")
    sys.exit(0)
if args[:5] == ["-m", "pip", "install", "-q", "uv"]:
    log("pip-uv")
    rc = int(os.environ.get("FAKE_PIP_UV_RC", "0"))
    if rc:
        print("ERROR: No matching distribution found for uv", file=sys.stderr)
        sys.exit(rc)
    with open(os.path.join(here, "uv"), "w") as f, open(sys.argv[0]) as me:
        f.write(me.read())
    os.chmod(os.path.join(here, "uv"), 0o755)
    sys.exit(0)
log("pip")
sys.exit(int(os.environ.get("FAKE_PIP_RC", "0")))
"""


@pytest.fixture
def fake(tmp_path):
    """Runs the helper against a fake venv; returns (exit status, stdout, stderr, logged calls)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(FAKE.format(python=sys.executable))
    python.chmod(0o755)
    log = tmp_path / "calls.jsonl"

    def run(*args: str, **fake_env: str):
        env = {"PATH": str(tmp_path / "empty"), "FAKE_LOG": str(log), "FAKE_CONFIG": CONFIG_LIST,
               "PIP_FIND_LINKS": "/opt/wheels", **fake_env}
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "venv_install.py"), "--python", str(python),
                               *args], env=env, capture_output=True, text=True, check=False)
        calls = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
        log.unlink(missing_ok=True)
        return proc.returncode, proc.stdout, proc.stderr, calls

    run.python = str(python)
    return run


def test_uv_is_installed_into_the_venv_and_given_pips_settings(fake):
    rc, out, err, calls = fake("-e", ".[test]")
    assert rc == 0, err
    assert [c[0] for c in calls] == ["pip-uv", "uv"]
    uv_call = calls[1][1]
    assert uv_call[:5] == ["pip", "install", "-q", "--python", fake.python]
    assert uv_call[-2:] == ["-e", ".[test]"]
    assert "--no-compile-bytecode" in uv_call and ["--find-links", "/opt/wheels"] == uv_call[-4:-2]
    assert out.splitlines() == [
        "venv_install: installing with uv 9.9.9 (pip's settings passed on: cert, constraint, default-timeout, "
        "extra-index-url, find-links; `make INSTALLER=pip` uses pip)"]
    # a second install finds the venv's uv and does not install it again
    assert [c[0] for c in fake("-e", ".")[3]] == ["uv"]


@pytest.mark.parametrize(("fake_env", "note", "tried"), [
    ({"FAKE_UV_RC": "2"}, "uv's install failed (exit 2)", ["pip-uv", "uv"]),
    ({"FAKE_PIP_UV_RC": "1"}, "uv could not be installed (pip exit 1: ERROR: No matching distribution found for uv)",
     ["pip-uv"]),
    ({"PIP_USER": "1"}, "pip's setting user='1' has no uv translation here", [])])
def test_auto_falls_back_to_pip_saying_why_in_one_line(fake, fake_env, note, tried):
    rc, out, err, calls = fake("-e", ".", **fake_env)
    assert rc == 0, err
    assert [c[0] for c in calls] == [*tried, "pip"]
    assert calls[-1][1] == ["-m", "pip", "install", "-q", "--no-compile", "-e", "."]
    assert f"venv_install: {note}; installing with pip instead" in out.splitlines()
    assert out.splitlines()[-1] == "venv_install: installing with pip"


def test_installer_pip_never_touches_uv_and_installer_uv_never_falls_back(fake):
    rc, out, _, calls = fake("--installer", "pip", "six")
    assert rc == 0 and calls == [["pip", ["-m", "pip", "install", "-q", "--no-compile", "six"]]]
    rc, out, err, calls = fake("--installer", "uv", "six", FAKE_UV_RC="1")
    assert rc == 1 and [c[0] for c in calls] == ["pip-uv", "uv"]
    assert err.splitlines() == ["venv_install: error: uv's install failed (exit 1)"]


def test_a_failed_install_and_bad_input_end_in_one_line_and_nonzero_exit(fake):
    rc, out, err, calls = fake("--installer", "pip", "six", FAKE_PIP_RC="1")
    assert rc == 1 and err.splitlines() == ["venv_install: error: pip install failed (exit 1)"]
    rc, _, err, calls = fake("--installer", "conda", "six")
    assert rc == 2 and calls == [] and err.splitlines() == [
        "venv_install: error: --installer must be one of auto, uv, pip, not 'conda'"]
    rc, _, err, calls = fake()
    assert rc == 2 and calls == [] and err.splitlines() == ["venv_install: error: nothing to install"]


def test_a_uv_on_path_is_used_without_installing_one(fake, tmp_path):
    path_dir = tmp_path / "path"
    path_dir.mkdir()
    uv = path_dir / "uv"
    uv.write_text(Path(fake.python).read_text())
    uv.chmod(0o755)
    rc, out, err, calls = fake("six", PATH=str(path_dir))
    assert rc == 0, err
    assert [c[0] for c in calls] == ["uv"] and not (Path(fake.python).parent / "uv").exists()
    assert out.startswith("venv_install: installing with uv 9.9.9 ")


def test_a_venv_made_without_pip_is_served_by_the_base_pip_and_gets_its_own(fake, tmp_path):
    base = tmp_path / "base" / "python3"
    base.parent.mkdir()
    base.write_text(Path(fake.python).read_text())
    base.chmod(0o755)
    (Path(fake.python).parent.parent / "pyvenv.cfg").write_text(f"home = {base.parent}\nexecutable = {base}\n")
    rc, out, err, calls = fake("-e", ".", FAKE_NO_PIP="1")
    assert rc == 0, err
    assert [c[0] for c in calls] == ["base-pip-uv", "uv"] and (Path(fake.python).parent / "uv").is_file()
    assert calls[1][1][-3:] == ["-e", ".", "pip"]  # uv installs the venv's own pip too
    # the pip fallback bootstraps the venv's pip first
    (Path(fake.python).parent / "uv").unlink()
    rc, out, err, calls = fake("-e", ".", FAKE_NO_PIP="1", FAKE_UV_RC="2")
    assert rc == 0, err
    assert [c[0] for c in calls] == ["base-pip-uv", "uv", "ensurepip", "pip"]
    # without a base pip to act for it, uv is not tried
    (Path(fake.python).parent.parent / "pyvenv.cfg").write_text("home = /nowhere\n")
    rc, out, err, calls = fake("-e", ".", FAKE_NO_PIP="1")
    assert rc == 0 and [c[0] for c in calls] == ["ensurepip", "pip"]
    assert "venv_install: the venv has no pip and its base Python's pip cannot act on it; installing with pip " \
           "instead" in out.splitlines()


def test_create_leaves_pip_out_only_when_the_base_pip_can_act_on_the_venv(tmp_path):
    vi.create(str(tmp_path / "v"), (23, 2))
    python = tmp_path / "v" / "bin" / "python"
    assert python.exists() and not (tmp_path / "v" / "bin" / "pip").exists()
    assert vi.pip_version(str(python)) is None
    base = vi.base_python(str(python))
    assert base is not None and Path(base).is_file()
    if (vi.pip_version(base) or (0,)) >= vi.PIP_PYTHON_OPTION:
        assert vi.pip_command(str(python)) == [base, "-m", "pip", "--python", str(python)]
    else:
        with pytest.raises(vi.Fallback):
            vi.pip_command(str(python))
