"""GGUF in and out, judged by ``transformers``' own GGUF loader (independent of llama.cpp's C++ and of aiayn):
random small Llama, Qwen2 and GPT-2 models and an aiayn-trained one (its SentencePiece tokenizer) written as
GGUF by ``aiayn export --format gguf`` in F32, F16, BF16, Q8_0 and Q4_0 load there with aiayn's logits, and read back
by ``aiayn import`` give transformers' logits and tokens and the very tensors they came from; the tokenizers
built from GGUF metadata give transformers' ids; bad files are one line, exit 2, nothing written. The real
SmolLM2 file, where fetched, greedy-decodes as transformers does. A file run as it is keeps its blocks (below)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from aiayn import generate
from aiayn.cli import main
from aiayn.formats.gguf_rows import GGUFRows, ZeroRows, blocks_grid
from aiayn.inference.load import load_checkpoint, load_for_use
from aiayn.inference.precision import converter, fuse
from aiayn.io.rows import StackedRows, defer_rows
from aiayn.model.quantized import Int4Linear, Int8Linear

from conftest import GEMMA3, SMOLLM2, assert_runs_its_kernel, kernels_expected

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"
TEXTS = ["Hello world!  It's 2026 — naïve café.", "Ein Mann fährt ein Pferd.\nZwei Hunde\tspielen.",
         "  leading spaces", "Ünïcödé ß 🐎 一个男人骑着马。 こんにちは", "def f(x):\n    return x ** 2  # 1234567",
         "<|endoftext|>A new document"]
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")


# the largest error of each type, as a share of a tensor's largest magnitude: a half float's 11-bit and bfloat16's
# 8-bit mantissas round to half their last place; Q8_0 and Q4_0 keep a half-float scale per 32 values (the block's
# largest over 127: half a step, 1/254, and a little for the scale's own rounding; over -8: the block's other end
# may be clamped a whole step, 1/8)
ROUNDING = {"f16": 2.0**-11, "bf16": 2.0**-8, "q8_0": 1 / 200, "q4_0": 0.13}


def byte_level(pre: str = "gpt-2"):
    """A byte-level BPE of 1,000 tokens learned on Multi30k's German and English (and the sample), with GPT-2's
    word split or Qwen2's (``pre``), as a transformers tokenizer."""
    import gzip

    from tokenizers import ByteLevelBPETokenizer, Regex, pre_tokenizers
    from transformers import GPT2TokenizerFast

    text = []
    for lang in ("de", "en"):
        with gzip.open(MULTI30K / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
            text += f.read().splitlines()
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text + TEXTS * 20, vocab_size=1000, special_tokens=["<|endoftext|>"], show_progress=False)
    tok = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    if pre == "qwen2":
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


def byte_level_llama(folder: Path, kind: str, make_llama, **overrides) -> Path:
    """A random small Llama, Qwen2 or Mistral with a byte-level vocabulary (Qwen2's word split for qwen2)."""
    tok = byte_level("qwen2" if kind in ("qwen2", "qwen3") else "gpt-2")
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    make_llama(folder, kind, vocab_size=len(tok), bos_token_id=None, eos_token_id=end, tie_word_embeddings=False,
               **overrides)
    with_tokenizer(folder, tok)
    return folder


def with_tokenizer(folder: Path, tok) -> None:
    """Replace a made folder's tokenizer files by ``tok``'s."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    tok.save_pretrained(folder)


def hf_gguf(path: Path):
    """transformers' model and tokenizer of a GGUF file (its own loader)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def export(checkpoint: Path, path: Path, quantization: str = "f32") -> Path:
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "gguf", "--quantization", quantization,
                 "--output", str(path)]) == 0
    return path


def imported(path: Path):
    out = path.with_suffix(".ckpt")
    assert main(["import", str(path), "--output", str(out)]) == 0
    return load_checkpoint(out)


def same_logits(hf, model, ids: torch.Tensor) -> None:
    with torch.no_grad():
        theirs = hf(ids).logits
        ours = model(ids)[..., : theirs.size(-1)]
    assert (theirs - ours).abs().max() <= 1e-4


@pytest.fixture(scope="module")
def checkpoint_of(tmp_path_factory, make_llama):
    """``checkpoint_of(kind)``: an aiayn checkpoint imported from a random Hugging Face Llama / Qwen2 folder
    (made once a module)."""
    made = {}

    def get(kind: str) -> Path:
        if kind not in made:
            folder = byte_level_llama(tmp_path_factory.mktemp(kind) / "hf", kind, make_llama)
            assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
            made[kind] = folder.parent / "ckpt"
        return made[kind]
    return get


@pytest.mark.parametrize("kind, quantization", [("llama", "f32"), ("llama", "f16"), ("llama", "bf16"),
                                                ("llama", "q8_0"), ("llama", "q4_0"), ("qwen2", "f32"),
                                                ("qwen2", "q8_0"), ("qwen3", "f32"), ("qwen3", "q8_0")])
