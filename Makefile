# GPT from Scratch — every entry point. `make test` and `make book` set everything up themselves.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MATHJAX_VERSION := 3.2.2
MATHJAX := .mathjax/dist/mathjax/tex-mml-chtml.js
# The interactive figures draw heatmaps and bars: plotly.js's cartesian bundle (1.5 MB, not the full
# 4.8 MB), of the version plotly.py bundles (book/_ext/plotly_js.py checks it).
PLOTLY_JS_VERSION := 4.1.1
PLOTLY_JS := .plotly/node_modules/plotly.js-cartesian-dist-min/plotly-cartesian.min.js
# The live models (book/_static/live-model.js): ONNX Runtime Web's WebAssembly build,
# served at <site>/ort/, loaded only when a reader presses Run. Only what ort.wasm.min.mjs
# loads on one thread (GitHub Pages has no cross-origin isolation): its Emscripten module
# and the SIMD wasm (14.8 MB; not the JSEP, JSPI or asyncify builds, WebGPU or WebGL).
ORT_WEB_VERSION := 1.31.1
ORT_WEB_FILES := ort.wasm.min.mjs ort-wasm-simd-threaded.mjs ort-wasm-simd-threaded.wasm
ORT_WEB := .ort/dist/ort/ort.wasm.min.mjs
# The book's models as ONNX files (scripts/live_models.py), served at <site>/models/; the
# last one it writes stands for all three.
LIVE_MODELS := .live/models/assistant.onnx

# The corpus: ../shared/data when it is beside the checkout (CI), else the package downloads it.
ifneq ($(wildcard ../shared/data/tinyshakespeare/input.txt),)
export GPT_FROM_SCRATCH_DATA ?= $(abspath ../shared/data)
endif
export PYTHONHASHSEED := 0

# ATEN_CPU_CAPABILITY=avx2 or =default makes this CPU compute as an AVX2 or a portable one would.
# torch.compile's C++ must then be built for that CPU too: inductor builds for this one
# (-march=native) and, with AVX2 forced on an AVX-512 CPU, computes wrong numbers (measured on torch
# 2.13: a compiled GELU-then-softmax off by 1.0, training's first loss nan); with the portable
# kernels forced it does not compile. A reader's own AVX2 or older CPU builds for itself.
CPP_MARCH_avx2 := x86-64-v3
CPP_MARCH_default := x86-64
ifneq ($(CPP_MARCH_$(ATEN_CPU_CAPABILITY)),)
export TORCHINDUCTOR_CPP_MARCH ?= $(CPP_MARCH_$(ATEN_CPU_CAPABILITY))
endif

