"""Training a CTC model (``--task ctc``): the loss against every alignment summed by hand, the best alignment
against every path tried, glancing through that alignment with a scripted first pass, the pairs a CTC model
cannot spell dropped, the recipe's checks, and a tiny model trained by the CLI that decodes the same through
the library, the CLI and the server."""

import itertools
import math

import pytest
import torch
from fastapi.testclient import TestClient

from aiayn import generate
from aiayn.cli import main
from aiayn.data.corpus import Parallel
from aiayn.decoding.ctc import collapse
from aiayn.inference.translator import Translator
from aiayn.model.nonautoregressive import CTC
from aiayn.serve.server import create_app
from aiayn.tokenizers import SentencePiecePair
from aiayn.training.config import TrainConfig
from aiayn.training.objective import ctc_alignment, ctc_glancing_loss, ctc_loss
from aiayn.training.tasks import CTCTask, ctc_fits

from conftest import png_pixels, red_pixels, run_main, tiny

PAD, BLANK = 0, 4


def paths_to(target: list[int], width: int, vocab: int):
    """Every label sequence of ``width`` over ``vocab`` that collapses to ``target`` (by brute force)."""
    return [p for p in itertools.product(range(vocab), repeat=width) if collapse(list(p), BLANK) == target]


def test_the_loss_is_minus_the_log_of_every_alignment_summed():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)  # (B, U, V), ids 5 and 6 are the tokens
    inputs = torch.tensor([[5, 5, 6, 6, 5], [6, 6, 5, 5, PAD]])  # the second row has 4 positions
    tgt = torch.tensor([[5, 5, 6], [6, PAD, PAD]])
    loss, n = ctc_loss(logits, inputs, tgt, tiny(vocab_size=7))
    logp = logits.log_softmax(-1)
    expected = 0.0
    for row, (width, target) in enumerate(((5, [5, 5, 6]), (4, [6]))):
        total = torch.logsumexp(torch.stack([sum(logp[row, t, p[t]] for t in range(width))
                                             for p in paths_to(target, width, 7)]), dim=0)
        expected -= total.item()
    assert n == 4 and math.isclose(loss.item(), expected, rel_tol=1e-5)


def test_the_best_alignment_is_the_likeliest_path_that_collapses_to_the_reference():
    torch.manual_seed(1)
    logp = torch.randn(3, 6, 7).log_softmax(-1)
    tgt = torch.tensor([[5, 6, 6], [6, 5, PAD], [5, PAD, PAD]])
    in_lengths, tgt_lengths = torch.tensor([6, 6, 4]), torch.tensor([3, 2, 1])
    path = ctc_alignment(logp, in_lengths, tgt, tgt_lengths, BLANK, PAD)
    for row in range(3):
        width, target = int(in_lengths[row]), tgt[row, : int(tgt_lengths[row])].tolist()
        best = max(paths_to(target, width, 7), key=lambda p: sum(logp[row, t, p[t]].item() for t in range(width)))
        assert path[row, :width].tolist() == list(best), row
        assert (path[row, width:] == PAD).all()


class ScriptedCTC(torch.nn.Module):
    """A fake CTC model: fixed logits per position (the first pass's argmax is ``first``), whatever the inputs."""

    def __init__(self, first: torch.Tensor, vocab: int = 30) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.base = torch.full((*first.shape, vocab), -2.0).scatter(-1, first[..., None], 3.0)
        self.calls: list[torch.Tensor] = []

    def upsampled(self, src):
        return src.repeat_interleave(2, dim=1)

    def forward(self, src, inputs):
        self.calls.append(inputs.clone())
        return self.base * self.scale