def test_exported_files_load_in_transformers_and_read_back_with_its_logits(checkpoint_of, tmp_path, kind,
                                                                           quantization):
    checkpoint = checkpoint_of(kind)
    path = export(checkpoint, tmp_path / f"{kind}-{quantization}.gguf", quantization)
    hf, hf_tok = hf_gguf(path)
    model, tokenizers = imported(path)
    ids = torch.tensor([tokenizers.src.encode(TEXTS[1])[:8], tokenizers.src.encode(TEXTS[0])[:8]])  # (2, 8)
    same_logits(hf, model, ids)
    for text in TEXTS:
        assert tokenizers.src.encode(text) == hf_tok(text).input_ids, text
    original = load_checkpoint(checkpoint)[0].state_dict()
    if quantization == "f32":  # the exported file's own tensors are the checkpoint's, exactly
        same_logits(hf, load_checkpoint(checkpoint)[0], ids)
        assert all(torch.equal(t, original[name]) for name, t in model.state_dict().items())
    else:  # each tensor within its type's rounding of the checkpoint's (a reader's bug would pass the logit check)
        read = model.state_dict()
        assert read.keys() == original.keys()
        for name, t in original.items():
            error = (read[name] - t).abs().max().item()
            assert error <= ROUNDING[quantization] * t.abs().max().item(), (name, error, t.abs().max().item())
    if quantization == "q8_0":
        prompt = ids[:1]
        theirs = hf.generate(prompt, max_new_tokens=8, do_sample=False)[0, prompt.size(1):].tolist()
        assert generate(model, prompt, "greedy", max_new_tokens=8)[0] == theirs


def test_gpt2_shaped_and_aiayn_trained_models_export(tmp_path):
    """GPT-2's own shape (learned positions, LayerNorm, fused q/k/v) and an aiayn language model with its own
    SentencePiece tokenizer (GGUF's llama tokenizer: pieces, scores and kinds)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from aiayn.io.checkpoint import write_checkpoint
    from aiayn.model.config import ModelConfig
    from aiayn.model.decoder_only import DecoderOnly
    from aiayn.tokenizers import SentencePiecePair

    tok = byte_level()
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    torch.manual_seed(0)  # transformers reads a GGUF GPT-2 with 1,024 positions, whatever the file says
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=2, n_head=2, bos_token_id=end,
                               eos_token_id=end)).save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    assert main(["import", str(tmp_path / "hf"), "--output", str(tmp_path / "gpt2")]) == 0
    sp = SentencePiecePair.train([t for t in TEXTS for _ in range(30)] + ["a man rides a horse"] * 30, [], 400)
    cfg = ModelConfig(arch="decoder-only", vocab_size=len(sp.src), d_model=32, n_heads=4, n_kv_heads=2,
                      n_encoder_layers=0, n_decoder_layers=2, d_ff=64, norm="pre", norm_type="rmsnorm",
                      feed_forward="swiglu", activation="silu", positions="rope", qkv_bias=False, out_bias=False,
                      ffn_bias=False, scale_embeddings=False, share_embeddings="none", dropout=0.0)
    torch.manual_seed(0)
    write_checkpoint(tmp_path / "own", DecoderOnly(cfg).eval(), sp)
    for name in ("gpt2", "own"):
        path = export(tmp_path / name, tmp_path / f"{name}.gguf")
        hf, hf_tok = hf_gguf(path)
        model, tokenizers = imported(path)
        for text in TEXTS[:5]:
            ids = tokenizers.src.encode(text)
            if name == "own":  # scores and kinds rebuild SentencePiece's own merges
                assert ids == sp.src.encode(text), text
            if name == "gpt2" or not text.startswith(" "):  # transformers' Metaspace adds no word start before a
                assert ids == hf_tok(text).input_ids, (name, text)  # leading space; SentencePiece and llama.cpp do
        same_logits(hf, model, torch.tensor([tokenizers.src.encode(TEXTS[1])[:10]]))
        same_logits(hf, load_checkpoint(tmp_path / name)[0], torch.tensor([tokenizers.src.encode(TEXTS[1])[:10]]))
    # the imported SentencePiece BPE (a tokenizer.json with byte fallback, as Gemma's and Llama 2's) goes out again
    again, _ = hf_gguf(export(tmp_path / "own.ckpt", tmp_path / "again.gguf"))
    model, tokenizers = imported(tmp_path / "again.gguf")
    assert all(tokenizers.src.encode(text) == sp.src.encode(text) for text in [*TEXTS, "zebra ünïcode 42"])
    same_logits(again, model, torch.tensor([tokenizers.src.encode(TEXTS[1])[:10]]))


def rewrite(src: Path, dst: Path, arch: str | None = None, drop: str | None = None, retype: str | None = None):
    """A copy of a GGUF file with another architecture name, a tensor left out, or one tensor's type changed to
    Q8_1 (which the gguf package cannot dequantize)."""
    import gguf

    reader = gguf.GGUFReader(src)
    old = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch or old)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key.replace(f"{old}.", f"{arch or old}.", 1), field.contents(), field.types[0], sub)
    for t in reader.tensors:
        if t.name == drop:
            continue
        if t.name == retype:
            rows, cols = int(t.shape[1]), int(t.shape[0])
            writer.add_tensor(t.name, np.zeros((rows, cols // 32 * 40), dtype=np.uint8),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_1)
        else:
            writer.add_tensor(t.name, t.data, raw_shape=[int(d) for d in reversed(t.shape)], raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


BAD = {"not gguf": "not a GGUF file", "truncated": "truncated or damaged", "falcon": "architecture 'falcon' is not",
       "q8_1": "Q8_1, which the gguf package cannot dequantize", "missing": "nothing for decoder.layers.1.ffn.up_proj"}


@pytest.mark.parametrize("how", list(BAD))
def test_bad_files_are_one_line_and_write_nothing(tmp_path, checkpoint_of, capsys, how):
    good = export(checkpoint_of("llama"), tmp_path / "good.gguf")
    bad = tmp_path / "bad.gguf"
    if how == "not gguf":
        bad.write_text("{\"a\": 1}\n")
    elif how == "truncated":
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    else:
        rewrite(good, bad, arch="falcon" if how == "falcon" else None, drop="blk.1.ffn_up.weight" if how == "missing"
                else None, retype="blk.0.ffn_up.weight" if how == "q8_1" else None)
    capsys.readouterr()
    assert main(["import", str(bad), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and BAD[how] in err, err
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_file_in_the_way_and_a_type_it_does_not_write(tmp_path, checkpoint_of, capsys):
    checkpoint = checkpoint_of("llama")
    mine = tmp_path / "mine.gguf"
    mine.write_text("my notes\n")
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "gguf", "--output", str(mine)]) == 2
    assert mine.read_text() == "my notes\n" and "--overwrite" in capsys.readouterr().err
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "gguf", "--output", str(mine),
                 "--overwrite"]) == 0
    assert mine.read_bytes()[:4] == b"GGUF"
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "gguf", "--quantization", "int8",
                 "--output", str(tmp_path / "x.gguf")]) == 2
    assert "choose f32, f16, bf16, q8_0, q4_0" in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2)
def test_the_real_smollm2_file_generates_as_transformers_does(tmp_path, capsys):
    *_, text = generates_as_transformers(SMOLLM2, tmp_path / "smol", capsys, 12)
    assert "Paris" in text


def generates_as_transformers(path: Path, out: Path, capsys, new_tokens: int):
    """A real GGUF file read by transformers' own loader and imported by aiayn: ``aiayn generate --strategy greedy``
    writes the text transformers writes. Returns (transformers' model, its tokenizer, the text)."""
    hf, hf_tok = hf_gguf(path)
    prompt = "The capital of France is"
    ids = hf_tok(prompt, return_tensors="pt").input_ids
    theirs = hf_tok.decode(hf.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.size(1):],
                           skip_special_tokens=True)
    assert main(["import", str(path), "--output", str(out)]) == 0
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(out), "--prompt", prompt, "--strategy", "greedy",
                 "--max-new-tokens", str(new_tokens)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == theirs
    return hf, hf_tok, theirs