NOTEBOOK_SOURCES := $(sort $(wildcard notebooks/text/*.py))
NOTEBOOKS := $(patsubst notebooks/text/%.py,notebooks/%.ipynb,$(NOTEBOOK_SOURCES))

.PHONY: help venv test test-unit test-notebooks book link-test browser-test jupyterlab-test pdf test-pdf notebooks jupyter benchmarks clean

help:
	@echo "make test        set up .venv, run pytest (the grader's apart: test-grading), nbval over every notebook"
	@echo "                 (JOBS=4: four processes at once, each on one thread; 2)"
	@echo "                 (a slow machine: CELL_TIMEOUT=2400, seconds a notebook cell may take; 1200)"
	@echo "                 (the book's models are trained once per machine, kept in ~/.cache/gpt_from_scratch;"
	@echo "                 GPT_FROM_SCRATCH_CACHE=\$$(mktemp -d) make test trains them anew)"
	@echo "make book        set up .venv, build the HTML book from the committed notebooks into _build/html"
	@echo "make live-models the models the pages run (chapters 7, 12, 13), ONNX: .live/models"
	@echo "make link-test   build the book, check that every link to its own pages lands on a page and anchor,"
	@echo "                 and that every external link is listed in book/external_links.txt (offline)"
	@echo "make browser-test  the link test, then every page in headless Chromium at 1280 and 390 px (screenshots in _build/screenshots)"
	@echo "make jupyterlab-test  the committed chapters' interactive figures and quizzes in JupyterLab, headless, no cell run"
	@echo "make pdf         the whole book as one PDF (LuaLaTeX) into _build/latex, then checked by scripts/pdf_test.py"
	@echo "make notebooks   re-execute the chapters whose text twin or package changed (commit the outputs)"
	@echo "make jupyter     the chapters' Jupyter and Colab editions, notebooks/jupyter/ (no MyST; make notebooks runs it)"
	@echo "make benchmarks  speed benchmarks, never part of the tests (NANOGPT=DIR: beside nanoGPT)"
	@echo "make student     student copies of every chapter into _build/student"
	@echo "make assign      per chapter: the hand-in notebook and the grader's material, into _build/assign"
	@echo "make grade CHAPTER=04 SUBMISSIONS=dir   grade a folder of notebooks -> _build/grades/04_*.csv"
	@echo "make package     build the wheel and sdist into _build/dist and check them with twine"
	@echo "make test-release  rehearse a release: the wheel from a local index in a fresh venv, every set-up cell"
	@echo "make test-student  run every untouched full student copy top to bottom (make test runs their exercises)"
	@echo "make test-full-run chapters 6, 7 and 9 with FULL_RUN = True on the CPU, tiny GPU recipes"
	@echo "make reference-runs  on a GPU: the full-size reference runs (TINY=1: tiny stand-ins on a CPU, seconds)"
	@echo "make test-oldest the unit tests and chapters 1 and 4 with the oldest versions pyproject.toml allows"
	@echo "make test-grading  the grader's tests: whole classes graded in bubblewrap's sandbox (installed as root)"
	@echo "make test-arithmetic  the training chapters again under PyTorch's AVX2 kernels and one thread"
	@echo "make system-packages  the Debian packages the checks use (bubblewrap, Chromium, TeX), as root"

# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build. So does a pinned one
# from PyPI on Linux (its nvidia-* packages and triton, several GB): TORCH_INDEX names the
# index torch alone comes from, e.g. the CPU wheel's, https://download.pytorch.org/whl/cpu
# (CI and the Pages workflow); empty, pip's own.
TORCH_INDEX ?=
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)

# JOBS processes at once: much of the work (Python, small models) keeps one core busy, not two, so
# two notebooks or test files side by side end sooner than one after the other (a step of Chapter
# 6's model: 37.6 ms alone on two threads, 61 ms each for two side by side). JOBS=4 on a machine
# with four cores to spare; JOBS=1: one process, the files in their order.
JOBS ?= 2
XDIST = $(if $(filter 1,$(JOBS)),,-n $(JOBS) --dist loadfile)
# Each notebook kernel's threads (OMP_NUM_THREADS) under make test, and the book models' training:
# one. Side by side, processes of two threads outnumber the cores and pay for it: two processes
# training Chapter 6's model take 60-61 ms of CPU a step on two threads each (sleeping as they
# wait), 53.5 ms on one; four side by side, 64 ms and 56 ms. A thread count is another
# arithmetic (the committed run used two: THREADS=2 gives its numbers again to the last bit);
# each compared number's tolerance and each lesson's margin were measured on one to four.
THREADS ?= 1
SIDE_BY_SIDE := OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$(THREADS)

# The unit tests beside the book's models and then the chapters, which load them. The models are
# trained once per machine: each is kept in the user's cache, keyed by its recipe, the code that
# trains it, the library versions and the arithmetic (gpt_from_scratch/book/model_cache.py), so a
# second run, a second clone or CI on the same machine reads them, and the chapters start beside
# the unit tests (four processes on two cores fill the gaps each leaves: kernels starting, a
# chapter's last cells alone). GPT_FROM_SCRATCH_CACHE=$$(mktemp -d) make test trains every model
# anew, as a new machine does. -Oline prints the unit tests' report whole when they end, not
# interleaved with the models' and the chapters' lines.
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 -Oline test-unit models-then-notebooks

.PHONY: models-then-notebooks
models-then-notebooks: $(STAMP)
	$(MAKE) --no-print-directory book-models
	$(MAKE) --no-print-directory test-notebooks

# One OpenMP thread per process, one test file to a worker (its fixtures are built once): the DDP
# test runs two processes at once, and two threads fighting for two cores can make a step 30x
# slower (measured: 3,486 ms vs 106 ms for one training step). Not the grader's tests
# (test-grading): they grade whole classes in a sandbox, minutes of their own.
GRADING_TESTS := $(wildcard tests/test_grading*.py)
test-unit: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -rs $(XDIST) $(addprefix --ignore=,$(GRADING_TESTS)) tests

# The grader's tests (CI runs them after make test; run them when you change scripts/grading/,
# scripts/assign.py or an exercise's checks): submissions run in bubblewrap's sandbox, Debian's
# package, installed when missing (needs root, as on CI). Where no sandbox starts
# (bubblewrap missing, or refused its namespaces, as in a container without the
# capabilities it needs) they fail, with the reason; REQUIRE_SANDBOX=0 skips them instead,
# and pytest's summary says so.
REQUIRE_SANDBOX ?= 1
.PHONY: test-grading
test-grading: $(STAMP)
	command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq bubblewrap; } || echo "bubblewrap could not be installed"
	GPT_FROM_SCRATCH_REQUIRE_SANDBOX=$(REQUIRE_SANDBOX) OMP_NUM_THREADS=1 \
		$(PY) -m pytest -rs $(XDIST) $(GRADING_TESTS)

# The models the chapters load from the cache (Chapter 6's two, Chapter 8's offline one and
# Chapter 9's two more seeds of it, Chapter 12's three fine-tuning runs and three more, Chapter 14's ten GRPO runs), each
# trained by a process of its own, so that no chapter run beside another waits for one.
.PHONY: book-models
book-models: $(STAMP)
	mkdir -p _build
	$(SIDE_BY_SIDE) $(PY) scripts/book_models.py --jobs $(JOBS) --threads $(THREADS) \
		--times _build/book-models.json

# Lax mode runs every cell and fails on any error; cells tagged `nbval-check-output` are compared,
# numbers from training within the tolerance their metadata states (notebooks/conftest.py), and
# each chapter's lesson verdicts exactly (gpt_from_scratch.book.lessons). Each chapter runs with
# its student copy's exercises after its own code (scripts/make_student.py --with-chapter): the
# stubs and the cells after them, all that a student copy changes, run as in an untouched copy.
# JOBS notebooks at once, longest first, each kernel on one thread. Not the Jupyter editions
# (notebooks/jupyter/): the same code cells, less the hidden ones. A cell may take CELL_TIMEOUT
# seconds, enough for the longest (Chapter 6 trains its character model in one cell, 242 s on two
# idle AVX-512 cores) on a laptop whose cores are shared, still short enough to catch a hang. PyTorch's
# portable kernels (ATEN_CPU_CAPABILITY=default) are about 3 times slower: CELL_TIMEOUT=2400.
CELL_TIMEOUT ?= 1200
NBVAL := --nbval-lax --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg \
	--nbval-cell-timeout=$(CELL_TIMEOUT) -p no:cacheprovider
NBVAL_PARALLEL := $(XDIST) --no-loadscope-reorder
NBVAL_DIR := _build/nbval
test-notebooks: $(STAMP)
	rm -rf $(NBVAL_DIR)
	$(PY) scripts/make_student.py --with-chapter --out $(NBVAL_DIR) $(NOTEBOOKS) >/dev/null
	cp nbval_sanitize.cfg notebooks/conftest.py $(NBVAL_DIR)/  # conftest: the tolerances, the order
	cd $(NBVAL_DIR) && $(SIDE_BY_SIDE) $(abspath $(PY)) -m pytest $(NBVAL) $(NBVAL_PARALLEL) \
		--junitxml=$(abspath _build/nbval.xml) *.ipynb

# The chapters whose numbers come out of training or score its models (6-9, 11-14), a second time
# under another arithmetic (3, 5 and 10 also differentiate, print the same under AVX2 as under
# AVX-512, and judge no lesson): PyTorch's AVX2 kernels (ARITHMETIC=default: its portable ones,
# about 3 times slower), each model trained under it once per machine (the cache keys every model by
# its kernels and threads: book-models first, then JOBS chapters at once, each kernel on
# ARITHMETIC_THREADS threads:
# ARITHMETIC_THREADS=4 means four, even on two cores: MKL_DYNAMIC would hold torch to one thread a
# core; then use JOBS=1). The committed outputs come from the AVX-512 kernels on one thread, each
# chapter run as make test runs it, with the models make test trains; every compared cell and
# every lesson must hold under both.
ARITHMETIC ?= avx2
ARITHMETIC_THREADS ?= 1
ARITHMETIC_CHAPTERS ?= 06 07 08 09 11 12 13 14 15 16
ARITHMETIC_ENV = ATEN_CPU_CAPABILITY=$(ARITHMETIC) OMP_NUM_THREADS=$(ARITHMETIC_THREADS) MKL_DYNAMIC=FALSE \
	OMP_WAIT_POLICY=PASSIVE \
	$(if $(CPP_MARCH_$(ARITHMETIC)),TORCHINDUCTOR_CPP_MARCH=$(CPP_MARCH_$(ARITHMETIC)))
.PHONY: test-arithmetic
test-arithmetic: $(STAMP)
	mkdir -p _build
	$(ARITHMETIC_ENV) $(PY) scripts/book_models.py --jobs $(JOBS) --threads $(ARITHMETIC_THREADS) \
		--times _build/book-models-$(ARITHMETIC).json
	$(ARITHMETIC_ENV) $(PY) -m pytest $(NBVAL) $(NBVAL_PARALLEL) \
		--junitxml=$(abspath _build/nbval-$(ARITHMETIC).xml) \
		$(foreach c,$(ARITHMETIC_CHAPTERS),$(wildcard notebooks/$(c)_*.ipynb))

$(MATHJAX):
	npm install --silent --no-save --no-audit --no-fund --prefix .mathjax/npm mathjax@$(MATHJAX_VERSION)
	rm -rf .mathjax/dist && mkdir -p .mathjax/dist
	cp -r .mathjax/npm/node_modules/mathjax/es5 .mathjax/dist/mathjax

# sphinxcontrib-bibtex reads references.bib once per environment: after an edit of it, an incremental
# build keeps the old References page (a new entry missing), so the build then starts afresh.
$(PLOTLY_JS):
	npm install --silent --no-save --no-audit --no-fund --prefix .plotly \
		plotly.js-cartesian-dist-min@$(PLOTLY_JS_VERSION)

$(ORT_WEB):
	npm install --silent --no-save --no-audit --no-fund --prefix .ort/npm \
		onnxruntime-web@$(ORT_WEB_VERSION)
	rm -rf .ort/dist && mkdir -p .ort/dist/ort
	cp $(addprefix .ort/npm/node_modules/onnxruntime-web/dist/,$(ORT_WEB_FILES)) .ort/dist/ort/

# Read from the model cache (trained there first where absent: about 4 minutes for Chapter
# 6's model, 3 more for Chapter 12's fine-tuning), exported in about 30 s.
.PHONY: live-models
$(LIVE_MODELS): scripts/live_models.py gpt_from_scratch/*.py gpt_from_scratch/book/*.py \
		| $(STAMP)
	$(SIDE_BY_SIDE) $(PY) scripts/live_models.py --out .live/models
live-models: $(LIVE_MODELS)

book: $(STAMP) $(MATHJAX) $(PLOTLY_JS) $(ORT_WEB) $(LIVE_MODELS)
	@if [ -f _build/html/book/references.html ] && [ book/references.bib -nt _build/html/book/references.html ]; \
		then echo "references.bib changed: building afresh"; rm -rf _build/.doctrees _build/html; fi
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "open _build/html/index.html"

# The book's links (scripts/links.py), offline: every link of the site and of the Jupyter editions
# to the book's own pages lands on a page and an anchor of _build/html (only the built site knows
# Sphinx's anchors, so this is not part of `make test`, which checks the list against the sources:
# tests/test_links.py), and every external link of the site's text is in book/external_links.txt,
# which the Pages workflow checks live. Measured: 4 to 13 s after the book, on two shared cores.
link-test: book
	$(PY) scripts/links.py

# Debian's Chromium and its driver; installed when missing (needs root, as on CI).
CHROMIUM_PACKAGES := chromium chromium-driver
# The site in headless Chromium, under the threads live-models exported with (the page's
# models are compared with theirs, read from the model cache).
browser-test: link-test
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CHROMIUM_PACKAGES); }
	$(SIDE_BY_SIDE) $(PY) scripts/browser_test.py

# Every chapter's Jupyter edition (notebooks/jupyter/) as the venv's JupyterLab (requirements.txt) shows it,
# in headless Chromium (installed as for browser-test): no raw MyST, answers folded, the interactive
# figures (chapters 4, 7, 8) and the quizzes drawn. No cell runs, nothing is fetched from the internet.
# Screenshots in _build/screenshots/jupyterlab.
jupyterlab-test: $(STAMP)
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CHROMIUM_PACKAGES); }
	$(PY) scripts/jupyterlab_test.py

# The PDF edition: Sphinx's LaTeX builder and LuaLaTeX, with Debian's TeX, the fonts the book's text
# needs (DejaVu; WenQuanYi Micro Hei for CJK, Symbola for emoji) and poppler for the test, installed
# when missing (needs root, as on CI; measured: about 3 minutes). The build and the test took 3 min
# 44 s on a busy 2-core machine. --all re-reads every page, so that each chapter's LaTeX carries
# its figure numbering (book/_ext/chapter_figure_numbers.py).
TEX_PACKAGES := texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended \
	texlive-luatex latexmk lmodern fonts-dejavu-core fonts-wqy-microhei fonts-symbola poppler-utils
# Every Debian package the checks above install when missing, at once: CI installs them in the
# background while the venv is built, so that no later step waits for apt or holds its lock.
.PHONY: system-packages
system-packages:
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap $(CHROMIUM_PACKAGES)
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TEX_PACKAGES)

pdf: $(STAMP)
	command -v lualatex >/dev/null && command -v latexmk >/dev/null && command -v pdftotext >/dev/null \
		&& fc-list -q Symbola && fc-list -q "WenQuanYi Micro Hei" && fc-list -q "DejaVu Serif" || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(TEX_PACKAGES); }
	$(BIN)/jupyter-book build . --builder pdflatex --all
	$(PY) scripts/pdf_test.py

test-pdf: $(STAMP)
	$(PY) scripts/pdf_test.py

# Re-execute a chapter from its text twin when the twin or the package changed; then its Jupyter edition.
notebooks: $(NOTEBOOKS)
	$(PY) scripts/jupyter_notebooks.py

# The Jupyter and Colab editions of the committed chapters, notebooks/jupyter/ (tests/test_jupyter_notebooks.py
# fails when they are out of date). Nothing is executed: seconds.
jupyter: $(STAMP)
	$(PY) scripts/jupyter_notebooks.py
notebooks/%.ipynb: notebooks/text/%.py gpt_from_scratch/*.py gpt_from_scratch/book/*.py | $(STAMP)
	$(BIN)/jupytext --to notebook --set-kernel python3 --execute --output $@ $<

benchmarks: $(STAMP)
	$(PY) -m benchmarks

# Student copies for handing out: solution cells become stubs, exercise outputs are cleared.
student: $(STAMP)
	$(PY) scripts/make_student.py --out _build/student

# Every untouched full student copy runs top to bottom (nbval, lax: no cell may raise), as a teacher
# about to hand them out may want to see. `make test` already runs what a copy changes, its
# exercises, after each chapter's own code (test-notebooks), and the static checks and the hand-in
# notebooks (tests/test_student.py, test_grading.py); CI does not run this.
.PHONY: test-student assign grade package
test-student: student
	cp nbval_sanitize.cfg _build/student/
	cp notebooks/conftest.py _build/student/  # the tolerances for numbers from training
	cd _build/student && $(SIDE_BY_SIDE) $(abspath $(PY)) -m pytest $(NBVAL) $(NBVAL_PARALLEL) -q \
		*.ipynb

# Per chapter: the notebook students hand in and the grader's material; creates the course secret
# (outside the repository) when there is none. ROTATE=1 draws a new one; SECRET=path names another.
ROTATE ?=
SECRET ?=
assign: $(STAMP)
	$(PY) scripts/assign.py --out _build/assign $(if $(ROTATE),--rotate-secret) $(if $(SECRET),--secret $(SECRET))

# Grade a folder (or one file) of submissions in a bubblewrap sandbox (installed here when missing):
#   make grade CHAPTER=04 SUBMISSIONS=folder [TESTS=course-cases] [OUT=sheet.csv] [UNSAFE=1]
#     [CANVAS_COLUMN="Week 4 (12345)"]: the assignment's header in your Canvas gradebook export
# Writes the sheet, <sheet>_similarity.csv, <sheet>_canvas.csv and <sheet>_feedback/<student>/.
CHAPTER ?=
SUBMISSIONS ?=
TESTS ?=
OUT ?=
UNSAFE ?=
CANVAS_COLUMN ?=
grade: $(STAMP)
	@test -n "$(CHAPTER)" -a -e "$(SUBMISSIONS)" || { echo "usage: make grade CHAPTER=04 SUBMISSIONS=folder [TESTS=folder] [OUT=file.csv] [UNSAFE=1] [SANDBOXES=1]"; exit 2; }
	@test -n "$(UNSAFE)" || command -v bwrap >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; }
	@ls -d _build/assign/$(CHAPTER)_*/autograder >/dev/null 2>&1 || $(PY) scripts/assign.py $(CHAPTER) --out _build/assign $(if $(SECRET),--secret $(SECRET))
	chapter=$$(basename $$(ls -d _build/assign/$(CHAPTER)_*)) && out=$(or $(OUT),_build/grades/$$chapter.csv) && \
	$(PY) scripts/grade.py "$(SUBMISSIONS)" --autograder _build/assign/$$chapter/autograder --out $$out \
		--feedback $${out%.csv}_feedback --canvas $${out%.csv}_canvas.csv \
		$(if $(TESTS),--tests "$(TESTS)") $(if $(SECRET),--secret "$(SECRET)") $(if $(UNSAFE),--unsafe) \
		$(if $(CANVAS_COLUMN),--canvas-column "$(CANVAS_COLUMN)") $(if $(SANDBOXES),--jobs $(SANDBOXES))

# The package as published: wheel and sdist, checked by twine (metadata, README rendering).
package: $(STAMP)
	rm -rf _build/dist
	$(PY) -m build --outdir _build/dist . >/dev/null
	$(BIN)/twine check --strict _build/dist/*

# The release rehearsed here (tests/test_release.py): the wheel built, served from a local folder as
# PyPI, every chapter's set-up cell run in a fresh venv that has only torch, the installed version
# checked; CITATION.cff validated by cffconvert. 3 min 43 s on two busy cores: apart from `make test`.
.PHONY: test-release
test-release: $(STAMP)
	GPT_FROM_SCRATCH_TEST_RELEASE=1 $(PY) -m pytest -p no:cacheprovider -rs tests/test_release.py

# Colab rehearsal (minutes, run by CI apart from `make test`): a fresh venv with only torch, the package
# installed from this checkout through pyproject.toml, then these chapters run under nbval in it.
COLAB_CHAPTERS ?= 01 04
.PHONY: test-colab
test-colab: $(STAMP)
	GPT_FROM_SCRATCH_TEST_COLAB="$(COLAB_CHAPTERS)" $(PY) -m pytest -p no:cacheprovider -rs tests/test_colab.py

# The online branches of Chapters 8 and 11-14 against GPT-2's real weights, from the Hugging
# Face hub (needs the internet; the Online workflow runs it weekly): tests/test_online.py,
# which fails, never skips, when the weights cannot be loaded or are not GPT-2 small's.
.PHONY: test-online
test-online: $(STAMP)
	GPT_FROM_SCRATCH_TEST_ONLINE=1 $(PY) -m pytest -p no:cacheprovider -rs tests/test_online.py

# Chapters with FULL_RUN = True on the CPU, the GPU-sized recipes shrunk: the branches a reader with a
# GPU switches on (tests/test_full_run.py). Chapter 10's switch changes only sizes, so it is left out.
FULL_RUN_CHAPTERS ?= 06 07 09
.PHONY: test-full-run
test-full-run: $(STAMP)
	GPT_FROM_SCRATCH_TEST_FULL_RUN="$(FULL_RUN_CHAPTERS)" $(PY) -m pytest -p no:cacheprovider -rs tests/test_full_run.py

# The oldest versions pyproject.toml's ranges allow (requirements-oldest.txt), in a venv of their own:
# the unit tests, then chapters 1 and 4 under nbval. Not the grader's tests: the grader is the
# teacher's tool, run from the book's own venv (`make grade`, requirements.txt's pins), never
# under a reader's older libraries; on one worker they were 1,260 of this job's 1,500 s. Measured: about 8 minutes to install (torch 2.4.0
# comes from PyPI as the CUDA build with its nvidia-* packages, about 3 GB), then the tests. No pip
# cache: it would keep a second copy of those 3 GB on a disk that CI shares.
OLDEST_VENV ?= _build/venv-oldest
OLDEST_CHAPTERS ?= notebooks/01_tokens_and_batches.ipynb notebooks/04_attention.ipynb
OLDEST_STAMP := $(OLDEST_VENV)/.installed
.PHONY: oldest-venv test-oldest
$(OLDEST_STAMP): requirements-oldest.txt pyproject.toml
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --no-cache-dir -r requirements-oldest.txt
	$(OLDEST_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# The install alone (mostly downloading): CI starts it in the background while the other tests run.
oldest-venv: $(OLDEST_STAMP)

test-oldest: $(OLDEST_STAMP) _build/nbval_sanitize_oldest.cfg
	$(OLDEST_VENV)/bin/python -c "import torch, transformers, numpy; \
		print('oldest: torch', torch.__version__, 'transformers', transformers.__version__, 'numpy', numpy.__version__)"
	OMP_NUM_THREADS=1 $(OLDEST_VENV)/bin/python -m pytest -p no:cacheprovider $(XDIST) tests \
		--ignore=tests/test_colab.py $(addprefix --ignore=,$(GRADING_TESTS))
	$(OLDEST_VENV)/bin/python -m pytest --nbval-lax --nbval-current-env \
		--nbval-sanitize-with _build/nbval_sanitize_oldest.cfg \
		--nbval-cell-timeout=$(CELL_TIMEOUT) -p no:cacheprovider $(NBVAL_PARALLEL) $(OLDEST_CHAPTERS)

# Older torch lays printed tensors out with other spacing: the oldest job compares outputs without whitespace.
_build/nbval_sanitize_oldest.cfg: nbval_sanitize.cfg
	mkdir -p _build
	{ cat $<; printf '\n[whitespace_layout]\nregex: \\s+\nreplace: \n'; } > $@  # nbval wants "replace: " even when empty

# The book's full-size models, trained once (on a GPU) and shown beside the reader's run: reference/<run>/
# weights and reference/manifest.json, written to $GPT_FROM_SCRATCH_DATA/reference (else the cache),
# where the chapters look. TINY=1: every recipe shrunk to seconds on a CPU, to test the whole path.
TINY ?=
.PHONY: reference-runs
reference-runs: $(STAMP)
	$(PY) scripts/reference_runs.py $(if $(TINY),--tiny)

clean:
	rm -rf _build .pytest_cache
