# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.17.3
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (ch-many-devices)=
# # 15. Training on many devices
#
# Every model of this book trained in one process. {ref}`ch-training`'s command line also
# runs under `torchrun` and wraps the model in PyTorch's `DistributedDataParallel`, but no
# chapter said what that does. This one does, for the two reasons to train on many devices:
# a model whose training state no longer fits one device, and a run that one device makes
# too slow. Each method is written from scratch on `torch.distributed`'s messages, checked
# against PyTorch's own (`tests/test_parallel.py`), and run here on a CPU: several processes
# on one machine stand in for the devices, talking through the gloo backend, and two
# `torchrun` launches on one host stand in for two machines.
#
# 1. **what one device must hold**: weights, gradients and AdamW's moments, 16 bytes a
#    parameter, counted on the book's model and computed from the shapes of GPT-2's sizes;
# 2. **collectives**: all-reduce, reduce-scatter and all-gather, and what a ring costs;
# 3. **data parallelism**: each process its share of the batch, the gradients averaged;
#    equal to one process on the whole batch, then sent in buckets during the backward pass;
# 4. **sharding**: the optimizer state split across processes (ZeRO-1), then the weights
#    and gradients too (ZeRO-3, the idea of PyTorch's FSDP);
# 5. **gradient accumulation**, the one-process equivalent, and a data loader that splits
#    each epoch between the processes;
# 6. **torchrun**: one machine, two "machines", and a process that dies;
# 7. **how much faster**: two processes on 2 cores, measured.
#
# With `FULL_RUN = True` on a machine with two GPUs or more, the last section measures the
# same collectives with NCCL, the backend of GPU clusters.

# %% tags=["colab-setup"]
# Set-up: on Colab, or wherever the package is missing, install it (your own torch is kept).
# Written by scripts/colab_setup.py from _config.yml and pyproject.toml.
try:
    import gpt_from_scratch
except ImportError:
    %pip install --quiet "gpt-from-scratch-book[notebooks]==0.1.0"
    try:
        import gpt_from_scratch
    except ImportError:
        raise RuntimeError(
            "could not install gpt-from-scratch-book 0.1.0: check that the runtime has "
            "internet access and that this version is on PyPI") from None

# %%
import inspect
import os
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter
import numpy as np
import torch
from IPython.display import Markdown, display
from torch.utils.data import DistributedSampler

from gpt_from_scratch.data import get_batch
from gpt_from_scratch.model import GPT, GPTConfig, PRESETS
from gpt_from_scratch.parallel import free_port, ring_all_gather, ring_reduce_scatter
from gpt_from_scratch.sharding import ShardedAdamW
from gpt_from_scratch.zero_bytes import state_bytes
from gpt_from_scratch.book import lessons
from gpt_from_scratch.book import parallel_prose as prose
from gpt_from_scratch.book import parallel_speed as speed_prose
from gpt_from_scratch.book.figure_text import book_figures
from gpt_from_scratch.book.parallel_runs import (job_args, launch, nccl_skipped, torchrun,
                                                 torchrun_pair)
from gpt_from_scratch.book.recipes import RECIPES, char_level_data

book_figures()  # sharp on high-density screens, each PNG records its smallest text
torch.set_printoptions(precision=3, sci_mode=False)

# FULL_RUN = False: everything runs on the CPU, in processes on this machine (the chapter
# prints its run time at the end). FULL_RUN = True (on two GPUs or more): section 15.8
# measures NCCL too.
FULL_RUN = False
SEED = 0
chapter_start = time.perf_counter()
workdir = tempfile.TemporaryDirectory(prefix="ch15-")  # what the processes write, removed
folder = Path(workdir.name)  # when the kernel ends
train_ids, val_ids, tok = char_level_data()

# %% [markdown]
# ## 15.1 What one device must hold
#
# Training with AdamW in 32-bit floats keeps four numbers for every parameter: its weight,
# its gradient, and AdamW's two moments $m$ and $v$ (Chapter 6), 4 bytes each: 16 bytes a
# parameter, before a single activation. Mixed precision does not shrink the sum: with
# 16-bit weights and gradients, AdamW keeps a 32-bit copy of the weights beside its moments,
# 2 + 2 + 12 = 16 bytes again {cite}`rajbhandari2020zero`. Counted on the book's character
# model after one AdamW step, tensor by tensor, beside `zero_bytes.state_bytes`, which
# computes the same sum from the shapes:

# %%
model = GPT(GPTConfig(**RECIPES["shakespeare-char"].model))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = get_batch(train_ids, 4, 64, torch.Generator().manual_seed(SEED))
model(x, y)[1].backward()
optimizer.step()


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


P = model.num_parameters()
held = {"weights": nbytes(model.parameters()),
        "gradients": nbytes(p.grad for p in model.parameters()),
        "AdamW's state": nbytes(t for s in optimizer.state.values() for t in s.values())}
for what, n in held.items():
    print(f"{what:<14} {n:>11,} bytes")
print(f"{'in all':<14} {sum(held.values()):>11,} bytes")
print(f"{P:,} parameters: {sum(held.values()) / P:.3f} bytes a parameter")
print(f"state_bytes: {state_bytes(model, 'ddp', world_size=1).total:,} bytes")

# %% [markdown]
# AdamW's state also holds a step count per tensor, 4 bytes each, too few to show in the
# bytes a parameter. The same count for the book's two models and GPT-2's four sizes
# (Chapter 8 loaded the smallest), and for the shape of GPT-3's 6.7-billion-parameter model
# (32 layers of width 4,096 on GPT-2's vocabulary) {cite}`brown2020language`. The models are
# built on PyTorch's `meta` device, which gives every tensor its shape and no memory:
# nothing is downloaded and nothing allocated. Beside one device's bytes, the most any of 8
# devices keeps under the two sharding schemes of section 15.4 (`state_bytes` without a
# rank: ZeRO-1 gives each device whole parameters, so some devices keep more than others),
# in GB, with the parameters in millions:

# %%
N_DEVICES, DEVICE_GB = 8, 80 * 2**30 / 1e9  # an H100's 80 GiB, in GB (10^9 bytes)
shapes = {name: GPTConfig(**RECIPES[name].model)
          for name in ("shakespeare-char", "shakespeare-bpe")}
shapes |= {name: GPTConfig.from_preset(name) for name in PRESETS if name.startswith("gpt2")}
shapes["GPT-3 6.7B's shape"] = GPTConfig(n_layers=32, d_model=4096, n_heads=32,
                                         context_length=2048)