@pytest.mark.long
@pytest.mark.real_files(GEMMA3)
def test_the_real_gemma3_file_generates_as_transformers_does(tmp_path, capsys):
    """google/gemma-3-270m (Q4_K_M): the same tokens and greedy text as transformers' own GGUF loader, and logits
    within 1e-3 at the end of a 600-token prompt, past its 512-token window (five sliding layers to a full one)."""
    hf, hf_tok, text = generates_as_transformers(GEMMA3, tmp_path / "gemma", capsys, 16)
    assert "France" in text
    model, tokenizers = load_checkpoint(tmp_path / "gemma")
    long = hf_tok(" ".join(TEXTS * 40), return_tensors="pt").input_ids[:, :600]
    assert tokenizers.src.encode(" ".join(TEXTS * 40))[:600] == long[0].tolist()
    with torch.no_grad():
        ref, ours = hf(long).logits[0, -1], model(long)[0, -1, : hf.config.vocab_size]
    assert long.size(1) == 600 and (ref - ours).abs().max() <= 1e-3


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2)
def test_a_real_file_with_damaged_metadata_is_read_or_refused_in_one_line(tmp_path, capsys):
    """40 copies of the real SmolLM2 file, 1-8 random bytes of its metadata changed each (seeded): every import
    either succeeds or ends in one line naming the file, exit 2, nothing written; never a traceback (before: a
    corrupted merge ended in tokenizers' 'Error while initializing BPE', 2 of these 40)."""
    import random
    import shutil

    import gguf

    damaged = tmp_path / "damaged.gguf"
    shutil.copy(SMOLLM2, damaged)
    end = gguf.GGUFReader(SMOLLM2).data_offset  # the header, metadata and tensor table
    original = SMOLLM2.read_bytes()[:end]
    rng = random.Random(0)
    for i in range(40):
        data = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(4, end)] = rng.randrange(256)
        with open(damaged, "r+b") as f:
            f.write(bytes(data))
        out = tmp_path / f"out{i}"
        code = main(["import", str(damaged), "--output", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 0 or (code == 2 and len(err) == 1 and str(damaged) in err[0] and not out.exists()), (i, err)
        shutil.rmtree(out, ignore_errors=True)


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.mark.parametrize("steps, name", [
    ("byte-level", "gpt-2"), ("digits", "smollm"), (LLAMA3_SPLIT, "llama-bpe"), (QWEN2_SPLIT, "qwen2"),
    ("whitespace", None)])
def test_the_word_split_is_named_to_llama_cpp_and_read_back_or_refused(steps, name):
    """A tokenizer.json's word split becomes tokenizer.ggml.pre (SmolLM's digits one by one, Llama 3's and
    Qwen2's regexes); the tokenizer rebuilt from the metadata splits the same way; another split is refused."""
    import json

    from tokenizers import Regex, pre_tokenizers

    from aiayn.formats.gguf_vocab import gguf_tokenizer_fields, tokenizer_from_gguf
    from aiayn.tokenizers.hf import HFTokenizers

    tok = byte_level().backend_tokenizer
    byte = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = {
        "byte-level": pre_tokenizers.ByteLevel(add_prefix_space=False),
        "digits": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                           pre_tokenizers.ByteLevel(add_prefix_space=False)]),
        "whitespace": pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), byte]),
    }.get(steps) or pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(steps), behavior="isolated"), byte])
    tokenizers = HFTokenizers(tok.to_str(), json.dumps({"eos_token": "<|endoftext|>"}))
    if name is None:
        with pytest.raises(ValueError, match="word split"):
            gguf_tokenizer_fields(tokenizers)
        return
    fields = gguf_tokenizer_fields(tokenizers)
    assert fields["tokenizer.ggml.pre"] == name
    rebuilt = HFTokenizers(*tokenizer_from_gguf(fields, "test")[:1])
    assert gguf_tokenizer_fields(rebuilt)["tokenizer.ggml.pre"] == name
    for text in [*TEXTS, "In 2026, 12345 cats ran 3.5 km."]:
        assert rebuilt.src.encode(text) == tokenizers.src.encode(text), (name, text)


