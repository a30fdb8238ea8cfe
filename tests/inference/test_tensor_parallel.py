"""Tensor-parallel inference over two gloo processes on the CPU: the split model's logits within 1e-5 of the whole
model's and the same greedy and beam tokens, for the encoder-decoder (the paper's, and T5's with relative position
biases), the decoder-only (LLaMA's options: grouped-query attention, SwiGLU, rotary positions) and the encoder-only
model, each rank holding about half of the blocks' weights and its own heads of the KV cache; the commands print
what one process prints; a split server answers as the library does and, on SIGTERM mid-stream, ends the stream
whole and exits; what cannot be split is
refused by name."""

import json
import os
import signal
import socket
import subprocess

import httpx
import pytest
import torch

from aiayn.cli import main
from aiayn.inference.tensor_parallel import check_divisible
from aiayn.model.config import ModelConfig
from tiny_runs import abort, torchrun, torchrun_command, workers

from conftest import run_main, tiny, wait_until_serving

CHECK = r'''
import json, sys
import torch
from aiayn import build_model, generate
from aiayn.inference.tensor_parallel import local_bytes, start
from aiayn.model.config import ModelConfig

parallel = start("cpu")
configs = {name: ModelConfig.from_dict(fields) for name, fields in json.loads(sys.argv[1]).items()}
found = {}
for name, cfg in configs.items():
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    ids = torch.randint(5, cfg.vocab_size, (3, 9))
    ids[1, 6:] = cfg.pad_id  # a padded row
    tgt = torch.cat([torch.full((3, 1), cfg.bos_id), torch.randint(5, cfg.vocab_size, (3, 5))], dim=1)
    run = (lambda m: m(ids, tgt)) if cfg.arch == "encoder-decoder" else (lambda m: m(ids))
    with torch.no_grad():
        whole, whole_bytes = run(model), local_bytes(model)
        decoded = {} if cfg.arch == "encoder-only" else {
            s: generate(model, ids, s, beam_size=3 if s == "beam" else 1, max_new_tokens=8, max_len_b=None)
            for s in ("greedy", "beam")}
        cache = sum(t.numel() for t in (model.new_cache(3, 12, ids.float()).layers[0].self_kv.k,)) \
            if cfg.arch != "encoder-only" else 0
        parallel.prepare(model)
        split = run(model)
        same = {s: generate(model, ids, s, beam_size=3 if s == "beam" else 1, max_new_tokens=8, max_len_b=None) == out
                for s, out in decoded.items()}
        split_cache = model.new_cache(3, 12, ids.float()).layers[0].self_kv.k.numel() if cfg.arch != "encoder-only" \
            else 0
    found[name] = {"diff": float((whole - split).abs().max()), "scale": float(whole.abs().max()), "same": same,
                   "weights": local_bytes(model) / whole_bytes, "cache": split_cache / cache if cache else None}
if parallel.leader:
    print(json.dumps(found))
'''

MEMBERS = {
    "paper": tiny(),  # post-norm, biases everywhere, sinusoids, ReLU
    "t5": tiny(norm="pre", norm_type="rmsnorm", positions="relative", qkv_bias=False, out_bias=False,
               ffn_bias=False, scale_attention=False, share_embeddings="inputs", rescale_output=True, bos_id=0,
               feed_forward="swiglu", activation="gelu_tanh"),
    "llama": tiny(arch="decoder-only", norm="pre", norm_type="rmsnorm", positions="rope", n_kv_heads=2,
                  feed_forward="swiglu", activation="silu", qkv_bias=False, out_bias=False, ffn_bias=False),
    "gpt": tiny(arch="decoder-only", positions="learned"),
    "bert": tiny(arch="encoder-only", positions="learned", embedding_norm=True),
}


