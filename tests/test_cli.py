"""The `lmtransfer` command line."""

import pytest

from lmtransfer.cli import main


def test_summary_prints_the_reference_parameter_counts(capsys):
    main(["summary", "--vocab-size", "100", "--d-model", "200", "--n-layers", "4", "--n-heads", "2",
          "--d-ff", "200", "--n-classes", "2"])
    out = capsys.readouterr().out
    assert "classifier total" in out and "988,402" in out
    assert "language model total" in out and "1,008,100" in out
    assert "= base" in out and "988,000" in out


def test_summary_for_the_original_french_vocabulary(capsys):
    main(["summary", "--vocab-size", "50001"])
    out = capsys.readouterr().out
    assert "10,968,602" in out and "21,018,401" in out


def test_summary_rejects_heads_that_do_not_divide_the_width():
    with pytest.raises(SystemExit, match="--n-heads"):
        main(["summary", "--d-model", "200", "--n-heads", "3"])


def test_generate_without_a_checkpoint_names_the_missing_file(tmp_path):
    with pytest.raises(SystemExit, match="nothing.pt"):
        main(["generate", "hello", "--checkpoint", str(tmp_path / "nothing.pt")])
