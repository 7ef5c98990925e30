# One command to set up and run everything:  make run   |   make test   |   make ui   |   make docs
# The virtual environment is built once (.venv) and rebuilt when the requirements change.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Python caches each module it compiles (__pycache__), as it does by default: with PYTHONDONTWRITEBYTECODE=1 (set
# in many container images) every stage process would compile torch, MLflow and pandas anew, over half of a small
# stage's time
unexport PYTHONDONTWRITEBYTECODE
UI_PORT ?= 5000

.PHONY: help venv run run-translation course gpu-profiles serve test test-fast lint ui docs summary scaling profile-large bench bench-corpus
.DEFAULT_GOAL := help

## every target with what it does (this list)
help:
	@awk '/^## /{doc = doc (doc ? " " : "") substr($$0, 4); next} /^[a-z][a-z-]*:/{split($$0, t, ":"); if (doc) printf "  make %-16s %s\n", t[1], doc; doc = ""; next} !/\?=/{doc = ""}' $(MAKEFILE_LIST)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "make venv: $(PYTHON) is Python " + sys.version.split()[0] + "; lmtransfer needs Python >= 3.11 (the pinned numpy, pandas and scipy): PYTHON=python3.11 make ...")'
	$(PYTHON) -m venv $(VENV)
	@echo "installing pinned dependencies into $(VENV) (first time: a minute or two)"
	@# --no-compile: Python compiles a module the first time it is imported, so only what runs is compiled
	@# (compiling every installed file up front is over half of this step's time on 2 cores)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -e .
	@touch $(STAMP)

## the virtual environment (.venv) with the pinned requirements; every other target builds it first
venv: $(STAMP)

## run the whole pipeline on the built-in data, then show the results
run: venv
	$(BIN)/lmtransfer params --check params.yaml
	dvc repro
	@# the registry's @champion, also when dvc skipped an unchanged evaluate (a fresh clone: a new MLflow store)
	$(BIN)/lmtransfer register
	@echo; lmtransfer results; echo
	@echo "figures: plots/*.png | sample generations: metrics/pretrain/seed*/samples.txt | MLflow UI: make ui"

## the translation pipeline (English->French, pretrained vs scratch; its time on 2 CPU cores: README)
run-translation: venv
	$(BIN)/lmtransfer params --check translation/params.yaml
	dvc repro translation/dvc.yaml
	@echo; lmtransfer results --translation; echo
	@echo "figures: translation/plots/*.png | test translations: translation/metrics/evaluate/test_translations.tsv"

## lab 2 of the ALTEGRAD course on its own files: fetched at a pinned commit and checked, pretrained against scratch
## as the DVC experiment `course` (profiles/course.yaml), the lab's table (COURSE_FROM=folder copies them from a
## clone instead; time on 2 CPU cores: docs/guide/course.md)
COURSE_FROM ?=
course: venv
	$(BIN)/lmtransfer course $(if $(COURSE_FROM),--from $(COURSE_FROM))

## the two GPU profiles on the IMDB reviews: the reviews once (IMDB_FROM=archive or aclImdb/ folder: a local copy),
## then profiles/reviews.yaml and profiles/imdb.yaml queued as DVC experiments and run (docs/guide/gpu-profiles.md)
IMDB_FROM ?=
gpu-profiles: venv
	$(BIN)/lmtransfer imdb $(if $(IMDB_FROM),--from $(IMDB_FROM))
	$(BIN)/lmtransfer profile reviews --queue
	$(BIN)/lmtransfer profile imdb --queue
	dvc exp run --run-all
	@echo; lmtransfer compare

## the test suite: unit tests and end-to-end dvc repro runs on tiny data, two at a time (pytest-xdist), then
## the few that measure the machine's CPU (marked quiet), alone
test: venv
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder -m "not quiet"
	$(BIN)/python -m pytest -m quiet

## the linter: ruff with the rules of pyproject.toml (sorted imports, unused and undefined names, ...)
lint: venv
	$(BIN)/ruff check src stages benchmarks tests

## unit tests only (skips the end-to-end pipeline test)
test-fast: venv
	$(BIN)/python -m pytest -n 2 -m "not slow"

## MLflow UI on the project's store at http://127.0.0.1:5000 (UI_PORT=5001 make ui for another port)
ui: venv
	@$(BIN)/python -c 'from lmtransfer.harness.tracking import ui_lines; print(*ui_lines("http://127.0.0.1:$(UI_PORT)"), sep="\n")'
	@echo "  (each task's runs table: '?workflowType=machine_learning' is MLflow 3's 'Model training' switch)"
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db --port $(UI_PORT)

## serve the registered champion (evaluate's pick, on validation) on http://127.0.0.1:5001: POST /invocations with
## {"dataframe_split": {"columns": ["text"], "data": [["a wonderful film"]]}} (SERVE_MODEL=models:/NAME@ALIAS for another)
SERVE_PORT ?= 5001
SERVE_MODEL ?= models:/lmtransfer-classification@champion
serve: venv
	MLFLOW_TRACKING_URI=sqlite:///$(CURDIR)/mlflow.db $(BIN)/mlflow models serve -m "$(SERVE_MODEL)" --env-manager local --host 127.0.0.1 --port $(SERVE_PORT)

## the generated tables, stated numbers and figures of README.md and docs/: results from the result files, figures from the plots, parameters from the params models
docs: venv
	$(BIN)/lmtransfer report
	$(BIN)/lmtransfer params --readme docs/guide/parameters.md

## the parameter table of the model params.yaml configures, block by block
summary: venv
	$(BIN)/lmtransfer summary

## the pretraining scaling study: the pipeline at these multiples of today's pretraining, queued through DVC
## (3 seeds each), then results/scaling/summary.json and scaling.png; budgets already run are kept
BUDGETS ?= 0.125 0.25 0.5 1 2 4 8
scaling: venv
	$(BIN)/lmtransfer scaling --budgets $(BUDGETS)

## the large profile (profiles/large.yaml), for a GPU or hours of CPU: a 6-layer, d=256 model, 2 passes over the
## corpus, a longer adaptation on the task's texts, run as the DVC experiment `large` (docs/results/classification.md)
profile-large: venv
	$(BIN)/lmtransfer profile large

## benchmarks: tokens/s for a few model sizes side by side; the cost of pinned (reproducible) CPU kernels;
## a stage beside programs that do not yield (run it alone)
bench: venv
	$(BIN)/python benchmarks/throughput.py
	$(BIN)/python benchmarks/cpu_kernels.py
	$(BIN)/python benchmarks/fair_share.py

## memory and speed of validate/prepare/tokenize/pretrain on a generated corpus of CORPUS_MB megabytes (its time and
## disk at 1024: docs/results/speed.md)
CORPUS_MB ?= 1024
bench-corpus: venv
	$(BIN)/python benchmarks/large_corpus.py --size-mb $(CORPUS_MB)
