"""The trainer's axes as objects: the strategy chosen once (plain, DDP, FSDP), the run's one decoding for
validation and checkpoints, and one checkpoint writer whose adapter carries the layers' own dropout."""

import json

import pytest

from aiayn.decoding.config import DecodingConfig
from aiayn.training import strategy, validation
from aiayn.training.config import TrainConfig
from aiayn.training.distributed import DistInfo
from aiayn.training.trainer import Trainer
from tiny_runs import TINY


def test_the_strategy_is_chosen_once_from_the_recipe_and_the_processes():
    one, four = DistInfo(), DistInfo(0, 4, 0)
    assert type(strategy.choose(False, one)) is strategy.Plain
    assert type(strategy.choose(False, four)) is strategy.DDP
    assert type(strategy.choose(True, four)) is strategy.FSDP
    with pytest.raises(ValueError, match=r"fsdp: .*torchrun"):
        strategy.choose(True, one)


def test_validation_translates_with_the_decoding_every_checkpoint_ships(tmp_path, monkeypatch):
    """best/ is chosen under the decoding it ships with (generation.json), not another one."""
    seen = []
    real = validation.Translator

    def spy(model, tokenizers, device, decoding=None, **options):
        seen.append(decoding)
        return real(model, tokenizers, device, decoding, **options)

    monkeypatch.setattr(validation, "Translator", spy)
    decoding = {"beam_size": 3, "length_penalty": 1.2, "max_len_b": 20}
    Trainer(TrainConfig(**{**TINY, "output": str(tmp_path / "run"), "max_steps": 4, "eval_every": 2,
                           "bleu_sentences": 4, "decoding": decoding})).train()
    shipped = DecodingConfig.load(tmp_path / "run" / "best")
    assert len(seen) == 2 and all(d == shipped for d in seen) and shipped.beam_size == 3
    assert TrainConfig(beam_size=5).decoding_config().beam_size == 5  # an old recipe's field: the same decoding
    assert TrainConfig(beam_size=5, decoding={"beam_size": 2}).decoding_config().beam_size == 2


def test_a_lora_runs_adapter_records_the_dropout_its_layers_have(tmp_path, trained_run):
    base = {k: v for k, v in TINY.items() if k not in ("preset", "vocab_size")}
    Trainer(TrainConfig(**{**base, "output": str(tmp_path / "lora"), "max_steps": 2, "eval_every": 2,
                           "bleu_sentences": 0, "init_from": str(trained_run), "lora_r": 2,
                           "lora_dropout": 0.25})).train()
    config = json.loads((tmp_path / "lora" / "best" / "adapter_config.json").read_text())
    assert config["lora_dropout"] == 0.25 and config["r"] == 2
    assert (tmp_path / "lora" / "last" / "checksums.json").is_file()