def test_a_mistral_shaped_model_exports_as_llama_with_a_warning(tmp_path, make_llama, capsys):
    """Mistral's window is not llama.cpp's: written as llama.cpp's converter writes it, and said so."""
    folder = byte_level_llama(tmp_path / "hf", "mistral", make_llama, sliding_window=5)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    capsys.readouterr()
    path = export(tmp_path / "ckpt", tmp_path / "mistral.gguf")
    assert "sliding window of 5 tokens" in capsys.readouterr().err
    hf, _ = hf_gguf(path)
    same_logits(hf, load_checkpoint(tmp_path / "ckpt")[0], torch.tensor([[5, 9, 17, 3, 40]]))  # within the window


@pytest.mark.parametrize("add_bos, add_eos, ids", [(False, False, [2, 0]), (True, False, [3, 2, 0]),
                                                   (False, True, [2, 0, 4]), (True, True, [3, 2, 0, 4])])
def test_bos_and_eos_are_added_as_the_file_says(add_bos, add_eos, ids):
    from aiayn.formats.gguf_vocab import tokenizer_from_gguf
    from aiayn.tokenizers.hf import HFTokenizer

    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab", "<s>", "</s>"],
            "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.token_type": [1, 1, 1, 3, 3],
            "tokenizer.ggml.bos_token_id": 3, "tokenizer.ggml.eos_token_id": 4,
            "tokenizer.ggml.add_bos_token": add_bos, "tokenizer.ggml.add_eos_token": add_eos}
    assert HFTokenizer(tokenizer_from_gguf(meta, "test.gguf")[0]).encode("ab a") == ids


def test_llama3_scaled_rotary_frequencies_go_out_and_back_as_rope_freqs(tmp_path, make_llama):
    """A Llama 3.1-style model (rope_type llama3): written to GGUF as llama.cpp writes it (a rope_freqs tensor, one
    divisor per frequency), read back as rope_scaling factors, with the logits of the Hugging Face model it came
    from; its Hugging Face export is refused by name (factors are no rule transformers has)."""
    import transformers

    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 16, "rope_theta": 500.0}
    folder = byte_level_llama(tmp_path / "hf", "llama", make_llama, rope_parameters=llama3)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    path = export(tmp_path / "ckpt", tmp_path / "llama3.gguf")
    import gguf

    assert "rope_freqs.weight" in {t.name for t in gguf.GGUFReader(path).tensors}
    model, _ = imported(path)
    assert model.config.rope_scaling["type"] == "factors"
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.randint(5, 200, (2, 40), generator=torch.Generator().manual_seed(0))  # past the 16 it was made for
    same_logits(hf, model, ids)
    assert main(["export", "--checkpoint", str(path.with_suffix(".ckpt")), "--format", "hf", "--output",
                 str(tmp_path / "back")]) == 2


