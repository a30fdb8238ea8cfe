"""Small random Hugging Face models, built and saved by the tests themselves (no hub)."""

import io
import json

import pytest

TEXTS = ["Ein Mann fährt ein Pferd.", "A man rides a horse.", "Zwei Hunde spielen im Schnee.",
         "Two dogs play in the snow.", "Eine Frau liest ein Buch.", "A woman reads a book.", "Kinder lachen.",
         "Children laugh."]


def marian_folder(folder, activation="swish", scale_embedding=True, seed=0):
    """A tiny MarianMTModel (2+2 layers, d 16) with a SentencePiece model and vocab.json, as OPUS-MT ships."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXTS * 20), model_writer=buf, vocab_size=50,
                                   model_type="unigram", hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab[">>deu<<"] = len(vocab)  # a target-language code, as multilingual OPUS-MT models have
    vocab["<pad>"] = len(vocab)
    src = folder / "src"
    src.mkdir(parents=True)
    for name in ("source.spm", "target.spm"):
        (src / name).write_bytes(buf.getvalue())
    (src / "vocab.json").write_text(json.dumps(vocab))
    config = MarianConfig(vocab_size=len(vocab), d_model=16, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=64, activation_function=activation, scale_embedding=scale_embedding,
                          pad_token_id=vocab["<pad>"], eos_token_id=0, decoder_start_token_id=vocab["<pad>"])
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a visible final_logits_bias, so a model that forgets it fails
        model.final_logits_bias.normal_()
    out = folder / "hf"
    model.save_pretrained(out)
    MarianTokenizer(str(src / "source.spm"), str(src / "target.spm"), str(src / "vocab.json")).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def marian(tmp_path_factory):
    """(Hugging Face folder, its MarianMTModel, its MarianTokenizer)."""
    return _loaded(marian_folder(tmp_path_factory.mktemp("marian")))


@pytest.fixture(scope="session")
def make_marian():
    """The builder itself: ``make_marian(folder, activation, scale_embedding, seed)``."""
    return marian_folder


def gpt2_folder(folder, seed=0):
    """A tiny GPT2LMHeadModel (2 layers, d 16) with a byte-level BPE tokenizer trained on a few sentences."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS * 5, vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False)
    tok = GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                            unk_token="<|endoftext|>")
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=2, n_head=2, n_positions=64, bos_token_id=eos,
                        eos_token_id=eos)
    return _save(folder / "gpt2", GPT2LMHeadModel, config, tok, seed)


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory):
    """(Hugging Face folder, its GPT2LMHeadModel, its tokenizer)."""
    return _loaded(gpt2_folder(tmp_path_factory.mktemp("gpt2")))


def bert_folder(folder, seed=0):
    """A tiny BertForMaskedLM (2 layers, d 16) with an uncased WordPiece vocabulary (Chinese characters too)."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    words = sorted({w for t in TEXTS for w in t.lower().replace(".", " ").split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "!", *words, "##s", "##en", "##er",
             "un", "##d", *"一个男人骑着马。"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    tok = BertTokenizerFast(str(folder / "vocab.txt"))  # the vocabulary file (positional in 4.x and 5.x)
    config = BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    return _save(folder / "bert", BertForMaskedLM, config, tok, seed)


def _save(out, model_class, config, tokenizer, seed):
    """A random ``model_class(config)`` and ``tokenizer`` saved into ``out`` with ``save_pretrained``."""
    import torch

    torch.manual_seed(seed)
    model_class(config).eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def bert(tmp_path_factory):
    """(Hugging Face folder, its BertForMaskedLM, its tokenizer)."""
    return _loaded(bert_folder(tmp_path_factory.mktemp("bert")))


def _loaded(folder):
    """(folder, the model class its config.json names, loaded, its tokenizer)."""
    import transformers

    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(folder).eval()
    return folder, model, transformers.AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="session")
def import_hf(tmp_path_factory):
    """``import_hf(folder) -> ((model, tokenizers), checkpoint)``: ``aiayn import`` run on ``folder``."""
    from aiayn.cli import main
    from aiayn.inference.load import load_checkpoint

    def run(folder):
        out = tmp_path_factory.mktemp("imported") / "ckpt"
        assert main(["import", str(folder), "--output", str(out)]) == 0
        return load_checkpoint(out), out
    return run


@pytest.fixture(scope="session")
def same_ids():
    """``same_ids(ours, decoder, hf_tok, texts)``: encoding equal to the Hugging Face tokenizer's, and
    ``decoder``'s decoding equal to ``decode(skip_special_tokens=True)``."""
    def check(ours, decoder, hf_tok, texts):
        for text in texts:
            ids = hf_tok(text).input_ids
            assert ours.encode(text) == ids, text
            assert decoder.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True), text
    return check


LLAMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}{{ eos_token }}"
                  "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def llama_tokenizer(folder, vocab=120):
    """A word-level ``tokenizer.json`` with Llama's specials (<unk> 0, <s> 1, </s> 2) and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = LLAMA_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def llama_folder(folder, kind="llama", shard=False, seed=0, **overrides):
    """A tiny Llama / Qwen2 / Qwen3 / Mistral causal LM (2 layers, d 32, 4 query heads) with every weight random (biases
    and norm gains too, so a model that drops one fails), saved whole or in shards, with its tokenizer."""
    import torch
    import transformers

    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
               "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"), "phi3": ("Phi3Config", "Phi3ForCausalLM"),
               "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
               "gemma3": ("Gemma3TextConfig", "Gemma3ForConditionalGeneration"),
               "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
               "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM")}
    config_class, model_class = (getattr(transformers, name) for name in classes[kind])
    fields = dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
                  rms_norm_eps=1e-5)
    torch.manual_seed(seed)
    config = config_class(**{**fields, **overrides})
    if kind == "gemma3":  # the multimodal folder: the text model beside a tiny vision tower
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14)
        config = transformers.Gemma3Config(text_config=config, vision_config=vision, mm_tokens_per_image=4,
                                           boi_token_index=3, eoi_token_index=4, image_token_index=5,
                                           eos_token_id=config.eos_token_id, bos_token_id=config.bos_token_id,
                                           pad_token_id=config.pad_token_id)
    model = model_class(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3 if param.dim() == 1 else 0.1)
        if kind in ("gemma2", "gemma3_text", "gemma3"):  # its padding token is a row of the vocabulary (id 0):
            model.get_input_embeddings().weight[model.config.pad_token_id].zero_()  # zero, as a trained one
    model.save_pretrained(folder, max_shard_size="20KB" if shard else "1GB")
    llama_tokenizer(folder)
    return folder


@pytest.fixture(scope="session")
def make_llama():
    """The builder itself: ``make_llama(folder, kind, shard, seed, **config_overrides)``."""
    return llama_folder


T5_FLAVOURS = {  # T5 v1.0 (ReLU, output tied and rescaled), v1.1 as transformers 5 builds it (gated GELU, tied, not
    # rescaled), Flan-T5 as released (gated GELU, an output projection of its own, not rescaled)
    "v1.0": dict(feed_forward_proj="relu"), "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
    "flan": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)}


def t5_folder(folder, flavour="v1.1", shard=False, seed=0):
    """A tiny T5ForConditionalGeneration (2 + 2 layers, d 32, 4 heads of 8, 8 relative buckets up to 20 positions, so
    short sentences reach the logarithmic buckets) with every weight random (norm gains and bias tables too), a
    SentencePiece unigram model with T5's ids (<pad> 0, </s> 1, <unk> 2) and 4 sentinels. ``flan``: the output
    projection its own tensor, ``tie_word_embeddings`` false in config.json, as Flan-T5 folders are."""
    import sentencepiece as spm
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import T5Config, T5ForConditionalGeneration, T5Tokenizer

    folder = folder / "hf"
    folder.mkdir(parents=True)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXTS * 20), model_writer=buf, vocab_size=60,
                                   model_type="unigram", hard_vocab_limit=False, minloglevel=2, pad_id=0, eos_id=1,
                                   unk_id=2, bos_id=-1)
    (folder / "spiece.model").write_bytes(buf.getvalue())
    tok = T5Tokenizer.from_pretrained(folder, extra_ids=4)
    config = T5Config(vocab_size=len(tok) + 3, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                      num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                      decoder_start_token_id=0, **T5_FLAVOURS[flavour])
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3 if param.dim() == 1 else 0.2)
    model.save_pretrained(folder, max_shard_size="20KB" if shard else "1GB")
    tok.save_pretrained(folder)
    if flavour == "flan":
        name = "model.safetensors" if not shard else json.loads(
            (folder / "model.safetensors.index.json").read_text())["weight_map"]["shared.weight"]
        tensors = load_file(folder / name)
        tensors["lm_head.weight"] = torch.randn(config.vocab_size, 32, generator=torch.Generator().manual_seed(seed))
        save_file(tensors, folder / name, metadata={"format": "pt"})
        if shard:
            index = json.loads((folder / "model.safetensors.index.json").read_text())
            index["weight_map"]["lm_head.weight"] = name
            (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        hf = json.loads((folder / "config.json").read_text())
        hf.pop("scale_decoder_outputs", None)
        (folder / "config.json").write_text(json.dumps(hf | {"tie_word_embeddings": False}))
    return folder


@pytest.fixture(scope="session")
def make_t5():
    """The builder itself: ``make_t5(folder, flavour, shard, seed)`` -> the Hugging Face folder."""
    return t5_folder
