"""What `lmtransfer course` runs for the files present, its time estimate, and the lab's table it prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from lmtransfer.cli.experiments import PROFILES, overlaid_params, profile_changes, profile_command
from lmtransfer.course import experiment as course
from lmtransfer.course.files import LANGUAGE_MODEL, PINNED, PRETRAINING_TEXT

REPO = Path(__file__).resolve().parents[2]
PROFILE = profile_changes(REPO / PROFILES / "course.yaml")


def test_the_course_recipe_is_the_courses_network_and_schedule_on_its_files():
    params = overlaid_params(REPO, PROFILE)
    assert (params.model.n_layers, params.model.d_model, params.model.n_heads, params.model.d_ff) == (4, 200, 2, 200)
    assert params.model.embedding_init == "uniform"
    finetune = params.finetune
    assert (finetune.batch_size, finetune.lr, finetune.schedule, finetune.warmup_steps, finetune.weight_decay,
            finetune.grad_clip, finetune.head_lr_multiplier, finetune.pooling, finetune.max_len) == (
        8, 0.0003, "constant", 0, 0.0, 0.5, 1.0, "last", 512)
    assert len(params.pretrain.seeds) * len(finetune.seeds) >= 3  # at least 3 runs per variant
    data = params.data
    spm = {f"data/course/{f.path}" for f in PINNED if f.path.endswith(".review.spm")}
    assert {data.train, data.valid, data.test} == spm
    assert data.corpus == ["data/course/bible-fr.txt"]
    with pytest.raises(ValueError, match="finetune.epochs"):  # a bad value, before any work (a bad key: tests/cli)
        overlaid_params(REPO, PROFILE + ["finetune.epochs=-1"])


def test_the_courses_language_model_is_loaded_when_present_and_its_fine_tunes_are_the_replicates():
    plan = course.plan_for({LANGUAGE_MODEL: Path("x.pt"), PRETRAINING_TEXT: Path("y.txt")}, [])
    assert f"pretrain.init_from=data/course/{LANGUAGE_MODEL}" in plan.changes
    assert "pretrain.seeds=[0]" in plan.changes and "finetune.seeds=[0,1,2]" in plan.changes
    assert not plan.write_bible
    command = profile_command("course", PROFILE + plan.changes)
    assert command[:5] == ["dvc", "exp", "run", "-n", "course"]
    assert command[-2 * len(plan.changes):][1::2] == plan.changes  # after the profile's: they win


def test_without_the_model_the_courses_text_is_the_corpus_else_the_pinned_bibles(tmp_path):
    text = tmp_path / PRETRAINING_TEXT
    text.write_text("▁Le ▁livre ▁est ▁bon\n▁Un ▁roman\n", encoding="utf-8")
    plan = course.plan_for({PRETRAINING_TEXT: text}, [])
    assert plan.changes == [f"data.corpus=[data/course/{PRETRAINING_TEXT}]", "data.corpus_format=pieces"]
    assert overlaid_params(REPO, PROFILE + plan.changes).data.corpus == [f"data/course/{PRETRAINING_TEXT}"]
    text.write_text("Le livre est bon.\nUn roman.\n", encoding="utf-8")
    assert course.text_format(text) == "text"
    bible = course.plan_for({}, [])
    assert bible.write_bible and bible.changes == []
    mine = course.plan_for({}, ["finetune.seeds=[3,4,5]"])
    assert profile_command("course", PROFILE + mine.changes)[-2:] == ["-S", "finetune.seeds=[3,4,5]"]


def test_the_estimate_counts_pretraining_only_when_it_runs():
    params = overlaid_params(REPO, PROFILE)
    here = course.estimate_minutes(params, train_tokens=205_615)
    loaded = overlaid_params(REPO, PROFILE + course.plan_for({LANGUAGE_MODEL: Path("x.pt")}, []).changes)
    assert loaded.pretrain.init_from == f"data/course/{LANGUAGE_MODEL}" and loaded.finetune.seeds == [0, 1, 2]
    assert 20 < here < 240  # "about an hour" on 2 cores
    pretrain = params.pretrain  # each run: its corpus steps, then its adaptation epochs over the train texts
    per_run = pretrain.max_steps * pretrain.batch_size * pretrain.seq_len + pretrain.adapt_epochs * 205_615
    pretraining = len(pretrain.seeds) * per_run / course.PRETRAIN_TOKENS_PER_S / 60
    assert abs(here - course.estimate_minutes(loaded, 205_615) - pretraining) < 0.01  # the same 6 fine-tunes either way


def _report() -> dict:
    def variant(first: float, accuracy: float) -> dict:
        return {"val_accuracy_mean_per_epoch": [first, accuracy], "val_accuracy_std_per_epoch": [0.01, 0.02],
                "accuracy_mean": accuracy, "accuracy_std": 0.005}

    return {"pretrained": variant(0.75, 0.83), "scratch": variant(0.5, 0.78), "n_seeds": 3, "n_pretraining_runs": 3,
            "n_finetuning_seeds": 1, "n_test_examples": 2000, "baseline": {"accuracy": 0.837},
            "gap": {"accuracy_mean": 0.05, "ci95_low": 0.02, "ci95_high": 0.08, "p_value": 0.001}}


def test_the_lab_table_has_each_epoch_the_test_gap_the_baseline_and_the_courses_numbers():
    lines = course.lab_lines(_report())
    text = "\n".join(lines)
    assert "      1    0.750 ± 0.010    0.500 ± 0.010      +0.250" in lines
    assert "      2    0.830 ± 0.020    0.780 ± 0.020      +0.050" in lines
    assert "gap         +0.0500, 95% interval [+0.0200, +0.0800], p = 0.001" in text
    assert "0.8370" in text and course.PUBLISHED["scratch_test"] in text and course.PUBLISHED["first_epoch"] in text


def test_the_guides_schedule_line_is_the_course_recipes_but_for_its_epochs_and_batches():
    """docs/guide/course.md's `-S` schedule is profiles/course.yaml's but for 8 epochs and bucketed batches."""
    import re
    import shlex

    page = (REPO / "docs" / "guide" / "course.md").read_text(encoding="utf-8")
    words = shlex.split(re.search(r"```bash\n(dvc exp run .*?)\n```", page, re.S).group(1))
    pairs = [words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-S"]
    schedule = {key.removeprefix("finetune."): YAML(typ="safe").load(value) for key, value in pairs}
    recipe = overlaid_params(REPO, PROFILE).finetune.model_dump()
    differ = {key for key, value in schedule.items() if recipe[key] != value}
    assert differ == {"epochs", "batches"}
    assert (recipe["epochs"], recipe["batches"]) == (8, "bucketed")
    assert "8 epochs and bucketed batches" in " ".join(page.split())


@pytest.mark.parametrize("profile", sorted(p.stem for p in (REPO / PROFILES).glob("*.yaml")))
def test_each_profile_overlays_params_yaml_with_the_values_it_names(profile):
    """`dvc exp run -S` reads each value back as the profile's YAML holds it (lists, quoted words, floats)."""
    raw = YAML(typ="safe").load((REPO / PROFILES / f"{profile}.yaml").read_text())
    params = overlaid_params(REPO, profile_changes(REPO / PROFILES / f"{profile}.yaml")).model_dump()
    for section, values in raw.items():
        for key, value in values.items():
            assert params[section][key] == value, f"profiles/{profile}.yaml: {section}.{key}"