def test_a_gemma3_shaped_model_goes_out_as_gemma3_and_transformers_reads_it(tmp_path, make_llama):
    """A Gemma 3 text model with llama.cpp's fixed layout (five sliding layers to a full one, a local rotary base
    of 10,000): exported as a gemma3 file that transformers' GGUF loader reads with the same logits (past the
    window), and read back by aiayn tensor for tensor."""
    tok = byte_level("gpt-2")
    rows = len(tok) + 2  # Gemma's padding and start ids of their own, past the tokenizer's
    layers = ["sliding_attention"] * 5 + ["full_attention"]
    # heads of 256, as every Gemma 3 but the 27B: transformers' GGUF loader takes the query scale of 256
    folder = make_llama(tmp_path / "hf", "gemma3_text", vocab_size=rows, num_hidden_layers=6, head_dim=256,
                        query_pre_attn_scalar=256, sliding_window=4, layer_types=layers, pad_token_id=rows - 2,
                        bos_token_id=rows - 1, eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    with_tokenizer(folder, tok)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    reader = out_and_back(tmp_path / "ckpt", tmp_path / "gemma3.gguf", 12)
    assert reader.fields["general.architecture"].contents() == "gemma3"


def out_and_back(checkpoint: Path, path: Path, length: int):
    """``checkpoint`` exported as the GGUF file ``path``: transformers' loader reads it with the same logits over
    ``length`` positions, and aiayn reads it back tensor for tensor. Returns the file's reader."""
    import gguf

    export(checkpoint, path)
    hf, _ = hf_gguf(path)
    model, _ = imported(path)
    ids = torch.randint(5, 200, (2, length), generator=torch.Generator().manual_seed(0))
    same_logits(hf, model, ids)
    original = load_checkpoint(checkpoint)[0].state_dict()
    assert all(torch.equal(t, original[name]) for name, t in model.state_dict().items())
    return gguf.GGUFReader(path)


def test_a_qwen3_mixture_of_experts_goes_out_as_qwen3moe_and_comes_back(tmp_path, make_llama):
    """A Qwen3-MoE (4 experts, 2 a token, renormalised as llama.cpp's qwen3moe does): exported with its experts as
    llama.cpp's 3-D ffn_*_exps tensors, read by transformers' GGUF loader with the same logits, and read back by
    aiayn tensor for tensor."""
    tok = byte_level("qwen2")
    # experts of 768 units: transformers' GGUF loader takes Qwen3MoeConfig's default expert size
    folder = make_llama(tmp_path / "hf", "qwen3_moe", vocab_size=len(tok), num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=768, norm_topk_prob=True, head_dim=16, bos_token_id=None,
                        eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), tie_word_embeddings=False)
    with_tokenizer(folder, tok)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    names = {t.name for t in out_and_back(tmp_path / "ckpt", tmp_path / "moe.gguf", 10).tensors}
    assert {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_gate_exps.weight", "blk.0.ffn_down_exps.weight"} <= names


def test_a_mixtral_goes_out_as_a_llama_file_with_experts_and_comes_back(tmp_path, make_llama):
    """A Mixtral (4 experts, 2 a token, renormalised): llama.cpp keeps it a ``llama`` file with ``expert_count`` and
    3-D ffn_*_exps tensors; aiayn reads it back tensor for tensor, with the logits of the Hugging Face model it came
    from (transformers' GGUF loader reads no llama file with experts)."""

    tok = byte_level("gpt-2")
    folder = make_llama(tmp_path / "hf", "mixtral", vocab_size=len(tok), num_local_experts=4, num_experts_per_tok=2,
                        bos_token_id=None, eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
                        tie_word_embeddings=False)
    reader = back_as_it_came(folder, tok, tmp_path, "mixtral")
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.expert_count"].contents() == 4
    assert {"blk.0.ffn_gate_inp.weight", "blk.0.ffn_up_exps.weight"} <= {t.name for t in reader.tensors}


def back_as_it_came(folder: Path, tok, tmp_path: Path, name: str):
    """The Hugging Face ``folder`` (with ``tok``) imported and written as ``name``.gguf: aiayn reads it back tensor
    for tensor, with the logits of the folder's own model. Returns the file's reader."""
    import gguf
    import transformers

    with_tokenizer(folder, tok)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    reader = gguf.GGUFReader(export(tmp_path / "ckpt", tmp_path / f"{name}.gguf"))
    model, _ = imported(tmp_path / f"{name}.gguf")
    original = load_checkpoint(tmp_path / "ckpt")[0].state_dict()
    assert all(torch.equal(t, original[key]) for key, t in model.state_dict().items())
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    same_logits(hf, model, torch.randint(5, 200, (2, 12), generator=torch.Generator().manual_seed(0)))
    return reader


def test_a_gemma2_goes_out_as_gemma2_and_transformers_reads_it(tmp_path, make_llama, capsys):
    """A Gemma 2 (sliding and full layers alternating, soft-capped scores and logits, no q/k norms): a gemma2 file
    with its soft-caps, read by transformers' GGUF loader with the same logits past the window, and back by
    aiayn tensor for tensor."""

    tok = byte_level("gpt-2")
    rows = len(tok) + 2
    # heads of 256 and the soft-caps of Gemma2Config's defaults: what transformers' GGUF loader takes
    folder = make_llama(tmp_path / "hf", "gemma2", vocab_size=rows, num_hidden_layers=4, head_dim=256,
                        query_pre_attn_scalar=256, sliding_window=4, pad_token_id=rows - 2, bos_token_id=rows - 1,
                        eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"))
    with_tokenizer(folder, tok)
    assert main(["import", str(folder), "--output", str(tmp_path / "ckpt")]) == 0
    reader = out_and_back(tmp_path / "ckpt", tmp_path / "gemma2.gguf", 12)
    assert reader.fields["general.architecture"].contents() == "gemma2"
    assert reader.fields["gemma2.final_logit_softcapping"].contents() == 30.0
    assert imported(tmp_path / "gemma2.gguf")[0].config.attention_softcap == 50.0
    one_line_refusal(tmp_path / "gemma2.gguf", "blk.1.post_ffw_norm.weight", "decoder.layers.1", capsys)


def one_line_refusal(good: Path, drop: str, named: str, capsys) -> None:
    """``good`` without the tensor ``drop``: imported, one line naming the file and what is missing, exit 2,
    nothing written."""
    bad, out = good.with_name("bad.gguf"), good.with_name("bad-out")
    rewrite(good, bad, drop=drop)
    capsys.readouterr()
    assert main(["import", str(bad), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and named in err and not out.exists(), err
def test_a_phi3_with_partial_rotary_positions_goes_out_as_phi3_and_comes_back(tmp_path, make_llama, capsys):
    """A Phi-3 rotating half of each head (Phi-4-mini's kind): a phi3 file (q, k, v fused as attn_qkv, gate and up
    as ffn_up, rope.dimension_count the rotated share) read back by aiayn tensor for tensor, with the logits of the
    Hugging Face model it came from (transformers' GGUF loader reads no partial rotation)."""

    tok = byte_level("gpt-2")
    folder = make_llama(tmp_path / "hf", "phi3", vocab_size=len(tok), pad_token_id=0, bos_token_id=None,
                        eos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"), tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5})
    reader = back_as_it_came(folder, tok, tmp_path, "phi3")
    assert reader.fields["general.architecture"].contents() == "phi3"
    assert reader.fields["phi3.rope.dimension_count"].contents() == 4
    assert {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight"} <= {t.name for t in reader.tensors}
    one_line_refusal(tmp_path / "phi3.gguf", "blk.1.attn_qkv.weight", "decoder.layers.1", capsys)


def test_sampling_defaults_go_out_as_general_sampling_and_come_back(tmp_path, checkpoint_of):
    """llama.cpp's general.sampling.* keys: temperature, top-k, top-p, min-p and the repeat penalty, both ways; a
    file without them comes in greedy (aiayn.decoding.config.imported_defaults)."""
    import json
    import shutil

    ours = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.05, "repetition_penalty": 1.1}
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(checkpoint_of("llama"), checkpoint)
    (checkpoint / "generation.json").write_text(json.dumps(ours))
    (checkpoint / "checksums.json").unlink(missing_ok=True)
    for name, decoding in (("said", ours), ("silent", None)):
        if decoding is None:
            (checkpoint / "generation.json").unlink()
        path = export(checkpoint, tmp_path / f"{name}.gguf")
        assert main(["import", str(path), "--output", str(tmp_path / name)]) == 0
        back = json.loads((tmp_path / name / "generation.json").read_text())
        assert back == (ours if decoding else {"temperature": 0.0})


@pytest.mark.kernels  # the layers' packing read back through aiayn's ops (loaded by the mark, not by another test)
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0", "Q4_0"])
def test_q4_1_and_q8_0_blocks_come_through_float32_into_the_int4_and_int8_layers_byte_for_byte(kind):
    """A file's Q4_1 (Q8_0) matrix, dequantized as ``aiayn import`` reads it, is quantized by ``--int4``
    (``--int8``) back to the very blocks of the file: the same nibbles (int8s) and half-float scales and minimums,
    in aiayn's kernels' packing. Q4_0 (no minimum) lands on another grid: within half a step of its own."""
    import gguf
    from torch import nn

    from aiayn.kernels import quant
    from aiayn.model.quantized import Int4Linear, Int8Linear

    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((64, 160)) * rng.uniform(0.01, 1, (64, 1))).astype(np.float32)  # (N, K)
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    blocks = gguf.quants.quantize(weights, qtype)  # (N, K / 32 * bytes a block) uint8
    read = torch.from_numpy(gguf.quants.dequantize(blocks, qtype).copy())  # what the importer makes of it
    linear = nn.Linear(160, 64, bias=False)
    linear.weight.data = read
    raw = torch.from_numpy(blocks.copy()).view(64, 5, -1)  # (N, G, bytes a block)
    if kind == "Q8_0":
        layer = Int8Linear(linear, grouped=True)
        q, d = quant.unpack_q8(layer.packed, layer.scales)
        assert torch.equal(q.view(64, 5, 32), raw[..., 2:].view(torch.int8))
        assert torch.equal(d.half(), raw[..., :2].contiguous().view(torch.float16).squeeze(-1))
    else:
        layer = Int4Linear(linear, w4a8=True)
        nibbles = layer.packed.view(16, 5, 4, 16).transpose(1, 2).reshape(64, 5, 16)  # (N, G, 16)
        if kind == "Q4_1":
            assert torch.equal(nibbles, raw[..., 4:])
            _, d, mn = quant.unpack_q4(layer.packed, layer.scales)
            halves = raw[..., :4].contiguous().view(torch.float16)  # (N, G, 2): d, m
            assert torch.equal(d.half(), halves[..., 0]) and torch.equal(mn.half(), halves[..., 1])
        else:
            assert not torch.equal(nibbles, raw[..., 2:])
            step = (read.view(64, 5, 32).amax(-1) - read.view(64, 5, 32).amin(-1)) / 15  # (N, G)
            assert bool(((layer.dequantized() - read).abs().view(64, 5, 32) <= step[..., None] * 0.51).all())
            return
    assert torch.equal(layer.dequantized(), read)  # the file's values, exactly


def test_q4_0_files_keep_the_output_projection_in_q8_0(checkpoint_of, tmp_path):
    """``--quantization q4_0`` writes every matrix in Q4_0 but the output projection (a tied model's token table),
    which stays Q8_0, as aiayn's ``--int4`` keeps it and as SmolLM2's own Q4_1 file keeps its table."""
    import gguf

    path = export(checkpoint_of("llama"), tmp_path / "q4.gguf", "q4_0")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    output = "output.weight" if "output.weight" in types else "token_embd.weight"
    assert types[output] == "Q8_0"
    matrices = ("attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_up.weight")  # (ffn_down: 48 wide, F32)
    assert {kind for name, kind in types.items() if name.endswith(matrices)} == {"Q4_0"}

# A GGUF file run as it is (``formats/gguf_rows.py``, ``inference/load.py``): its Q8_0, Q4_0, Q4_1 and Q4_K blocks
# read as the gguf package dequantizes them, handed to the int8 and int4 layers with no float32 round trip (the
# file's values exactly; Q4_K's scales to float16), a .gguf path taken by ``generate`` and ``serve`` like a
# checkpoint folder, and the real SmolLM2 and Gemma 3 files (where fetched) loaded so.

N, K = 40, 512  # rows, and a row's weights: two Q4_K blocks, sixteen groups of 32


def raw_blocks(kind: str, seed: int = 0) -> np.ndarray:
    """A matrix (N, K) as ``kind`` stores it: (N, bytes a row) uint8. Q4_K (which the gguf package does not write):
    random scales, minimums and nibbles under random float16 d and dmin."""
    import gguf

    rng = np.random.default_rng(seed)
    if kind != "Q4_K":
        weights = (rng.standard_normal((N, K)) * rng.uniform(0.01, 1, (N, 1))).astype(np.float32)
        return gguf.quants.quantize(weights, getattr(gguf.GGMLQuantizationType, kind))
    blocks = rng.integers(0, 256, (N, K // 256, 144), dtype=np.uint8)
    blocks[..., 0:4] = rng.uniform(1e-4, 2e-3, (N, K // 256, 2)).astype(np.float16).view(np.uint8)  # d, dmin
    return blocks.reshape(N, -1)


def gguf_file(tmp_path, kinds: list[str]):
    """A GGUF file holding one (N, K) matrix of each of ``kinds`` (named by it), read back: {kind: reader tensor}."""
    import gguf

    path = tmp_path / "blocks.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for kind in kinds:
        writer.add_tensor(kind, raw_blocks(kind), raw_dtype=getattr(gguf.GGMLQuantizationType, kind))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, {t.name: t for t in gguf.GGUFReader(path).tensors}


def linear_over(rows) -> nn.Linear:
    """A linear layer whose weight is left unread, its rows read from ``rows`` (as ``load_for_use`` leaves it)."""
    linear = nn.utils.skip_init(nn.Linear, rows.shape[1], rows.shape[0], bias=False)
    defer_rows(linear.weight, rows)
    return linear


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "Q4_K"])
def test_a_grid_is_the_files_own_values(kind):
    """q d + m of the blocks equals the gguf package's dequantization bit for bit."""
    import gguf

    raw = raw_blocks(kind)
    q, d, m = blocks_grid(kind, torch.from_numpy(raw), K)
    values = q.float().view(N, -1, 32) * d[..., None] + (0 if m is None else m[..., None])  # (N, G, 32)
    expected = gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, kind))
    assert torch.equal(values.view(N, K), torch.from_numpy(expected))


@pytest.mark.kernels
@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "Q4_K"])
def test_the_layers_hold_the_files_blocks_and_read_no_float32(tmp_path, kind, monkeypatch):
    """An int8 (Q8_0) or int4 layer over a file's rows multiplies by the file's values: exactly, but Q4_K's scales
    and minimums in float16 (each within 2^-11 of its own, closer than the float32 round trip's int4 grid); and
    it never reads the rows as float32."""
    path, tensors = gguf_file(tmp_path, [kind])
    rows = GGUFRows(tensors[kind], path)
    file_values = rows[:]
    monkeypatch.setattr(GGUFRows, "__getitem__", lambda *_: pytest.fail("float32 rows read"))
    layer = Int8Linear(linear_over(rows)) if kind == "Q8_0" else Int4Linear(linear_over(rows))
    monkeypatch.undo()
    assert_runs_its_kernel(layer)  # a few rows: aiayn's kernel over those blocks
    if kind != "Q4_K":
        assert torch.equal(layer.dequantized(), file_values)
        return
    _, d, m = blocks_grid(kind, torch.from_numpy(raw_blocks(kind)), K)
    bound = (15 * d.abs() + m.abs()) * 2.0**-11  # (N, G): float16's rounding of a scale and a minimum
    error = (layer.dequantized() - file_values).abs().view(N, -1, 32).amax(-1)
    assert bool((error <= bound * 1.001).all())
    round_trip = nn.Linear(K, N, bias=False)  # the file's values in float32, quantized again
    round_trip.weight.data = file_values
    assert (Int4Linear(round_trip).dequantized() - file_values).abs().max() > 4 * error.max()


@pytest.mark.kernels
def test_rows_in_another_order_stacked_and_padded_keep_their_blocks(tmp_path):
    """A llama file's queries read in Hugging Face's row order, parts stacked (a fused projection) and a zero
    padding row under a table: the layer equals the same rows reordered, stacked and padded in float32."""
    path, tensors = gguf_file(tmp_path, ["Q4_1", "Q4_0"])
    order = torch.randperm(N, generator=torch.Generator().manual_seed(0))
    parts = [GGUFRows(tensors["Q4_1"], path, order), GGUFRows(tensors["Q4_0"], path), ZeroRows(1, K)]
    expected = torch.cat([GGUFRows(tensors["Q4_1"], path)[:][order], GGUFRows(tensors["Q4_0"], path)[:],
                          torch.zeros(1, K)])
    stacked = StackedRows(parts)
    assert torch.equal(stacked[:], expected) and torch.equal(stacked[N - 3: N + 5], expected[N - 3: N + 5])
    layer = Int4Linear(linear_over(stacked))
    assert torch.equal(layer.dequantized(), expected)
    assert_runs_its_kernel(layer)
    assert StackedRows(parts[1:]).grid(8, 0, N + 1) is None  # Q4_0 rows are no int8 layer's blocks


@pytest.fixture(scope="module")
def q4_0_file(tmp_path_factory, make_llama):
    """A random small Llama (byte-level vocabulary, untied output) as ``aiayn export --quantization q4_0`` writes it
    (Q4_0 matrices, the output projection Q8_0), and that file imported."""
    folder = byte_level_llama(tmp_path_factory.mktemp("llama") / "hf", "llama", make_llama)
    assert main(["import", str(folder), "--output", str(folder.parent / "ckpt")]) == 0
    path = export(folder.parent / "ckpt", folder.parent / "q4.gguf", "q4_0")
    assert main(["import", str(path), "--output", str(folder.parent / "back")]) == 0
    return path, folder.parent / "back"


@pytest.mark.kernels
@pytest.mark.parametrize("bits", [4, 8])
def test_a_gguf_file_loads_into_the_layers_with_its_own_values(q4_0_file, bits):
    """``--int4``: every int4 layer of the loaded file holds its Q4_0 values exactly (not so through ``aiayn
    import``, whose float32 lands on another grid) and the int8 output projection its Q8_0 ones; ``--int8``: the
    Q8_0 projection exactly. Nothing else changes: the loaded model's other tensors are the imported ones."""
    path, back = q4_0_file
    convert = converter(int4=bits == 4, int8=bits == 8)
    model = load_for_use(path, "decoder-only", convert=convert)[0]
    reference = fuse(load_checkpoint(back)[0])  # the file's values in float32, its projections fused as the copy's
    layers = {name: m for name, m in model.named_modules() if isinstance(m, Int4Linear | Int8Linear)}
    assert {type(m) for m in layers.values()} == ({Int4Linear, Int8Linear} if bits == 4 else {Int8Linear})
    exact = [name for name, m in layers.items() if isinstance(m, Int4Linear) or name == "output"]  # (ffn_down is
    # 48 wide: float32 in the file, int8 here)
    for name in exact:
        assert torch.equal(layers[name].dequantized(), reference.get_submodule(name).weight), name
        assert_runs_its_kernel(layers[name])
    via_import = load_checkpoint(back, convert=converter(int4=True))[0]
    assert bits == 8 or not torch.equal(via_import.get_submodule(exact[0]).dequantized(),
                                        layers[exact[0]].dequantized())
    plain = {n: t for n, t in model.state_dict().items()}
    assert plain and all(torch.equal(t, reference.state_dict()[n]) for n, t in plain.items())


def test_generate_and_serve_take_a_gguf_file_as_a_checkpoint(q4_0_file, capsys):
    """``aiayn generate --checkpoint FILE.gguf`` writes what the imported folder writes (float32, and ``--int8``:
    the same layers); ``serve``'s loader takes the file too, with the file's decoding defaults."""
    from aiayn.serve.server import load_product

    path, back = q4_0_file
    for flags in ([], ["--int8"]):
        outputs = []
        for checkpoint in (path, back):
            assert main(["generate", "--checkpoint", str(checkpoint), "--prompt", "Ein Mann", "--strategy",
                         "greedy", "--max-new-tokens", "12", *flags]) == 0
            outputs.append(capsys.readouterr().out)
        assert outputs[0] == outputs[1] and outputs[0].strip()
    generator, _ = load_product(str(path), int4=True)
    assert any(isinstance(m, Int4Linear) for m in generator.model.modules()) or not kernels_expected()
    assert generator.decoding == load_for_use(back)[2]


def test_a_damaged_gguf_checkpoint_is_one_line(tmp_path, q4_0_file, capsys):
    path, _ = q4_0_file
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert main(["generate", "--checkpoint", str(cut), "--prompt", "x", "--int4"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(cut) in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert load_checkpoint(path)[0].config.arch == "decoder-only"  # the reader is below inference/: read as it is
    with pytest.raises(ValueError, match="is a decoder-only checkpoint; use aiayn generate"):
        load_checkpoint(path, "encoder-decoder")  # a translator's product names the command for it


@pytest.mark.long
@pytest.mark.kernels
@pytest.mark.real_files(SMOLLM2, GEMMA3)
def test_the_real_files_load_their_blocks_as_they_are(tmp_path):
    """SmolLM2 (Q4_1, its table Q8_0) and Gemma 3 (Q4_K_M: Q4_K, Q5_0, Q6_K, Q8_0) under ``--int4``: every layer
    over Q4_1 / Q8_0 / Q4_0 blocks holds the file's values exactly, every one over Q4_K within float16's rounding
    of its scales, and SmolLM2 still answers Paris."""
    import gguf

    from aiayn.inference.generator import TextGenerator

    generator = TextGenerator.from_checkpoint(SMOLLM2, int4=True)
    assert "Paris" in generator.generate("The capital of France is", 8, temperature=0.0)[0]
    ours = {"attn_output": "self_attn.out_proj", "ffn_down": "ffn.down_proj"}  # unfused: one tensor of the file each
    for path in (SMOLLM2, GEMMA3):
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
        kept = {f"decoder.layers.{name.split('.')[1]}.{ours[name.split('.')[2]]}": kind for name, kind in types.items()
                if name.split(".")[2:3] and name.split(".")[2] in ours and kind in ("Q4_0", "Q4_1", "Q4_K")}
        model = load_for_use(path, "decoder-only", convert=converter(int4=True))[0]
        reference = fuse(load_for_use(path, "decoder-only")[0])
        assert len(kept) >= 18 and isinstance(model.output, Int8Linear) and types["token_embd.weight"] == "Q8_0"
        for name, kind in [*kept.items(), ("output", "Q8_0")]:
            file_values = reference.get_submodule(name).weight[: model.config.target_vocab - 1]
            layer_values = model.get_submodule(name).dequantized()[: file_values.size(0)]
            if kind == "Q4_K":  # the scales in float16
                assert (layer_values - file_values).abs().max() <= 2.0**-10 * file_values.abs().max(), name
            else:
                assert torch.equal(layer_values, file_values), (path.name, name)
            assert_runs_its_kernel(model.get_submodule(name), rows=1)


def test_every_architecture_is_one_record_whose_names_go_there_and_back():
    """Each llama.cpp architecture is one record of one family (formats/gguf_arch.py), and every tensor name it
    knows goes from GGUF to Hugging Face's name and back."""
    from aiayn.formats.families import FAMILIES, GGUF_ARCHITECTURES
    from aiayn.formats.gguf_arch import gguf_name, hf_name

    named = [arch.name for family in FAMILIES for arch in family.gguf]
    assert sorted(named) == sorted(set(named)) == sorted(GGUF_ARCHITECTURES)
    assert {"llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3", "qwen3moe", "gpt2"} <= set(named)
    for arch in GGUF_ARCHITECTURES.values():
        names = [f"{top}.weight" for top in arch.top] + [f"blk.7.{part}.weight" for part in arch.layer]
        for name in names:
            assert gguf_name(hf_name(name, arch), arch) == name, (arch.name, name)
        assert hf_name("blk.7.no_such_part.weight", arch) is None
    assert hf_name("blk.3.attn_q.weight", GGUF_ARCHITECTURES["llama"]) == "model.layers.3.self_attn.q_proj.weight"
    assert hf_name("blk.3.attn_qkv.weight", GGUF_ARCHITECTURES["gpt2"]) == "transformer.h.3.attn.c_attn.weight"
