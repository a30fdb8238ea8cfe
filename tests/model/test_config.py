"""The config dataclass: presets, JSON round trip, and clear errors for bad values."""

import dataclasses
import json
from pathlib import Path

import pytest

from aiayn import ModelConfig


def test_presets_have_the_documented_sizes():
    small = ModelConfig.preset("small")
    assert (small.d_model, small.n_encoder_layers, small.n_decoder_layers, small.n_heads, small.d_ff) == (
        256, 3, 3, 4, 1024)
    base, big = ModelConfig.preset("base"), ModelConfig.preset("big")
    assert (base.d_model, base.n_heads, base.d_ff, base.dropout) == (512, 8, 2048, 0.1)
    assert (big.d_model, big.n_heads, big.d_ff, big.dropout) == (1024, 16, 4096, 0.3)
    assert ModelConfig.preset("tiny", vocab_size=99).vocab_size == 99


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ModelConfig().d_model = 3


def test_json_round_trip(tmp_path):
    cfg = ModelConfig.preset("small", vocab_size=123, positions="rope", norm="pre", activation="gelu")
    cfg.save(tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text())["positions"] == "rope"
    assert ModelConfig.load(tmp_path / "c.json") == cfg


@pytest.mark.parametrize(("changes", "field"), [
    ({"d_model": 100, "n_heads": 8}, "d_model"),
    ({"positions": "fourier"}, "positions"),
    ({"norm": "middle"}, "norm"),
    ({"activation": "tanh"}, "activation"),
    ({"d_ff": -5}, "d_ff"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"n_encoder_layers": -1}, "n_encoder_layers"),
    ({"dropout": 1.5}, "dropout"),
    ({"tgt_vocab_size": 10, "share_embeddings": "all"}, "share_embeddings"),
    ({"eos_id": 0}, "pad_id"),  # EOS and PAD share an id
    ({"bos_id": 2}, "bos_id and unk_id may equal pad_id"),  # BOS and EOS share an id
    ({"bos_id": 5, "unk_id": 5}, "bos_id and unk_id"),  # BOS and UNK share an id that is not PAD
    ({"sinusoid_layout": "split"}, "sinusoid_layout"),
    ({"positions": "relative", "relative_buckets": 5}, "relative_buckets"),
    ({"positions": "relative", "relative_buckets": 32, "relative_max_distance": 16}, "relative_max_distance"),
    ({"tgt_vocab_size": 10, "share_embeddings": "inputs"}, "share_embeddings"),
])
def test_bad_values_name_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig(**changes)


def test_unknown_preset_and_unknown_json_field(tmp_path):
    with pytest.raises(ValueError, match="preset"):
        ModelConfig.preset("huge")
    (tmp_path / "c.json").write_text('{"d_model": 512, "colour": "blue"}')
    with pytest.raises(ValueError, match="colour"):
        ModelConfig.load(tmp_path / "c.json")
    (tmp_path / "bad.json").write_text('{"d_model": ')
    with pytest.raises(ValueError, match=r"bad\.json"):
        ModelConfig.load(tmp_path / "bad.json")


def test_decoding_may_start_from_the_pad_id_as_marian_does():
    assert ModelConfig(bos_id=0).bos_id == ModelConfig().pad_id


@pytest.mark.parametrize(("old", "kind", "upsample"), [({"cmlm": False, "ctc_upsample": 0}, "autoregressive", None),
                                                      ({"cmlm": True, "ctc_upsample": 0}, "cmlm", None),
                                                      ({"cmlm": False, "ctc_upsample": 3}, "ctc", 3)])
def test_a_config_written_before_kind_loads_as_the_kind_it_named(tmp_path, old, kind, upsample):
    """Checkpoints of the two flags (``cmlm``, ``ctc_upsample``) load as one ``kind``; saved again, the flags are
    gone and the kind stays."""
    written = {**{k: v for k, v in ModelConfig.preset("tiny").to_dict().items() if k not in ("kind", "ctc_upsample")},
               **old}
    (tmp_path / "c.json").write_text(json.dumps(written))
    cfg = ModelConfig.load(tmp_path / "c.json")
    assert (cfg.kind, cfg.ctc_upsample, cfg.non_autoregressive) == (kind, upsample, kind != "autoregressive")
    cfg.save(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert "cmlm" not in again and again["kind"] == kind and ModelConfig.load(tmp_path / "again.json") == cfg


@pytest.mark.parametrize("changes", [{"kind": "diffusion"}, {"kind": "ctc"}, {"ctc_upsample": 2},
                                     {"kind": "ctc", "ctc_upsample": 1}, {"kind": "cmlm", "arch": "decoder-only"}])
def test_the_kind_and_its_upsampling_are_checked(changes):
    with pytest.raises(ValueError, match=r"kind|ctc_upsample"):
        ModelConfig(**changes)


def test_a_config_json_written_before_the_new_members_loads_and_builds(tmp_path):
    """``data/config_before_issue_72.json``: what ``ModelConfig.save`` wrote before q/k norms, layer kinds, soft-caps,
    partial rotation and experts existed (a Llama-shaped model with a sliding window, from the commit before
    them): it loads with each new option off, builds, and saves again with them."""
    from aiayn import build_model

    written = json.loads((Path(__file__).parent / "data" / "config_before_issue_72.json").read_text())
    assert "qk_norm" not in written and "n_experts" not in written and "layer_types" not in written
    cfg = ModelConfig.load(Path(__file__).parent / "data" / "config_before_issue_72.json")
    assert (cfg.qk_norm, cfg.n_experts, cfg.layer_types, cfg.rotary_dim, cfg.sliding_window) == (False, 0, (), None, 16)
    build_model(cfg)
    cfg.save(tmp_path / "again.json")
    assert ModelConfig.load(tmp_path / "again.json") == cfg
