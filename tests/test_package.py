"""The package as people install it: a wheel built with ``python -m build`` from the sources, installed into a
fresh virtual environment, gives a working ``aiayn`` away from the checkout, with its version, the web page's
files and the recipes the README names (``--config multi30k-de-en`` finds the packaged one)."""

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources(to: Path) -> None:
    """The checkout's tracked files (symlinks as they are), so the build writes nothing into the checkout."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-C", str(ROOT), "--null", "-T", "-", "-cf", str(to / "src.tar")], input=files, check=True)
    subprocess.run(["tar", "-C", str(to / "tree"), "-xf", str(to / "src.tar")], check=True)


def test_the_wheel_installs_into_a_fresh_venv_and_runs_away_from_the_checkout(tmp_path):
    (tmp_path / "tree").mkdir()
    _sources(tmp_path)
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir",
                            str(tmp_path / "dist")], cwd=tmp_path / "tree", capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("aiayn-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                                "-q", "--no-deps", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # its dependencies (torch, ...) from this environment's site-packages, not aiayn itself: a plain path entry
    # does not run the editable install's hook, so `import aiayn` can only find the wheel's copy
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(venv / "bin" / "python"), "-c", purelib], capture_output=True, text=True,
                          check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    away = tmp_path / "elsewhere"
    away.mkdir()

    def aiayn(*args: str) -> str:
        done = subprocess.run([str(venv / "bin" / "aiayn"), *args], cwd=away, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    assert aiayn("--version").strip() == "aiayn 0.1.0"
    check = ("import aiayn, importlib.resources as r; from aiayn.training.config import read_recipe; "
             "print(aiayn.__file__); print(r.files('aiayn').joinpath('serve/static/index.html').is_file()); "
             "print(read_recipe('multi30k-de-en')['data'], read_recipe('shakespeare-char.yaml')['task'])")
    where, static, recipes = subprocess.run([str(venv / "bin" / "python"), "-c", check], cwd=away, capture_output=True,
                                            text=True, check=True).stdout.split("\n")[:3]
    assert where.startswith(str(venv)) and static == "True" and recipes == "multi30k lm"
    assert "d_model" in aiayn("show", "shapes", "--preset", "tiny")
