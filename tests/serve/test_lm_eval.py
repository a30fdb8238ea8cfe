"""lm-evaluation-harness scores a model through ``aiayn serve`` as it scores the same weights in ``transformers``: a
multiple-choice task written as a local JSON file (German Multi30K captions, the English one among three others),
run with ``--model local-completions`` (prompt token ids, ``echo``, ``logprobs``, ``max_tokens`` 1) against the server
and with ``--model hf`` on the checkpoint ``aiayn export --format hf`` wrote: the same accuracy, and each choice's
log-likelihood within 1e-3."""

import gzip
import json
import os
import random
from pathlib import Path

import pytest

from aiayn.cli import main
from aiayn.inference.generator import TextGenerator
from aiayn.serve.limits import Limits
from aiayn.serve.server import create_app

from conftest import SMOLLM2, serving

lm_eval = pytest.importorskip("lm_eval")
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def caption_task(folder: Path, items: int = 24) -> Path:
    """The task's folder: its JSON lines (a German caption; its English one and three others, in a seeded order)
    and its YAML, as lm-eval reads a local task."""
    with gzip.open(SHARED / "multi30k" / "val.de.gz", "rt", encoding="utf-8") as f:
        german = f.read().splitlines()[:items]
    with gzip.open(SHARED / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        english = f.read().splitlines()[:items]
    rng, rows = random.Random(0), []
    for i, text in enumerate(german):
        choices = [english[i], *rng.sample(english[:i] + english[i + 1:], 3)]
        rng.shuffle(choices)
        rows.append({"query": f"German: {text}\nEnglish:", "choices": [f" {c}" for c in choices],
                     "gold": choices.index(english[i])})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "captions.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    (folder / "captions.yaml").write_text(
        "task: multi30k_captions\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'captions.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{query}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{gold}}"\n'
        "metric_list:\n  - metric: acc\n")
    return folder


def random_llama(folder: Path) -> Path:
    """A small random Llama with GPT-2's real byte-level BPE, as a Hugging Face folder."""
    import torch
    from transformers import GPT2TokenizerFast, LlamaConfig, LlamaForCausalLM

    tok = GPT2TokenizerFast(str(SHARED / "tokenizers" / "gpt2" / "vocab.json"),
                            str(SHARED / "tokenizers" / "gpt2" / "merges.txt"))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=None, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3 if param.dim() == 1 else 0.2)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def scores(results: dict) -> tuple[float, list[float]]:
    """A run's accuracy and each choice's log-likelihood, in the task's order."""
    samples = sorted(results["samples"]["multi30k_captions"], key=lambda s: s["doc_id"])
    return (results["results"]["multi30k_captions"]["acc,none"],
            [float(resp[0][0]) for s in samples for resp in s["resps"]])


def compare(checkpoint: Path, tmp_path: Path, name: str) -> tuple[tuple[float, list[float]], tuple[float, list[float]]]:
    """The task scored through ``aiayn serve`` of ``checkpoint`` and in transformers on its HF export."""
    from lm_eval.tasks import TaskManager

    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    tasks = TaskManager(include_path=str(caption_task(tmp_path / "task")))
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "hf", "--output", str(tmp_path / "hf")]) == 0
    limits = Limits(max_chars=8000)
    with serving(create_app(TextGenerator.from_checkpoint(checkpoint), limits, name=name), limits) as url:
        served = lm_eval.simple_evaluate(
            model="local-completions", tasks=["multi30k_captions"], task_manager=tasks, log_samples=True,
            model_args=f"model={name},base_url={url}/v1/completions,tokenizer_backend=huggingface,"
                       f"tokenizer={tmp_path / 'hf'},num_concurrent=1,max_retries=1")
    reference = lm_eval.simple_evaluate(
        model="hf", tasks=["multi30k_captions"], task_manager=tasks, log_samples=True, device="cpu",
        model_args=f"pretrained={tmp_path / 'hf'},dtype=float32")
    return scores(served), scores(reference)


@pytest.mark.long  # a served model, an export and lm-eval's harness over both: 24 s
def test_lm_eval_scores_the_served_model_as_transformers_scores_its_export(tmp_path):
    assert main(["import", str(random_llama(tmp_path / "llama")), "--output", str(tmp_path / "ckpt")]) == 0
    (acc, logliks), (hf_acc, hf_logliks) = compare(tmp_path / "ckpt", tmp_path, "llama-tiny")
    assert acc == hf_acc and len(logliks) == len(hf_logliks) == 4 * 24
    assert max(abs(a - b) for a, b in zip(logliks, hf_logliks, strict=True)) < 1e-3
    assert len(set(logliks)) > 24  # the choices were scored, not all alike


@pytest.mark.long
@pytest.mark.real_files(SMOLLM2)
def test_lm_eval_scores_smollm2_through_the_server_as_transformers_does(tmp_path):
    assert main(["import", str(SMOLLM2), "--output", str(tmp_path / "ckpt")]) == 0
    (acc, logliks), (hf_acc, hf_logliks) = compare(tmp_path / "ckpt", tmp_path, "smollm2")
    assert acc == hf_acc > 0.25  # better than a guess among four
    assert max(abs(a - b) for a, b in zip(logliks, hf_logliks, strict=True)) < 1e-3
    print(json.dumps({"config": "smollm2-135m multi30k_captions (24)", "acc": acc, "hf_acc": hf_acc,
                      "max_loglik_gap": max(abs(a - b) for a, b in zip(logliks, hf_logliks, strict=True))}))
