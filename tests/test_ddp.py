"""Chapter 6: training with DistributedDataParallel, two CPU processes (gloo) launched by torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent

WORKER = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file
    from gpt_from_scratch.model import GPT, GPTConfig
    from gpt_from_scratch.book.recipes import char_level_data
    from gpt_from_scratch.train import train
    from gpt_from_scratch.train_config import TrainConfig

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    train_ids, val_ids, _ = char_level_data()
    torch.manual_seed(0)  # the same initial weights on both ranks
    model = GPT(GPTConfig(vocab_size=65, context_length=16, d_model=32, n_layers=1, n_heads=2, dropout=0.1))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(max_iters=5, batch_size=4, warmup_iters=1, eval_interval=5, eval_iters=1, progress=False)
    history = train(model, train_ids, val_ids, cfg)
    weights = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    weights["first_loss"] = torch.tensor(history.loss[0])
    save_file(weights, os.path.join(sys.argv[1], f"rank{rank}.safetensors"))
    save_file({k: v.contiguous() for k, v in start.items() if k != "lm_head.weight"},
              os.path.join(sys.argv[1], "start.safetensors"))
    dist.barrier()  # as the command line does: no rank leaves while the other still talks to it
    dist.destroy_process_group()
""")


def _torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_both_ranks_end_with_the_same_weights(tmp_path):
    (tmp_path / "worker.py").write_text(WORKER)
    result = _torchrun([str(tmp_path / "worker.py"), str(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rank0, rank1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    start = load_file(tmp_path / "start.safetensors")
    assert rank0["first_loss"] != rank1["first_loss"]  # each rank trained on its own batches...
    for name, tensor in start.items():
        assert torch.equal(rank0[name], rank1[name]), name  # ...yet the averaged gradients kept them in step
    assert any(not torch.equal(rank0[name], start[name]) for name in start)  # and they did train


def test_command_line_under_torchrun(tmp_path):
    args = ["-m", "gpt_from_scratch.book.cli", "--preset", "shakespeare-char", "--max-iters", "4", "--n-layers", "1",
            "--d-model", "32", "--n-heads", "2", "--batch-size", "2", "--eval-interval", "2", "--eval-iters", "1",
            "--progress", "false", "--device", "cpu", "--out", str(tmp_path / "ckpt")]  # CPU even with a GPU
    result = _torchrun(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes, weights identical on every rank: True" in result.stdout
    assert "val loss" in result.stdout
    assert (tmp_path / "ckpt" / "checkpoint.json").is_file()