sizes = {}
print(f"{'GB':<18} {'P (M)':>7} {'one':>7} {'ZeRO-1':>7} {'ZeRO-3':>7}")
for name, config in shapes.items():
    with torch.device("meta"):  # shapes only: no memory, no download
        m = GPT(config)
    gb = [state_bytes(m, s, N_DEVICES).total / 1e9 for s in ("ddp", "zero1", "zero3")]
    sizes[name] = (m.num_parameters(), *gb)
    print(f"{name:<18} {m.num_parameters() / 1e6:>7.1f} "
          + " ".join(f"{g:>7.2f}" for g in gb))
least = min(state_bytes(m, "zero1", N_DEVICES, rank).total for rank in range(N_DEVICES))
print(f"ZeRO-1 on 8, {name}:\nfrom {least / 1e9:.2f} to {gb[1]:.2f} GB, device by device")
display(Markdown(prose.memory_text(sizes, DEVICE_GB, N_DEVICES, "an H100's 80 GiB")))

# %% [markdown]
# The activations come on top: they grow with the batch and the context, and a large model
# keeps gigabytes of them for the backward pass. So a model stops fitting one device long
# before its weights alone would fill it, and two ways out follow. *Data parallelism* keeps
# a whole copy of everything on each device and splits the batch: it makes a run faster, and
# each device's memory holds what it held alone. *Sharding* splits the training state
# itself, so that each device keeps a part of it. Both rest on a few ways of exchanging
# tensors between processes.
#
# ## 15.2 Collectives, and what a ring costs
#
# A *collective* is an operation every process of a group calls at once, each with its own
# tensor of the same shape. Three serve this chapter, with $N$ processes, $x_r$ the tensor
# of process $r$, cut into $N$ chunks $x_r^{(0)}, \dots, x_r^{(N-1)}$:
#
# - **all-reduce**: every process ends with the sum $\sum_r x_r$;
# - **reduce-scatter**: process $r$ ends with chunk $r$ of the sum, $\sum_s x_s^{(r)}$;
# - **all-gather**: every process ends with every process's chunk, chunk $r$ from process
#   $r$.
#
# An all-reduce is a reduce-scatter followed by an all-gather. The *ring* does both with
# messages between neighbours only: the processes stand in a circle, and in each of $N - 1$
# steps every process sends one chunk to the next and receives one from the previous. In the
# reduce-scatter it adds what it receives to its own copy of that chunk and passes the sum
# on; after $N - 1$ steps process $r$ holds the whole sum of chunk $r$. The all-gather then
# passes the finished chunks round the circle in $N - 1$ more steps. Each process sends
# $2(N-1)$ chunks of $n/N$ numbers:
#
# $$\text{sent per process} = \frac{2(N-1)}{N}\, n,$$
#
# less than twice the tensor however many processes there are, the least any all-reduce
# can send when the processes compute the sums themselves {cite}`patarasuk2009bandwidth`
# (switches that add what passes through them, NVIDIA's SHARP in InfiniBand or NVLink,
# let each send less). Had every process sent its whole tensor to one,
# which sent the sum back, that one would receive and send $(N-1)\,n$ numbers: a load that
# grows with $N$. `parallel.ring_reduce_scatter` and `ring_all_gather` are the ring, from
# `torch.distributed`'s point-to-point messages, `isend` and `irecv`:

# %%
print(inspect.getsource(ring_reduce_scatter))
print(inspect.getsource(ring_all_gather))

# %% [markdown]
# The processes are started by the notebook. A notebook's kernel cannot be one of them: it
# runs the cells. `parallel_runs.launch` starts one Python process per rank, each running a
# job of `book.parallel_jobs`, with one thread each (one core a process, were the cores
# free: nothing pins them); rank 0 listens on a free port of 127.0.0.1 and the others
# connect there (`parallel.start_process_group`). It waits for them, with a time limit, and
# ends every process it started, on success, failure or an interrupted cell. Every setting
# the jobs use is written by this cell: one run of 2 processes measures what sections 15.2
# to 15.7 show, and one of 4 repeats the counts at $N = 4$, then loses a process on purpose
# (section 15.6). Four processes on a machine of fewer cores would time their wait for a
# core more than their messages: that run counts bytes, and times nothing.

# %%
g = torch.Generator().manual_seed(SEED)
setup = dict(
    config=RECIPES["shakespeare-char"].model,  # the book's character model
    seed=SEED,
    adamw=dict(lr=3e-3, weight_decay=0.1),
    batches=[get_batch(train_ids, 8, 64, g) for _ in range(3)],  # 3 steps of 8 rows
    speed_batches=[get_batch(train_ids, 16, 64, g) for _ in range(3)],
    rounds=8,  # timed rounds of 3 steps, alone and together in turn (section 15.7)
    sizes=[2**8, 2**12, 2**15, 2**18, 2**21],  # float32 numbers: 1 KiB to 8 MiB
    repeats=5,  # each collective timed 5 times, the ring's and gloo's in turn
    bucket_bytes=2**18,  # 256 KiB gradient buckets (section 15.3)
    train=dict(batch_size=4, learning_rate=3e-3, warmup_iters=4, eval_interval=24,
               eval_iters=1, keep_best=False, progress=False),  # section 15.6
)
torch.save(setup, folder / "setup.pt")
start = time.perf_counter()
pair = launch("pair", 2, folder)  # one dict per rank
four = launch("four", 4, folder, dies=3)
launch_seconds = time.perf_counter() - start
collected = {2: pair[0]["collectives"], 4: four[0]["collectives"]}
print(f"{'N':>2} {'KiB':>5} {'sent (bytes)':>12} {'':>1} {'ring ms':>7} {'gloo ms':>7}")
for N, rows in collected.items():
    for row in rows:
        n, formula = 4 * row["numel"], 2 * (N - 1) / N * 4 * row["numel"]
        times = (f"{1e3 * row['ring']:>7.2f} {1e3 * row['gloo']:>7.2f}"
                 if "ring" in row else f"{'not timed':>15}")
        print(f"{N:>2} {n // 1024:>5} {row['sent']:>12,} "
              f"{'=' if row['sent'] == formula else '≠'} " + times)
print("=: each rank sent 2(N-1)/N of the tensor's bytes")
for N, rows in collected.items():
    print(f"N = {N}: the largest difference from gloo's sum "
          f"{max(row['difference'] for row in rows):.1e}")
print(f"{os.cpu_count()} cores; the fastest of {setup['repeats']} tries kept")