@pytest.mark.long  # two processes under torchrun
def test_the_split_model_equals_the_whole(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    result = torchrun(json.dumps({k: v.to_dict() for k, v in MEMBERS.items()}), program=(str(script),))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(found) == set(MEMBERS)
    for name, got in found.items():
        assert got["scale"] > 0.1 and got["diff"] <= 1e-5, (name, got)
        assert all(got["same"].values()), (name, got)
        assert 0.3 < got["weights"] < 0.8, (name, got)  # the blocks halved; embeddings and norms whole
        if got["cache"] is not None:
            assert got["cache"] == 0.5, (name, got)  # each rank caches its own key/value heads


def test_heads_that_do_not_divide_are_refused_by_name():
    check_divisible(tiny(), 2)  # 4 heads, 4 key/value heads, 256 units: two ranks
    with pytest.raises(ValueError, match="n_heads = 4 does not divide over 3 processes"):
        check_divisible(tiny(), 3)
    with pytest.raises(ValueError, match="n_kv_heads = 1 does not divide over 2"):
        check_divisible(ModelConfig.preset("tiny", vocab_size=40, n_kv_heads=1), 2)


def test_without_torchrun_the_flag_is_one_line(trained_run, capsys):
    assert main(["translate", "--checkpoint", str(trained_run), "--tensor-parallel"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--tensor-parallel: no process group to join; run it under torchrun" in err and "\n" not in err
    assert main(["translate", "--checkpoint", str(trained_run), "--tensor-parallel", "--adapter", "ad"]) == 2
    assert "merge the adapter first (aiayn merge)" in capsys.readouterr().err


def test_a_split_model_decodes_in_float32_only(trained_run):
    from aiayn.inference.load import load_checkpoint
    from aiayn.inference.precision import inference_copy

    model, _ = load_checkpoint(trained_run)
    model.runtime.world = 2  # as parallelize leaves it
    assert inference_copy(model) is model  # no copy, no packing, no fusing of the split projections
    for flag in ("int8", "int4", "bf16"):
        with pytest.raises(ValueError, match="--tensor-parallel decodes the float32 weights it split"):
            inference_copy(model, **{flag: True})


def _one_process(*args: str, stdin: str = "") -> str:
    """What the command prints unsplit: run here, in this process."""
    result = run_main(*args, stdin=stdin)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.long  # torchrun: two processes per command (make test-long)
def test_translate_generate_and_embed_print_what_one_process_prints(trained_run, lm_run, mlm_run, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a b c d\ne f g\nh i j k l\n")
    commands = [("translate", "--checkpoint", str(trained_run), "--input", str(source), "--beam-size", "2"),
                ("generate", "--checkpoint", str(lm_run), "--prompt", "the cat", "--max-new-tokens", "12",
                 "--temperature", "0"),
                ("embed", "--checkpoint", str(mlm_run), "--input", str(source))]
    unreadable = torchrun("translate", "--checkpoint", str(trained_run), "--input", str(tmp_path / "none.txt"),
                          "--tensor-parallel")
    assert unreadable.returncode != 0 and unreadable.stderr.count("none.txt") >= 2  # every rank stops, with its line
    for command in commands:
        split = torchrun(*command, "--tensor-parallel")
        assert split.returncode == 0, split.stderr[-3000:]
        alone = _one_process(*command)
        if command[0] == "embed":  # vectors: equal to rounding
            ours = [json.loads(line) for line in split.stdout.splitlines()]
            theirs = [json.loads(line) for line in alone.splitlines()]
            assert len(ours) == 3 and torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-5)
        else:
            assert split.stdout == alone and alone.strip(), command[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_zero(pid: int) -> int:
    for child in workers(pid):
        environ = open(f"/proc/{child}/environ", "rb").read().split(b"\0")  # noqa: SIM115
        if b"RANK=0" in environ:
            return child
    raise AssertionError("no rank 0 among torchrun's workers")


@pytest.mark.long  # torchrun: a split server (make test-long)
def test_a_split_server_answers_as_the_library_and_drains_on_sigterm(lm_run):
    from aiayn.inference.generator import TextGenerator

    port = _free_port()
    command = [*torchrun_command(), "-m", "aiayn", "serve", "--checkpoint", str(lm_run), "--port", str(port),
               "--tensor-parallel"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(url, proc)
        generator = TextGenerator.from_checkpoint(lm_run)
        body = {"prompt": "the cat ", "max_new_tokens": 12, "temperature": 0}
        several = [httpx.post(f"{url}/generate", json=body, timeout=60) for _ in range(2)]
        expected = generator.generate("the cat ", 12, temperature=0)[0]
        assert all(r.status_code == 200 and r.json()["text"] == expected for r in several), several[0].text
        seeded = {"prompt": "a dog", "max_new_tokens": 20, "temperature": 1.2, "seed": 5}
        sampled = httpx.post(f"{url}/generate", json=seeded, timeout=60)
        assert sampled.json()["text"] == generator.generate("a dog", 20, temperature=1.2, seed=5)[0]
        assert httpx.post(f"{url}/attention", json={"text": "the cat"}, timeout=10).status_code == 404
        events = _stream_through_sigterm(url, _rank_zero(proc.pid))  # rank 0 drains, then tells the others to stop
        _, stderr = proc.communicate(timeout=60)
    except BaseException:
        abort([*workers(proc.pid), proc.pid])
        raise
    assert proc.returncode == 0, stderr[-3000:]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=1)
    final = events[-1]  # the stream in flight at SIGTERM ended whole, as the library decodes it
    assert final.get("finish_reason") and final["text"] == generator.generate("the cat ", 60, temperature=0)[0]
    assert len(events) - 1 == final["completion_tokens"] and sum("finish_reason" not in e for e in events[2:]) >= 10


def _stream_through_sigterm(url: str, rank_zero: int) -> list[dict]:
    """A 60-token stream from /generate, SIGTERM sent to ``rank_zero`` once its first token arrived; its events."""
    body = {"prompt": "the cat ", "max_new_tokens": 60, "temperature": 0, "stream": True}
    events = []
    with httpx.stream("POST", f"{url}/generate", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 1:
                    os.kill(rank_zero, signal.SIGTERM)  # mid-stream: the other 59 tokens are still to come
    return events


@pytest.mark.long  # torchrun: a split server (make test-long)
def test_a_split_server_refuses_mask_predict_by_name(cmlm_run):
    from aiayn.decoding.config import DecodingConfig
    from aiayn.inference.load import load_checkpoint
    from aiayn.serve.jobs import Refusal
    from aiayn.serve.scheduler import Scheduler

    model, _ = load_checkpoint(cmlm_run)
    assert not isinstance(Scheduler(model).decoding_for(DecodingConfig(strategy="mask-predict")), Refusal)
    model.runtime.world = 2  # as parallelize leaves it: the mirrored engine cannot run mask-predict's loop
    refusal = Scheduler(model).decoding_for(DecodingConfig(strategy="mask-predict"))
    assert isinstance(refusal, Refusal) and refusal.field == "strategy" and "--tensor-parallel" in refusal.message
