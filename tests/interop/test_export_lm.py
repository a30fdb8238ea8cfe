"""Language models out: ``aiayn export --format hf`` writes Llama-shaped models as LlamaForCausalLM (Qwen2's,
Qwen3's, Mistral's, Mixtral's, Qwen3-MoE's), Phi-3's, Gemma 2's and 3's, and GPT-shaped ones as GPT2LMHeadModel,
with logits equal to aiayn's and the same weights after importing back; ``--format ctranslate2`` gives a
CTranslate2 generator with the same greedy output."""

import pytest
import torch

from aiayn import DecoderOnly, ModelConfig, generate
from aiayn.cli import main
from aiayn.inference.load import load_checkpoint
from aiayn.io.checkpoint import write_checkpoint
from aiayn.tokenizers.hf import HFTokenizers

LLAMA = dict(norm="pre", norm_type="rmsnorm", feed_forward="swiglu", activation="silu", positions="rope",
             qkv_bias=False, out_bias=False, ffn_bias=False, scale_embeddings=False, share_embeddings="none")
SHAPES = {
    "llama-interleaved-gqa": dict(LLAMA, n_kv_heads=2, rope_layout="interleaved"),
    "qwen2-tied": dict(LLAMA, rope_layout="halves", qkv_bias=True, share_embeddings="all"),
    "qwen3-qk-norm": dict(LLAMA, rope_layout="interleaved", qk_norm=True, head_dim=16, share_embeddings="all"),
    "gemma3-layers": dict(LLAMA, norm="sandwich", activation="gelu_tanh", qk_norm=True, scale_embeddings=True,
                          rope_layout="interleaved", head_dim=16, share_embeddings="all", sliding_window=4,
                          layer_types=("sliding", "full"), local_position_base=10.0),
    "mistral-window": dict(LLAMA, rope_layout="halves", sliding_window=4,
                           rope_scaling={"type": "linear", "factor": 2.0}),
    "gpt2": dict(norm="pre", positions="learned", activation="gelu_tanh", scale_embeddings=False),
    "mixtral-experts": dict(LLAMA, rope_layout="interleaved", n_experts=4, experts_per_token=2, n_kv_heads=2),
    "qwen3moe-experts": dict(LLAMA, rope_layout="halves", qk_norm=True, n_experts=4, experts_per_token=2,
                             expert_d_ff=24, renorm_experts=False),
    "phi3-partial-rotary": dict(LLAMA, rope_layout="halves", rotary_dim=4, n_kv_heads=2),
    "gemma2-softcaps": dict(LLAMA, norm="sandwich", activation="gelu_tanh", scale_embeddings=True,
                            rope_layout="interleaved", head_dim=16, share_embeddings="all", sliding_window=4,
                            layer_types=("sliding", "full"), query_scale=12.0, attention_softcap=2.0,
                            logit_softcap=3.0),
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory, make_llama):
    return HFTokenizers.load(make_llama(tmp_path_factory.mktemp("tok") / "hf", "llama"))


def _checkpoint(folder, tokenizers, **fields):
    """An aiayn language model with random weights (norm gains too), saved with ``tokenizers``."""
    cfg = ModelConfig(arch="decoder-only", vocab_size=120, d_model=32, n_heads=4, n_encoder_layers=0,
                      n_decoder_layers=2, d_ff=48, dropout=0.0, max_len=64, **fields)
    model = DecoderOnly(cfg).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    write_checkpoint(folder, model, tokenizers)
    return model


@pytest.mark.parametrize("shape", list(SHAPES))
def test_export_hf_logits_equal_and_import_back(tmp_path, tokenizers, shape):
    import transformers

    model = _checkpoint(tmp_path / "ckpt", tokenizers, **SHAPES[shape])
    assert main(["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--output",
                 str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    expected = "GPT2LMHeadModel" if shape == "gpt2" else shape.split("-")[0].capitalize()
    assert type(hf).__name__.lower().startswith(expected.lower())
    ids = torch.randint(5, 120, (2, 10))
    with torch.no_grad():
        assert (hf(ids).logits - model(ids)).abs().max() <= 1e-4
    if shape != "gpt2":  # GPT-2's import appends a padding row; the others come back tensor for tensor
        assert main(["import", str(tmp_path / "hf"), "--output", str(tmp_path / "back")]) == 0
        back, _ = load_checkpoint(tmp_path / "back")
        with torch.no_grad():
            assert (back(ids)[..., :120] - model(ids)).abs().max() <= 1e-4


def test_imported_llama_round_trips_through_hf_and_ctranslate2(tmp_path, make_llama):
    import transformers

    pytest.importorskip("ctranslate2")
    import ctranslate2

    folder = make_llama(tmp_path / "orig", "llama", num_key_value_heads=1)
    for cmd in (["import", str(folder), "--output", str(tmp_path / "a")],
                ["export", "--checkpoint", str(tmp_path / "a"), "--format", "hf", "--output", str(tmp_path / "hf")],
                ["export", "--checkpoint", str(tmp_path / "a"), "--format", "ctranslate2", "--output",
                 str(tmp_path / "ct2")]):
        assert main(cmd) == 0
    orig = transformers.AutoModelForCausalLM.from_pretrained(folder).state_dict()
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert orig.keys() == again.keys() and all(torch.equal(orig[k], again[k]) for k in orig)
    model, _ = load_checkpoint(tmp_path / "a")
    prompt = [1, 5, 9, 20, 7]
    ours = generate(model, torch.tensor([prompt]), "greedy", max_new_tokens=8)[0]
    theirs = ctranslate2.Generator(str(tmp_path / "ct2")).generate_batch(
        [[f"w{i}" if i > 2 else "<s>" for i in prompt]], max_length=8, include_prompt_in_result=False,
        sampling_topk=1, end_token="</s>")[0].sequences_ids[0]
    assert ours == theirs


def test_a_shape_neither_can_express_is_refused_by_name(tmp_path, tokenizers, capsys):
    _checkpoint(tmp_path / "ckpt", tokenizers, norm="pre", positions="rope", activation="gelu")  # shakespeare-char
    assert main(["export", "--checkpoint", str(tmp_path / "ckpt"), "--format", "hf", "--output",
                 str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "none of Llama (norm_type layernorm; feed_forward standard" in err and "GPT-2 (positions rope" in err
    assert not (tmp_path / "hf").exists()


def test_export_pretrained_is_the_one_door_out_beside_import(tmp_path, make_llama):
    """``aiayn.export_pretrained(checkpoint, output, format)``, the library's way back of ``import_pretrained``: a
    Hugging Face folder of an imported Llama, imported again to the same logits; ``gguf`` reaches the GGUF writer
    (which refuses this word-level tokenizer by name); a format it does not write is refused by name."""
    import aiayn

    folder = make_llama(tmp_path / "hf", "llama")
    checkpoint = aiayn.import_pretrained(folder, tmp_path / "ckpt")
    ids = torch.randint(3, 100, (1, 9))
    written = aiayn.export_pretrained(checkpoint, tmp_path / "out-hf", "hf")
    back = aiayn.import_pretrained(written, tmp_path / "back")
    with torch.no_grad():
        assert (load_checkpoint(back)[0].eval()(ids) - load_checkpoint(checkpoint)[0].eval()(ids)).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="GGUF keeps byte-level BPE and SentencePiece BPE tokenizers"):
        aiayn.export_pretrained(checkpoint, tmp_path / "out.gguf", "gguf")
    with pytest.raises(ValueError, match="format: 'onnx'; choose one of hf, ctranslate2, gguf"):
        aiayn.export_pretrained(checkpoint, tmp_path / "x", "onnx")