# %% [markdown]
# The counts are exact: a ring of 2 sends half the tensor in each of its 2 steps, a ring of
# 4 a quarter in each of its 6. At $N = 2$ the ring's sums are gloo's to the bit (both add
# the same two numbers); at $N = 4$ they differ in the last bits, since the chunks are
# summed in another order. The times follow the usual model of a message: a fixed cost
# $\alpha$ (the *latency*: a system call, a wake-up, a trip through the network stack) plus
# its bytes over a *bandwidth* $\beta$ {cite}`thakur2005optimization`. (Thakur and his
# coauthors write $\beta$ as the time a byte takes, and add a time a byte $\gamma$ for the
# additions; here $\beta$ is bytes a second, and the additions, cheap beside the copies
# between processes, are folded into it.) A ring's $2(N-1)$ steps cost
#
# $$t \approx 2(N-1)\,\alpha + \frac{2(N-1)}{N}\,\frac{4n}{\beta}.$$
#
# The line in the figure is that model, $\alpha$ and $\beta$ fitted to the ring's times
# (least squares on the relative errors, so that each size weighs alike).

# %% tags=["remove-input"] mystnb={"figure": {"caption": "The fastest of five all-reduces between two processes on one machine, the book's ring and gloo's own, against the tensor's size, with the ring's fitted cost model.", "name": "fig-all-reduce-time"}, "image": {"alt": "Log-log plot of the time of one all-reduce against the tensor's size, for the book's ring and for gloo's all-reduce, with a dashed line for the fitted model."}}
ring = collected[2]
volume = [row["sent"] for row in ring]  # bytes each rank sent
alpha, beta = prose.fit_ring(volume, [row["ring"] for row in ring], N=2)
fig, ax = plt.subplots(figsize=(5.2, 3.4))
kib = [4 * row["numel"] / 1024 for row in ring]
ax.loglog(kib, [1e3 * row["ring"] for row in ring], "o-", label="the book's ring")
ax.loglog(kib, [1e3 * row["gloo"] for row in ring], "s-", label="gloo's all-reduce")
ax.loglog(kib, [1e3 * (2 * alpha + v / beta) for v in volume], "k--", label="ring model")
ax.set(xlabel="tensor size (KiB)", ylabel="time (ms)")
for axis in (ax.xaxis, ax.yaxis):  # plain numbers, and no labels on the minor ticks
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())
ax.legend()
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
found = [prose.ring_lesson(ring, alpha, beta)]
display(Markdown(found[-1].text))

# %% [markdown]
# Between processes of one machine the "network" is a copy through the operating system's
# loopback; between machines it is a network card, and between the GPUs of one server a link
# such as NVLink. The model is the same, with other $\alpha$ and $\beta$: section 15.7 puts
# numbers of a GPU server into it.
#
# ## 15.3 Data parallelism from scratch
#
# With $N$ processes, each holding the whole model, process $r$ takes its own share $S_r$ of
# the batch's $B$ rows, $B/N$ of them, and computes the gradient of its mean loss. The mean
# of those $N$ gradients is the gradient of the mean loss over the whole batch, because the
# shares are equal:
#
# $$\nabla \frac{1}{B}\sum_{i=1}^{B} \ell_i \;=\; \frac{1}{N}\sum_{r=0}^{N-1} \nabla
# \frac{N}{B}\sum_{i \in S_r} \ell_i.$$
#
# So an all-reduce of the gradients, divided by $N$, gives every process the gradient one
# process would have computed on the whole batch, and every process takes the same AdamW
# step from the same weights: the copies stay equal, to the bit, without ever being
# compared. They must start equal: `data_parallel.DataParallel` first sends rank 0's
# weights to the others (a *broadcast*), and checks that every process built the same
# shapes. Its simplest form all-reduces the gradients one parameter at a time, after the
# backward pass:
#
# ```python
# for p in model.parameters():
#     dist.all_reduce(p.grad)   # the sum over the processes, on every process
#     p.grad /= world_size      # the mean
# ```
#
# The run of two processes took the same 3 AdamW steps seven ways, each from the same
# starting weights: one process on the whole batch; `DataParallel` one parameter at a time,
# and in buckets (below); PyTorch's `DistributedDataParallel`; ZeRO-1 and ZeRO-3 (section
# 15.4); and, as the difference a mistake makes, two processes that never average, each
# stepping on its own share's gradient. In the `DataParallel` runs each process built its
# model from its own seed, so the broadcast is what made them start equal. The largest
# difference of each run from the one process, on rank 0: the first step's gradients (the
# mean over the processes; ZeRO-3's gathered from its shards), and the weights after the 3
# steps:

# %%
runs = ["per parameter", "bucketed", "DDP", "ZeRO-1", "ZeRO-3", "never averaged"]
one = pair[0]["one process"]
grads = {run: float((pair[0][f"{run}_grads"] - pair[0]["one process_grads"]).abs().max())
         for run in runs}
weights = {run: float((pair[0][run] - one).abs().max()) for run in runs}
print(f"{'':<15} {'gradients':>9} {'weights':>8} {'rank 1':>7}")
for run in runs:
    same = torch.equal(pair[0][run], pair[1][run])
    print(f"{run:<15} {grads[run]:>9.1e} {weights[run]:>8.1e} "
          f"{'same' if same else 'other':>7}")
print("rank 1: its weights the same bits as rank 0's, or other")
print("per parameter, bucketed, DDP, ZeRO-1, ZeRO-3\nthe same bits:",
      all(torch.equal(pair[0][run], pair[0]["per parameter"]) for run in runs[1:5]))
ddp4 = four[0]["DDP_grads"] - four[0]["per parameter_grads"]  # 4 processes, one step
print(f"4 processes, DDP's gradients against per parameter:\n{int((ddp4 != 0).sum()):,} of "
      f"{ddp4.numel():,} differ, by up to {ddp4.abs().max():.1e}")

# %% tags=["remove-input"]
found.append(prose.equivalence_lesson(grads, weights, len(setup["batches"]),
                                      setup["adamw"]["lr"]))
display(Markdown(found[-1].text))

# %% [markdown]
# "The same bits" holds with two processes: $a + b$ is $b + a$, and DDP, which divides
# each gradient by $N$ before the sum, computes $a/2 + b/2$, exact in binary. With more
# processes the division by 4 is still exact (a power of two), but the sums run in other
# orders: the order in which gloo adds a number's four values depends on where the number
# sits in the buffer it sends, and DDP's one bucket and the book's per-parameter
# all-reduces put the numbers in different places. So at $N = 4$ DDP's gradients differ
# from the book's in their last bits, as printed above, far below the bar. (With three
# processes, a division by 3 before the sum would round differently too.)
# `tests/test_parallel.py` compares DDP with the book's step to the bit at two processes;
# at three it checks the ring against gloo's all-reduce within a few float32 roundings of
# the sums. Within one run, every process ends with the same bits as every other, since
# each receives the same all-reduced sum.