def test_glancing_reveals_ratio_times_the_misaligned_positions_with_their_aligned_labels():
    src = torch.tensor([[20, 21, 22], [23, 24, PAD]])  # upsampled: 6 and 4 positions, ids no label takes
    tgt = torch.tensor([[7, 8, 9], [10, 11, PAD]])
    first = torch.tensor([[7, 7, 5, 8, 9, 9], [5, 5, 11, 11, 5, 5]])  # off the best alignment: 1 and 2 positions
    cfg = tiny(vocab_size=30)
    for ratio, expected in ((1.0, [1, 2]), (0.5, [0, 1]), (0.0, [0, 0])):
        model = ScriptedCTC(first)
        loss, n = ctc_glancing_loss(model, cfg, src, tgt, torch.Generator().manual_seed(0), ratio)
        plain, glanced = model.calls
        aligned = ctc_alignment(model.base.log_softmax(-1), torch.tensor([6, 4]), tgt, torch.tensor([3, 2]), BLANK,
                                PAD)
        assert collapse(aligned[0].tolist(), BLANK) == [7, 8, 9] and aligned[1, 4:].eq(PAD).all()
        assert torch.equal(plain, model.upsampled(src))  # the first pass reads the upsampled source
        revealed = glanced != plain
        assert revealed.sum(dim=1).tolist() == expected, ratio
        assert torch.equal(glanced[revealed], aligned[revealed])  # a revealed position reads its aligned label
        assert n == 5 and loss.requires_grad


def test_a_pair_that_cannot_be_spelled_is_dropped():
    assert ctc_fits(2, [5, 6, 7, 8], 2) and not ctc_fits(2, [5, 6, 6, 8], 2)  # 6 6 needs a blank between
    assert ctc_fits(3, [5, 6, 6, 8], 2) and ctc_fits(3, [5, 5, 5], 2)
    pairs = Parallel(["a b c d", "a", "b c"], ["w x y z", "w x y z", "x y"])
    tokenizers = SentencePiecePair.train(pairs.sources * 20, pairs.targets * 20, 300, True, "bpe")
    task = CTCTask(pairs, tokenizers, tiny(vocab_size=len(tokenizers.src), kind="ctc", ctc_upsample=2), 32, 512, seed=0)
    assert task.too_long == 1 and len(task) == 2  # "a", upsampled, is too short for "w x y z"
    batch = task.collate([0, 1])
    assert not ((batch[1] == task.cfg.bos_id) | (batch[1] == task.cfg.eos_id)).any()
    model, calls = CTC(task.cfg), []
    model.register_forward_hook(lambda *args: calls.append(1))
    task.loss(model, batch, 0.1)
    task.glance, task.progress = (0.5, 0.3), 0.5  # as build_train_task sets --glance, and the trainer progress
    loss, n = task.loss(model, batch, 0.1)
    assert loss.requires_grad and len(calls) == 3  # glancing: a first pass, then the trained one
    assert task.glance_ratio() == pytest.approx(0.4) and n == int((batch[1] != PAD).sum())


def test_the_recipe_and_model_fields_are_checked():
    with pytest.raises(ValueError, match="ctc_upsample"):
        TrainConfig(task="ctc", model={"ctc_upsample": 1})
    with pytest.raises(ValueError, match="ctc_upsample"):
        TrainConfig(task="translation", model={"ctc_upsample": 3})
    with pytest.raises(ValueError, match="ctc_upsample"):
        tiny(kind="cmlm", ctc_upsample=2)
    with pytest.raises(ValueError, match="absolute positions"):
        tiny(kind="ctc", ctc_upsample=2, positions="rope")
    assert TrainConfig(task="ctc", glance=0.5, glance_end=0.3).glance == 0.5


@pytest.mark.long
def test_ctc_learns_the_copy_task_in_one_pass():
    """The tour's copy task: a CTC model of the tiny size, its best path in one decoder pass."""
    from aiayn.training.demo import CopyRecipe, exact_match, train_copy

    model = train_copy(CopyRecipe(steps=700, ctc=3), progress=False)
    accuracy, _ = exact_match(model, n=200)  # 0.955-1.000 over 8 runs (seeds 0-1, 1-2 threads, AVX512 and AVX2
    assert isinstance(model, CTC) and accuracy >= 0.9  # kernels: benchmarks/bench_learning_spread.py --measures ctc)


