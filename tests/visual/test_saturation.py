"""The softmax's saturation per layer (why scale by sqrt(d_k)): shares in [0, 1], one per layer; the same
weights without the scale saturate more (a softmax of scores multiplied by sqrt(d_k) > 1 is sharper); the
command draws the comparison."""

from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.io.checkpoint import write_checkpoint
from aiayn.model.transformer import EncoderDecoder
from aiayn.visual.saturation import saturation


def _unscaled(trained_run, folder):
    model, tokenizers = load_checkpoint(trained_run)
    plain = EncoderDecoder(model.config.replace(scale_attention=False))
    plain.load_state_dict(model.state_dict())
    write_checkpoint(folder, plain, tokenizers)
    return model, plain, tokenizers


def test_the_same_weights_without_the_scale_saturate_more(trained_run, tmp_path):
    model, plain, tokenizers = _unscaled(trained_run, tmp_path / "plain")
    pairs = [(tokenizers.src.encode(s), tokenizers.tgt.encode(" ".join(reversed(s.split()))))
             for s in ("a b c d e", "f g h", "c c a b d e f g")]
    scaled, unscaled = saturation(model, pairs), saturation(plain, pairs)
    assert set(scaled) == {"encoder", "decoder_self", "cross"}
    assert all(len(scaled[k]) == model.config.n_encoder_layers for k in ("encoder",))
    for kind in scaled:
        assert all(0.0 <= x <= 1.0 for x in scaled[kind] + unscaled[kind])
        assert all(u >= s for s, u in zip(scaled[kind], unscaled[kind], strict=True)), kind
    assert sum(map(sum, unscaled.values())) > sum(map(sum, scaled.values()))


def test_show_saturation_draws_the_comparison(trained_run, tmp_path, capsys):
    _unscaled(trained_run, tmp_path / "plain")
    (tmp_path / "src.txt").write_text("a b c d\ne f g\n")
    (tmp_path / "ref.txt").write_text("d c b a\ng f e\n")
    out = tmp_path / "saturation.png"
    assert main(["show", "saturation", "--checkpoint", f"scaled={trained_run}", "--checkpoint",
                 f"unscaled={tmp_path / 'plain'}", "--src", str(tmp_path / "src.txt"), "--ref",
                 str(tmp_path / "ref.txt"), "--output", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and "unscaled {'encoder'" in capsys.readouterr().out