# %% [markdown]
# **Buckets, sent during the backward pass.** One all-reduce per parameter pays the latency
# $\alpha$ once per tensor, and waits for the whole backward pass before sending anything.
# `DistributedDataParallel` does better in two ways {cite}`li2020pytorch`. It packs the
# gradients into *buckets*, one all-reduce each; and it starts a bucket's all-reduce as
# soon as its last gradient is ready, while backward still computes the gradients of
# earlier layers. In the pinned torch, its first step sends all the gradients in one
# bucket, after backward; it then rebuilds the buckets in the order the gradients arrived,
# each closed once it reaches about 25 MiB (`bucket_cap_mb`; the first about 1 MiB), and
# overlaps from the second step on. Backward produces the gradients in reverse order, the
# last layer's first, so the buckets are filled from the last parameter back.
# `DataParallel(model, bucket_bytes)` does the same with a hook PyTorch calls once a
# parameter's gradient is accumulated (`register_post_accumulate_grad_hook`): it copies the
# gradient into its bucket and, once the bucket is full, starts its all-reduce without
# waiting for it (`async_op=True`); `finish()` waits for those still in flight. The
# chapter's buckets are small, so that a small model fills several:

# %%
n_buckets, started = pair[0]["bucketed_buckets"]
print(f"{n_buckets} buckets of at most {setup['bucket_bytes']:,} bytes; "
      f"{started} of them already started when backward returned")
bucket_bytes = pair[0]["bucketed_bucket_bytes"]
print(f"the buckets hold {bucket_bytes:,} bytes: {bucket_bytes / P:.1f} bytes a parameter")

# %% [markdown]
# Every bucket started before backward returned, here by construction: each parameter gets a
# gradient, so each bucket fills during backward, the last one with the first parameter's
# gradient. Started is not finished: the wait in `finish()`, timed in section 15.7, says how
# much of the sending was left when backward returned.
#
# The buckets are a second copy of the gradients, kept from step to step: 4 more bytes a
# parameter in float32. `DistributedDataParallel` keeps the same copy by default, beside
# the `.grad` tensors, about 20 bytes a parameter in all; with
# `gradient_as_bucket_view=True` each gradient is copied into its bucket as soon as it is
# computed and becomes a view of it, and the copy is gone. `DataParallel` makes each
# `.grad` a view of its bucket only in `finish()`: during backward both copies are alive,
# 20 bytes a parameter at the peak; between steps, once `zero_grad()` drops the views, only
# the buckets remain.
#
# Every process must issue the same collectives in the same order, or the sums would mix
# buckets: `DataParallel` starts them strictly in order, and a parameter that got no
# gradient on one process (a branch its batch did not take) counts as zero there, so that no
# process waits for a gradient that never comes. Buckets change two things at once: fewer
# all-reduces (each pays the latency once), and sending during backward (the *overlap*).
# The overlap saves time only if something computes the sums while backward runs: section
# 15.7 times each apart, with `DataParallel(model, bucket_bytes, overlap=False)`, the same
# buckets all sent in `finish()`.
#
# ## 15.4 Sharding: ZeRO-1 and ZeRO-3
#
# Data parallelism keeps all 16 bytes a parameter on every process, $N$ copies of the same
# state, and its buckets on top. ZeRO {cite}`rajbhandari2020zero` removes the copies in
# stages.
#
# **ZeRO-1** splits AdamW's moments, 8 of the 16 bytes in float32 (with mixed precision the
# 32-bit copy of the weights goes with them: 12 of the 16, $4 + 12/N$ a process). Process
# $r$ owns a run of the parameters, about $1/N$ of the numbers, keeps $m$ and $v$ for those
# only, and steps only those; then each process sends its updated run to all the others, an
# all-gather of the weights. Each keeps $8 + 8/N$ bytes a parameter. With a reduce-scatter
# of the gradients in place of the all-reduce (a process needs only its own run's), it sends
# what data parallelism sends, as the paper counts. `sharding.ShardedAdamW` is simpler: it
# takes the gradients all-reduced by `DataParallel`, then adds the all-gather (here one
# broadcast from each process): half as much again, counted as a ring sends (an all-gather
# $(N-1)/N$ of the weights, an all-reduce $2(N-1)/N$). It splits at whole parameters
# (`shard_owners`), so a process's run is $1/N$ of the numbers only to within a parameter.
# (**ZeRO-2**, DeepSpeed's stage 2 and FSDP's `SHARD_GRAD_OP`, also shards the gradients, a
# reduce-scatter in place of the all-reduce: $4 + 12/N$ bytes a parameter in float32, for
# the traffic of data parallelism.)

# %%
print(inspect.getsource(ShardedAdamW.step))

# %% [markdown]
# **ZeRO-3** splits everything. Each block's parameters are laid end to end in one vector
# (the embeddings and the last LayerNorm make one more), padded to a multiple of $N$, and
# process $r$ keeps only piece $r$ of it, with that piece's gradient and moments: $16/N$
# bytes a parameter. Before a block's forward the processes all-gather its pieces into the
# full weights; in the backward pass the full gradient is reduce-scattered, so that each
# process receives the mean gradient of its own piece, and AdamW steps the pieces. That is
# the idea of PyTorch's FSDP {cite}`zhao2023fsdp`, which `sharding.shard_model` writes with
# the ring of section 15.2. FSDP frees a block's gathered weights after its forward and
# gathers them again for its backward: one all-gather more than data parallelism's
# all-reduce, half as much again as a ring counts. `shard_model` keeps them from the forward
# to the backward pass instead, sending what data parallelism sends and holding more during
# the step. `tests/test_parallel.py` checks `ShardedAdamW` against
# `torch.distributed.optim.ZeroRedundancyOptimizer` and `shard_model` against FSDP2's
# `fully_shard`, to the bit with two processes. The bytes each process held after the last
# step of section 15.3's runs, counted tensor by tensor (the weights, their gradients and
# AdamW's state; not `DataParallel`'s buckets), against the formula:

# %%
formula = {"ddp": lambda N: 16, "zero1": lambda N: 8 + 8 / N, "zero3": lambda N: 16 / N}
names = {"ddp": "unsharded", "zero1": "ZeRO-1", "zero3": "ZeRO-3"}
runs_of = {"ddp": "per parameter", "zero1": "ZeRO-1", "zero3": "ZeRO-3"}
measured, exact = {}, True  # (scheme, N) -> bytes a parameter, one value per rank
print(f"{'MB':<9} {'N':>2} {'weights':>7} {'grads':>6} {'AdamW':>6} {'B/param':>7} "
      f"{'formula':>7}")
