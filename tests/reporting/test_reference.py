"""Per CPU vendor references: saved from a run's metrics, refused for metrics another CPU produced, compared."""

import json

import pytest

from lmtransfer.core.errors import LmtransferError
from lmtransfer.reporting.pages import generate
from lmtransfer.reporting.reference import TRANSLATION, comparison_lines, references, save_reference

AMD = {"cpu_vendor": "AuthenticAMD", "cpu_model": "AMD EPYC 9R14"}
INTEL = {"cpu_vendor": "GenuineIntel", "cpu_model": "Intel(R) Xeon(R) Processor"}
HEADLINE = {"pretrained": 0.66, "scratch": 0.62, "gap": 0.04, "gap_low": 0.01, "gap_high": 0.07,
            "p_value": 0.01, "head_start": 0.05, "baseline": 0.8}


def _metrics(tmp_path, cpu_model: str, headline: dict = HEADLINE):
    metrics = tmp_path / "metrics"
    metrics.mkdir(exist_ok=True)
    report = {"n_pretraining_runs": 3, "n_finetuning_seeds": 1, "pretraining": {"cpu_model": cpu_model},
              "pretrained": {"accuracy_per_seed": [0.65, 0.66, 0.67]},
              "scratch": {"accuracy_per_seed": [0.61, 0.62, 0.63]}}
    (metrics / "evaluate.json").write_text(json.dumps(report))
    (metrics / "headline.json").write_text(json.dumps(headline))
    return metrics


def test_a_reference_is_saved_per_vendor_and_shown_as_a_docs_table(tmp_path):
    path = save_reference(AMD, _metrics(tmp_path, AMD["cpu_model"]), tmp_path)
    assert path == tmp_path / "results/reference/AuthenticAMD.json"
    saved = references(tmp_path)["AuthenticAMD"]
    assert saved["cpu_model"] == "AMD EPYC 9R14" and saved["headline"] == HEADLINE
    assert saved["pretrained_per_run"] == [0.65, 0.66, 0.67]
    table = generate("vendor-references", tmp_path).splitlines()
    assert table[2] == ("| AuthenticAMD (AMD EPYC 9R14) | 3 × 1 | 0.6600 | 0.6200 | +0.0400 [+0.0100, +0.0700] | "
                        "0.6500, 0.6600, 0.6700 | 0.6100, 0.6200, 0.6300 |")


def test_metrics_another_cpu_produced_are_not_saved_as_this_vendors_reference(tmp_path):
    with pytest.raises(LmtransferError, match="produced on 'AMD EPYC 9R14', but this machine is 'Intel"):
        save_reference(INTEL, _metrics(tmp_path, AMD["cpu_model"]), tmp_path)
    assert not (tmp_path / "results").exists()


def test_a_rerun_is_compared_with_its_own_vendor_first_and_told_whether_its_gap_is_inside(tmp_path):
    save_reference(AMD, _metrics(tmp_path, AMD["cpu_model"]), tmp_path)
    rerun = {**HEADLINE, "pretrained": 0.70, "gap": 0.08}
    lines = comparison_lines(rerun, AMD, references(tmp_path))
    assert lines[0] == "this run: AMD EPYC 9R14 (AuthenticAMD)"
    assert "    0.7000          0.6600  +0.0400" in lines[2]
    assert lines[-1] == "the gap +0.0800 is OUTSIDE the AuthenticAMD reference's 95% interval [+0.0100, +0.0700]"
    assert comparison_lines(HEADLINE, INTEL, references(tmp_path))[-1].startswith("no reference for GenuineIntel")
    assert comparison_lines(HEADLINE, INTEL, {})[0].startswith("no reference saved yet")


@pytest.mark.parametrize("content, message", [
    ("{}", "no 'headline' object"),
    ('{"headline": {"gap": "high"}}', "headline.pretrained is missing or not a number"),
    ('{"headline": ', "not a readable reference"),
    ("[1, 2]", "no 'headline' object"),
])
def test_a_broken_reference_file_is_named_with_what_to_do(tmp_path, content, message):
    folder = tmp_path / "results/reference"
    folder.mkdir(parents=True)
    (folder / "GenuineIntel.json").write_text(content)
    with pytest.raises(LmtransferError) as info:
        references(tmp_path)
    assert str(info.value).startswith(f"{folder / 'GenuineIntel.json'}: ") and message in str(info.value)
    assert "--save-reference" in str(info.value)


def test_the_translation_pipeline_keeps_its_own_references_with_its_own_headline(tmp_path):
    """translation/reference/<vendor>.json: BLEU per run, the BLEU gap's interval; a classification reference
    beside it is neither read nor needed."""
    metrics = tmp_path / "translation/metrics"
    metrics.mkdir(parents=True)
    headline = {"bleu_pretrained": 6.1, "bleu_scratch": 5.2, "gap": 0.9, "ci95_low": 0.2, "ci95_high": 1.6,
                "chrf_pretrained": 24.0, "n_seeds": 3, "n_pretraining_runs": 3}
    report = {"pretraining": {"cpu_model": INTEL["cpu_model"]}, "pretrained": {"bleu_per_seed": [6.0, 6.1, 6.2]},
              "scratch": {"bleu_per_seed": [5.1, 5.2, 5.3]}}
    (metrics / "evaluate.json").write_text(json.dumps(report))
    (metrics / "headline.json").write_text(json.dumps(headline))
    path = save_reference(INTEL, metrics, tmp_path, pipeline=TRANSLATION)
    assert path == tmp_path / "translation/reference/GenuineIntel.json"
    saved = references(tmp_path, TRANSLATION)
    assert saved["GenuineIntel"]["command"] == "make run-translation" and saved["GenuineIntel"]["n_runs"] == 3
    assert references(tmp_path) == {}  # the classification references are another folder
    lines = comparison_lines({**headline, "gap": 2.0}, INTEL, saved, TRANSLATION)
    assert any(line.startswith("  bleu_pretrained") for line in lines)
    assert lines[-1] == "the gap +2.0000 is OUTSIDE the GenuineIntel reference's 95% interval [+0.2000, +1.6000]"