def test_a_trained_ctc_model_decodes_the_same_through_library_cli_and_server(ctc_run):
    translator = Translator.from_checkpoint(ctc_run)
    assert isinstance(translator.model, CTC)
    assert translator.decoding.resolve(translator.model.config).strategy == "ctc"
    texts = ["a b c d e f", "g h i", "j k l m n"]
    ours = translator.translate(texts)
    assert all(ours)  # 3 of 3 sentences translated to something in each of 8 runs (bench_learning_spread.py)
    src = torch.tensor([translator.source_ids(texts[0])])
    ids = generate(translator.model, src, "ctc", config=translator.decoding)
    assert translator.tokenizers.tgt.decode(ids[0]) == ours[0]
    cli = run_main("translate", "--checkpoint", str(ctc_run), stdin="\n".join(texts) + "\n")
    assert cli.returncode == 0 and cli.stdout.splitlines() == ours
    with TestClient(create_app(translator)) as client:
        assert client.post("/translate", json={"texts": texts}).json()["translations"] == ours
        refused = client.post("/translate", json={"text": "a b", "strategy": "mask-predict"})
        assert refused.status_code == 422 and "ctc" in refused.json()["detail"]
        assert client.post("/attention", json={"source": "a b"}).status_code == 422
    bad = run_main("translate", "--checkpoint", str(ctc_run), "--strategy", "greedy", stdin="a b\n")
    assert bad.returncode == 2 and "use ctc" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_show_refinement_draws_a_ctc_models_best_path(ctc_run, tmp_path, capsys):
    picture = tmp_path / "alignment.png"
    assert main(["show", "refinement", "--checkpoint", str(ctc_run), "a b c d e f", "--output", str(picture)]) == 0
    lines = capsys.readouterr().out.splitlines()
    inputs, path = lines[1].split()[1:], lines[2].split()[2:]
    assert lines[1].startswith("inputs: ") and lines[2].startswith("best path: ")
    assert len(inputs) == len(path) == 2 * len(lines[0].split()[1:])  # upsampled twice
    translator = Translator.from_checkpoint(ctc_run)
    assert lines[3] == "translation: " + translator.translate(["a b c d e f"])[0]
    pixels = png_pixels(picture, (1.2 + 0.9 * len(path), 2.4))  # a column per upsampled position
    assert (red_pixels(pixels) > 0) == ("*" in lines[2])  # the kept positions framed


def test_every_non_autoregressive_loss_runs_where_the_batch_is(device_name):
    """A CMLM's masks, glancing and a CTC model's loss and best alignment on the batch's device (the CMLM's masks
    were drawn on the CPU and failed on CUDA)."""
    from aiayn.model.nonautoregressive import CMLM
    from aiayn.training.objective import cmlm_loss, glancing_loss

    src = torch.tensor([[7, 8, 9, 10], [11, 12, 13, PAD]], device=device_name)
    tgt = torch.tensor([[7, 8, 9], [11, 12, PAD]], device=device_name)
    gen = torch.Generator().manual_seed(0)
    cmlm = CMLM(tiny(kind="cmlm")).to(device_name)
    for loss, n in (cmlm_loss(cmlm, cmlm.config, src, tgt, gen), glancing_loss(cmlm, cmlm.config, src, tgt, gen, 0.5)):
        assert loss.device.type == device_name and n > 0 and torch.isfinite(loss)
    ctc = CTC(tiny(kind="ctc", ctc_upsample=2)).to(device_name)
    for loss, n in (ctc_loss(ctc(src), ctc.upsampled(src), tgt, ctc.config),
                    ctc_glancing_loss(ctc, ctc.config, src, tgt, gen, 0.5)):
        loss.backward()
        assert loss.device.type == device_name and n == 5 and torch.isfinite(loss)