for N, ranks in ((2, pair), (4, four)):
    for scheme, run in runs_of.items():
        kept = [rank[f"{run}_held"] for rank in ranks]  # bytes of the tensors, per rank
        exact &= all(k == rank["formula"][scheme] for k, rank in zip(kept, ranks))
        measured[scheme, N] = [sum(k.values()) / P for k in kept]
        print(f"{names[scheme]:<9} {N:>2} {kept[0]['parameters'] / 1e6:>7.2f} "
              f"{kept[0]['gradients'] / 1e6:>6.2f} {kept[0]['optimizer'] / 1e6:>6.2f} "
              f"{max(measured[scheme, N]):>7.3f} {formula[scheme](N):>7.2f}")
print("every rank's bytes equal state_bytes':", exact)

# %% tags=["remove-input"]
found.append(prose.memory_lesson(measured, formula, exact))
display(Markdown(found[-1].text))

# %% [markdown]
# The table shows rank 0, and the largest bytes a parameter over the ranks. Between steps is
# where the formula counts; during a step ZeRO-3 holds more, the weights of the block it
# computes (and, in `shard_model`, of every block from forward to backward, which FSDP frees
# after each block's forward and gathers again in backward), and every scheme holds the
# activations.
#
# ## 15.5 Gradient accumulation, and a loader that splits the epoch
#
# One process can compute the same step without a second device: run the backward pass on
# each share in turn, the loss of each divided by the number of shares, and let the
# gradients add up in `.grad` before one AdamW step. That is *gradient accumulation*, the
# one-process equivalent of data parallelism: the same gradient, computed one share after
# the other (section 15.7 times it), with the activations of one share at a time in memory.
# Dividing each share's mean loss by the number of shares gives the whole batch's mean only
# when every share counts as many tokens, as here, where every row has 64 targets; with
# padding or masked tokens, weigh each share by its tokens instead. Under
# `DistributedDataParallel`, each backward pass would all-reduce the gradients: its
# `no_sync()` context leaves out the all-reduce for every share but the last. On the
# book's character model, 4 shares of 2 rows against the 8 rows at once:

# %%
model = GPT(GPTConfig(**setup["config"]))
x, y = setup["batches"][0]  # (8, 64) each
model(x, y)[1].backward()
whole = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
for part in range(4):
    rows = slice(2 * part, 2 * part + 2)
    (model(x[rows], y[rows])[1] / 4).backward()  # .grad adds up
accumulated = max(float((p.grad - w).abs().max())
                  for p, w in zip(model.parameters(), whole))
print(f"accumulated over 4 shares against the whole batch: {accumulated:.1e}")

# %% [markdown]
# The difference is rounding: the sums are taken in another order. Section 15.7 times
# one process accumulating two shares so against two processes.
#
# Data parallelism needs each process to see *other* samples. The book's trainer draws
# random windows of the text, each process from its own seed (Chapter 6): samples drawn with
# replacement, where two processes meet a window only by chance, as two steps of one process
# do. A loader that goes through a dataset in epochs must instead split each epoch's order.
# PyTorch's `DistributedSampler` shuffles the indices with a seed that every process shares
# (and `set_epoch`, a new order each epoch), then process $r$ takes every $N$-th index
# starting at $r$. When $N$ does not divide the dataset it *pads* the list with its first
# indices, so that every process gets as many: those samples are seen twice in the epoch,
# often by two processes; with `drop_last=True` it cuts the list instead, and the samples
# left over are not seen at all that epoch.
# Ten samples on four processes:

# %%
def epoch(n, N, drop_last, number=0):
    """Each rank's indices for epoch ``number`` of a dataset of n samples."""
    out = []
    for rank in range(N):
        sampler = DistributedSampler(range(n), num_replicas=N, rank=rank, shuffle=True,
                                     seed=SEED, drop_last=drop_last)
        sampler.set_epoch(number)  # the same seed on every rank, another order each epoch
        out.append(list(sampler))
    return out


for drop_last in (False, True):
    ranks = epoch(10, 4, drop_last)
    seen = np.bincount(np.concatenate(ranks), minlength=10)
    print(f"drop_last={drop_last}: {ranks}; seen twice {int((seen == 2).sum())}, "
          f"never {int((seen == 0).sum())}")
windows = len(train_ids) // 64  # the training text cut into windows of 64 characters
seen = np.bincount(np.concatenate(epoch(windows, 4, drop_last=True)), minlength=windows)
print(f"{windows:,} windows on 4 ranks, drop_last=True: seen once "
      f"{int((seen == 1).sum()):,}, twice {int((seen > 1).sum())}, "
      f"never {int((seen == 0).sum())}")
print("the next epoch, another order:", epoch(10, 4, True, number=1)[0], "on rank 0")

# %% [markdown]
# ## 15.6 torchrun, two "machines", and a process that dies
#
# `launch` starts processes itself. On a cluster, PyTorch's launcher does it:
# `torchrun` (`python -m torch.distributed.run`) starts `--nproc-per-node` processes on each
# machine and gives each its `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and the address where the
# group meets; `torch.distributed.init_process_group()` reads them. The machines find each
# other through a *rendezvous*: every machine's launcher is given the same address, here
# 127.0.0.1, and waits there until `--nnodes` launchers have come.
#
# **A process that dies.** Section 15.2's run of four processes ended by killing rank 3
# (`SIGKILL`, as an operating system ends a process it has no memory for) once its backward
# pass had started the all-reduces of some buckets. The others, waiting in `finish()`, fail
# at the first bucket still in flight (the buckets before it had completed):

# %%
for rank, result in enumerate(four[:3]):
    said = result["lost"]
    print(f"after {said['seconds']:.2f} s: {said['error']}\n")

# %% [markdown]
# Nothing recovers inside the group: a collective needs every process. What recovers is a
# restart of all of them from the last checkpoint, which `torchrun --max-restarts` does: it
# watches its processes, and when one ends with an error it ends the others and starts the
# whole group again. The book's `train` writes a crash-safe checkpoint every
# `checkpoint_interval` steps and continues from it exactly (Chapter 6), so a restart loses
# only the steps since then. The run below trains the book's character model for 24 steps on
# two processes under `torchrun`, saving every 8 steps; rank 1 is killed at its 13th step,
# and torchrun restarts both. Then two `torchrun` launches, two "machines" of one process
# each, meet at 127.0.0.1 (`--nnodes 2`) and take the same 24 steps without interruption:

