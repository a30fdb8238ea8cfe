"""`aiayn show mask`: the matrices it prints are aiayn.model.masks' own."""

import subprocess

import pytest
import torch

from aiayn.model.masks import causal_mask, decoder_self_mask, key_mask, padding_mask

from conftest import run_main


def _show(*args: str) -> subprocess.CompletedProcess:
    return run_main("show", "mask", *args)


def _printed(text: str) -> torch.Tensor:
    """The 1/0 rows of the printed matrix."""
    rows = [line.split()[1:] for line in text.splitlines() if line.lstrip().startswith("q")]
    return torch.tensor([[x == "1" for x in row] for row in rows])


@pytest.mark.parametrize("args, expected", [
    (("--kind", "causal", "--length", "5"), causal_mask(5)),
    (("--kind", "causal", "--length", "4", "--pad", "1"),
     decoder_self_mask(torch.tensor([[True, True, True, False]]), 4, 4, torch.device("cpu"))[0, 0]),
    (("--kind", "padding", "--length", "4", "--pad", "2"),
     key_mask(padding_mask(torch.tensor([[7, 7, 0, 0]]), 0))[0, 0].expand(4, 4)),
    (("--kind", "cross", "--length", "3", "--src-length", "6", "--pad", "2"),
     key_mask(torch.tensor([[True] * 4 + [False] * 2]))[0, 0].expand(3, 6)),
])
def test_show_mask_prints_the_matrices_of_masks_py(args, expected):
    result = _show(*args)
    assert result.returncode == 0, result.stderr
    assert torch.equal(_printed(result.stdout), expected)
    assert "1 = may attend" in result.stdout


def test_show_mask_draws_a_picture_and_refuses_bad_sizes(tmp_path):
    result = _show("--kind", "causal", "--length", "3", "--output", str(tmp_path / "m.png"))
    assert result.returncode == 0 and (tmp_path / "m.png").read_bytes()[:4] == b"\x89PNG"
    bad = _show("--kind", "padding", "--length", "3", "--pad", "3")
    assert bad.returncode == 2 and "--pad" in bad.stderr and "Traceback" not in bad.stderr