# %%
np.save(folder / "train.npy", train_ids)  # the text, for the processes to read
np.save(folder / "val.npy", val_ids)
start = time.perf_counter()
restarted = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
             *job_args(folder, "restarted", 24, 8, kill_at=13)]
log = torchrun(restarted, folder)
port = free_port()
machine = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "ch15",
           *job_args(folder, "two machines", 24, 8)]
two_logs = torchrun_pair([machine, machine], folder)  # two launchers at once
torchrun_seconds = time.perf_counter() - start
print("python -m torch.distributed.run",
      " ".join(restarted).replace(str(folder), "FOLDER"))
print("\n".join(prose.torchrun_lines(log)))
results = {run: torch.load(folder / f"{run}.pt") for run in ("restarted", "two machines")}
for run, result in results.items():
    print(f"{run}: world size {result['world_size']}, restarts {result['restart']}, "
          f"resumed from step {result['resumed_from']}, "
          f"last loss {result['losses'][-1]:.4f}")
print("the same weights to the bit:",
      torch.equal(results["restarted"]["weights"], results["two machines"]["weights"]))

# %% tags=["remove-input"]
display(Markdown(prose.restart_text(results["restarted"], results["two machines"], 8, 13,
                                   log)))

# %% [markdown]
# Two details make this work on a real cluster. The checkpoint must be where every machine
# can read it (a shared file system), since rank 0 writes it and all of them resume from it.
# And the processes of a restarted group must not meet where their predecessors met: with
# gloo, a restarted rank can read the address its dead predecessor left in torchrun's store
# and fail to connect (reported with NCCL in
# [pytorch/pytorch#135712](https://github.com/pytorch/pytorch/issues/135712), closed in 2024
# by a new store for each attempt; with gloo in the pinned torch, restarts here still fail
# without the setting), so `parallel_runs` sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`,
# which gives every attempt a store of its own, started by its rank 0. The other failures
# end with a clear error within a bounded time, each tested in `tests/test_parallel.py`: a
# rendezvous that never completes, a port already taken, processes started with different
# world sizes (`start_process_group` compares them before joining, and names both), models
# whose shapes differ between processes.
#
# ## 15.7 How much faster are two processes on 2 cores?
#
# The run of two processes timed training steps of 16 rows. *Alone*: rank 0 computes both
# shares of 8 rows one after the other, accumulating their gradients, then steps AdamW,
# while rank 1 waits: the same step, the same work for each share. *Together*: each
# process computes its share, waits in `finish()` for the buckets still in flight, and
# steps AdamW; *buckets after*, the same buckets all sent in `finish()`, after backward;
# *per parameter*, one all-reduce per parameter after backward. The four kinds took turns,
# 3 steps each per round, the order reversed every other round, so that a busy spell of the
# machine falls on each kind alike. The median of each part over every step, in
# milliseconds (*fwd+bwd* the forward and backward passes, *wait* the wait in `finish()`).
# Beside each forward and backward's wall time, its thread's CPU time (`time.thread_time`):
# the time it ran on a core; the rest it waited for one, whatever else kept the cores
# busy, the other rank included:

# %%
speed = pair[0]["speed"]
print(f"{'ms':<13}" + "".join(f"{p:>8}" for p in ("fwd+bwd", "wait", "AdamW", "step")))
medians = {}
kinds = ("alone", "together", "buckets after", "per parameter")
for key in kinds:
    medians[key], rounds = speed_prose.step_parts(speed[key])
    print(f"{key:<13}" + "".join(f"{1e3 * v:>8.1f}" for v in medians[key])
          + f"{1e3 * sum(medians[key]):>8.1f}")
print(f"\n{'fwd+bwd ms':<13}{'on core':>8}{'wall':>8}{'waited':>8}")
walls = {"one share": speed["alone shares"]} | {k: [s[0] for r in speed[k] for s in r]
                                                 for k in kinds[1:]}
cpus = {"one share": speed["alone shares cpu"]} | speed["cpu"]
for key, wall in walls.items():
    on_core, wall = float(np.median(cpus[key])), float(np.median(wall))
    print(f"{key:<13}{1e3 * on_core:>8.1f}{1e3 * wall:>8.1f}{1e3 * (wall - on_core):>8.1f}")
per_round = [a / t for a, t in zip(speed_prose.step_parts(speed["alone"])[1],
                                   speed_prose.step_parts(speed["together"])[1])]
speedup = speed_prose.speedup_of(speed)
print(f"\ntwo processes: {speedup:.1f} times as fast\n(median of {len(per_round)} rounds, "
      f"{min(per_round):.1f} to {max(per_round):.1f})")

# %% tags=["remove-input"]
found.append(speed_prose.speed_lesson(speed, alpha, beta, held["gradients"]))
display(Markdown(found[-1].text))
display(Markdown(speed_prose.overlap_text(speed)))

# %% [markdown]
# The accounting carries over to a GPU cluster; the sizes change. The same ring model with
# the links of a server of H100 GPUs, NVLink between the GPUs of one server and an
# InfiniBand card per GPU between servers, at the speeds NVIDIA gives, for GPT-2 small's
# gradients in 32 bits, a lower bound for a ring: the bytes over the links alone, at their
# full speed, with no latency. Between servers, NCCL does not send everything through one
# card: it runs one ring per card, each carrying an eighth of the gradients, laid so that
# each GPU leaves its server in one ring only and sends over NVLink in the other seven; a
# GPU's card then carries an eighth of its bytes. (Switches that add the numbers themselves,
# NVLink SHARP inside a server and SHARP on InfiniBand, send each byte about once: about
# half a ring's bytes.) Beside them, the step's computation for a forward and backward pass,
# by Kaplan and his coauthors' count {cite}`kaplan2020scaling`: 6 operations a token for
# each weight of a matrix product (the token embedding counts once, as the output layer that
# shares it; the position embedding is a lookup, and counts nothing), and 6 a token for each
# layer, position of the context and dimension, for attention's products with the context;
# at 40% of the H100's peak (an assumption: runs reach about that):

# %%
NVLINK_GBPS, INFINIBAND_GBITPS = 450, 400  # each way, per GPU
H100_TFLOPS, UTILISATION = 989, 0.4  # 16-bit products, NVIDIA's figure without sparsity
config = shapes["gpt2"]
P_small, tokens = sizes["gpt2"][0], 16 * config.context_length  # 16 sequences a GPU
allreduce_ms = {}
nvlink, card = NVLINK_GBPS * 1e9, INFINIBAND_GBITPS * 1e9 / 8  # bytes a second
for where, N in {"8 GPUs in one server": 8, "64 GPUs in 8 servers": 64}.items():
    sent = 2 * (N - 1) / N * 4 * P_small  # bytes each GPU sends in a ring all-reduce
    if N == 8:  # every step over NVLink
        allreduce_ms[where] = 1e3 * sent / nvlink
        print(f"{where}: each GPU sends {sent / 1e9:.2f} GB\n  over NVLink: "
              f"{allreduce_ms[where]:.1f} ms")
        continue
    # 8 rings, one per card: an eighth of each GPU's bytes through its card, the rest NVLink
    allreduce_ms[where] = 1e3 * max(sent / 8 / card, sent * 7 / 8 / nvlink)
    print(f"{where}: each GPU sends {sent / 1e9:.2f} GB,\n  {sent / 8 / 1e9:.2f} GB of it "
          f"through its card: {allreduce_ms[where]:.1f} ms\n  (all through one card: "
          f"{1e3 * sent / card:.1f} ms)")
products = 6 * (P_small - config.context_length * config.d_model)  # all but the lookup
attention = 6 * config.n_layers * config.context_length * config.d_model
operations = (products + attention) * tokens
compute_ms = 1e3 * operations / (H100_TFLOPS * 1e12 * UTILISATION)
share = attention / (products + attention)
print(f"one step's computation: {operations:.2e} operations\n  ({share:.0%} of them "
      f"attention's), {compute_ms:.0f} ms a GPU")
display(Markdown(speed_prose.cluster_text(allreduce_ms, compute_ms)))

# %% [markdown]
# Near-linear speed-ups need more than fast links: every GPU an equal share (the fastest
# waits for the slowest at every all-reduce) and enough rows to keep it busy. Links seldom
# run at their full speed, so the overlap with the backward pass still matters, and 16-bit
# gradients halve the bytes. The collectives follow the machines' shape: NCCL, the GPU
# backend, builds its rings and trees from the links it finds, NVLink inside a server and
# the cards between.
#
# ## 15.8 With FULL_RUN on several GPUs: NCCL
#
# On a machine with two GPUs or more, `FULL_RUN = True` repeats section 15.2's timing on
# them with NCCL, for tensors of 1 MiB to 1 GiB, and reports each all-reduce's *bus
# bandwidth*, the bytes each GPU sends, $2(N-1)/N$ of the tensor, over the time: the
# number `nccl-tests` reports, comparable to the link's speed. Unlike the CPU's fastest of
# several tries, each time is the mean of 5 calls run back to back, after 3 untimed ones
# (NCCL sets up its rings on the first): a GPU queues its work, and timing one call alone
# would time the wait for the queue to empty.

# %%
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
skipped = nccl_skipped(FULL_RUN, gpus)
if skipped is None:
    setup["gpu_sizes"] = [2**18, 2**22, 2**26, 2**28]  # float32 numbers: 1 MiB to 1 GiB
    torch.save(setup, folder / "setup.pt")
    for row in launch("nccl", gpus, folder, timeout_s=300)[0]["nccl"]:
        size, seconds = 4 * row["numel"], row["seconds"]
        print(f"{size / 2**20:>6.0f} MiB: {1e3 * seconds:8.3f} ms, bus bandwidth "
              f"{2 * (gpus - 1) / gpus * size / seconds / 1e9:6.1f} GB/s")
else:
    print(skipped)

# %% tags=["remove-input"]
display(Markdown(prose.timing_text(time.perf_counter() - chapter_start, launch_seconds,
                                   torchrun_seconds)))

# %% [markdown]
# ## Summary
#
# - Training with AdamW keeps 16 bytes a parameter, before activations: GPT-2's largest size
#   needs 29% of an H100's 80 GiB, and GPT-3's 6.7B shape more than it holds.
# - A ring all-reduce sends $2(N-1)/N$ of the tensor from each process, whatever $N$; a
#   message costs a latency plus its bytes over a bandwidth, so small messages are slow per
#   byte and buckets pay.
# - Data parallelism gives each process a share of the batch and averages the gradients: the
#   gradients equal one process's on the whole batch to rounding, the weights are the same
#   on every process to the bit, and PyTorch's `DistributedDataParallel` computes the same
#   bits with two processes (with four, equal but for the last bits).
# - ZeRO-1 splits AdamW's moments ($8 + 8/N$ bytes a parameter), ZeRO-3 everything
#   ($16/N$), for the same weights.
# - Gradient accumulation is the same step in one process, when the shares count as many
#   tokens; a loader splits each epoch between the processes, and `DistributedSampler`
#   pads (a few samples seen twice) or drops (a few not seen) to make the shares equal.
# - `torchrun` starts, and restarts, the processes of one machine or several; with the
#   book's checkpoints a restarted run ends with the weights of one never interrupted.
# - Two processes on 2 cores are not twice as fast as one doing the same work. Section 15.7
#   splits the shortfall into its parts: AdamW's step, repeated in every process; the wait
#   for the last buckets; and each share's forward and backward, slower beside the other
#   process, which the run splits into more time on a core and time waiting for one
#   (wall time less CPU time). After backward, the buckets were waited for a shorter time
#   than one all-reduce per parameter: fewer latencies. Whether sending them during
#   backward hid anything, section 15.7 says from the run: the all-reduces need a core
#   too.

# %% tags=["remove-cell", "nbval-check-output"]
print(lessons.verdicts())

# %% [markdown]
# ## Exercises
#
# The exercises run their processes as threads of this kernel: `send`, `recv` and
# `all_gather` are given, and behave as `torch.distributed`'s would between processes.
#
# ### Exercise 1. A ring all-reduce from send and recv (implement)
#
# Write `ring_all_reduce(tensor, rank, world_size, send, recv)`: `tensor` is this rank's 1-D
# float tensor, the same size on every rank. Return the sum of all ranks' tensors, by the
# ring of section 15.2: cut it into `world_size` chunks (`tensor.tensor_split`), a
# reduce-scatter in `world_size - 1` steps, then an all-gather in as many, each step sending
# one chunk to rank `(rank + 1) % world_size` and receiving one from rank `(rank - 1) %
# world_size`. `send(t, to)` sends a copy of `t` without waiting; `recv(t, source)` waits
# for the next message from `source` and writes it into `t`. The checker reads the messages
# too: only to the next rank, one chunk a step (2(N - 1)/N of the tensor from each, on
# average when the chunks differ in size), and the same bits on every rank at the end. Any
# ring passes, whichever chunk's sum each rank holds after the reduce-scatter.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def ring_all_reduce(tensor, rank, world_size, send, recv):
    chunks = tensor.clone().tensor_split(world_size)  # views of one copy
    after, before = (rank + 1) % world_size, (rank - 1) % world_size
    for step in range(world_size - 1):  # reduce-scatter: rank r ends with chunk r's sum
        send(chunks[(rank - step - 1) % world_size], after)
        incoming = chunks[(rank - step - 2) % world_size]
        received = torch.empty_like(incoming)
        recv(received, before)
        incoming += received
    for step in range(world_size - 1):  # all-gather: pass each finished chunk on
        send(chunks[(rank - step) % world_size], after)
        recv(chunks[(rank - step - 1) % world_size], before)
    return torch.cat(chunks)


# %%
from gpt_from_scratch.exercises import check_ring_all_reduce
check_ring_all_reduce(ring_all_reduce);

# %% [markdown]
# ### Exercise 2. A ZeRO-1 step (implement)
#
# Write a class `ZeRO1(weights, rank, world_size, **adamw)`: `weights` is a flat parameter
# vector $(P,)$, the same on every rank, which this rank owns chunk `rank` of
# (`weights.tensor_split(world_size)`). `step(grad, all_gather)` takes the mean gradient
# $(P,)$, the same on every rank, steps AdamW (`torch.optim.AdamW(..., **adamw)`) on this
# rank's chunk only, then writes every rank's updated chunk into `weights`:
# `all_gather(t)` returns the list of every rank's `t`, in rank order: call it once a step,
# with this rank's updated chunk. Keep no tensor larger than a chunk besides `weights`, and
# AdamW's state for this rank's chunk only.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
class ZeRO1:
    def __init__(self, weights, rank, world_size, **adamw):
        self.weights, self.rank, self.world_size = weights, rank, world_size
        mine = weights.detach().tensor_split(world_size)[rank]
        self.chunk = torch.nn.Parameter(mine.clone())  # (P / N,): this rank's run
        self.optimizer = torch.optim.AdamW([self.chunk], **adamw)  # moments for it only

    def step(self, grad, all_gather):
        self.chunk.grad = grad.tensor_split(self.world_size)[self.rank].clone()
        self.optimizer.step()
        self.chunk.grad = None
        with torch.no_grad():
            self.weights.copy_(torch.cat(all_gather(self.chunk.detach())))


# %%
from gpt_from_scratch.exercises import check_zero1
check_zero1(ZeRO1);

# %% [markdown]
# ### Exercise 3. A data-parallel step, checked against one process (implement)
#
# Write `data_parallel_step(replicas, optimizers, x, y)`: `replicas` are $N$ copies of one
# model (the same weights), each with its optimizer; `x` and `y` are a batch of $B$ rows,
# $N$ dividing $B$. Do in one process what $N$ processes would: replica $r$ computes the
# loss on its share of the rows (`replica(x_r, y_r)` returns `(logits, loss)`) and its
# gradients; then every replica's gradients become their mean over the replicas, and every
# optimizer steps and zeroes its gradients. The checker records the rows each replica's
# forward receives (replica $r$: rows $rB/N$ to $(r+1)B/N$, no others), and compares the
# replicas, after a few steps, with one model trained on the whole batch.

# %% tags=["solution", "hide-input"] mystnb={"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
def data_parallel_step(replicas, optimizers, x, y):
    N = len(replicas)
    for replica, xs, ys in zip(replicas, x.chunk(N), y.chunk(N)):
        replica(xs, ys)[1].backward()
    for params in zip(*(r.parameters() for r in replicas)):  # one parameter, N copies
        mean = torch.stack([p.grad for p in params]).mean(0)  # the all-reduce, / N
        for p in params:
            p.grad = mean.clone()
    for optimizer in optimizers:
        optimizer.step()
        optimizer.zero_grad()


# %%
from gpt_from_scratch.exercises import check_data_parallel_step
check_data_parallel_step(data_parallel_step);

# %% [markdown] tags=["quiz"]
# ## Check yourself
#
# A few questions on this chapter, each answer with its explanation. The numbers in them
# are the ones this chapter printed.

# %% tags=["quiz", "remove-input"]
from gpt_from_scratch.book.quiz import Choice, MultipleChoice, Numeric, show_quiz
xl_gb = sizes["gpt2-xl"][1]
show_quiz([
    Numeric("How many bytes a parameter does training with AdamW in 32-bit floats keep, "
            "before activations?", 16, 0.5,
            "4 for the weight, 4 for the gradient, 8 for AdamW's two moments."),
    Numeric("How many GB does one device need for GPT-2 XL's training state, in 32-bit "
            "floats? (One decimal.)", xl_gb, 0.06,
            f"{sizes['gpt2-xl'][0]:,} parameters times 16 bytes, and 4 bytes per tensor "
            "for AdamW's step counts."),
    MultipleChoice("A ring all-reduce of n numbers among N processes: how many numbers "
                   "does each process send?", [
        Choice("2(N - 1)/N times n: less than 2n however large N is", True,
               "N - 1 steps of reduce-scatter and N - 1 of all-gather, one chunk of n/N "
               "each."),
        Choice("(N - 1) times n: every other process needs its tensor", False,
               "That is the naive exchange; the ring passes partial sums along instead."),
    ]),
    MultipleChoice("Two processes of data parallelism end a step with the same weights, to "
                   "the bit. Why?", [
        Choice("the all-reduce gives both the same gradient bits, and AdamW computes the "
               "same step from the same weights and gradients", True,
               "Yes: they were equal at the start (the broadcast) and every step keeps "
               "them so; no one compares them."),
        Choice("a second all-reduce averages the weights after each step", False,
               "Only the gradients are reduced; averaging weights would cost a second "
               "all-reduce for nothing."),
    ]),
    Numeric("How many times as fast as one process (doing the same work by gradient "
            "accumulation) were two processes on this machine's 2 cores? (One decimal.)",
            round(speedup, 1), 0.051,
            "Section 15.7: the median, over the rounds, of a step's time alone over its "
            "time together."),
    MultipleChoice("With 10 samples on 4 processes, what does DistributedSampler do by "
                   "default (drop_last=False)?", [
        Choice("it pads the list with its first indices: 2 samples are seen twice", True,
               "So every process gets 3; drop_last=True would give 2 each and leave 2 "
               "samples out of the epoch."),
        Choice("it gives the last process 1 sample", False,
               "Every process must take the same number of steps, or one would wait in an "
               "all-reduce that the others never start."),
    ]),
])
