"""The stage wrapper: one clear line for expected problems, named after the stage that ran."""

from __future__ import annotations

import pytest

from lmtransfer.errors import ConfigError, DeviceError, LmtransferError, MissingOutputError
from lmtransfer.stage import stage_main


def test_a_stage_named_by_its_arguments_says_which_one_finished(capsys):
    @stage_main(lambda: "finetune_scratch@2")
    def main() -> None:
        pass

    main()
    assert capsys.readouterr().out.startswith("finetune_scratch@2: done in ")


@pytest.mark.parametrize("error", [ConfigError("model.d_model: bad"), MissingOutputError("x: not found"),
                                   DeviceError("train.device='cuda' but no CUDA device is available")])
def test_expected_problems_are_one_line_and_exit_status_1(capsys, monkeypatch, error):
    monkeypatch.delenv("LMTRANSFER_DEBUG", raising=False)

    @stage_main("pretrain")
    def main() -> None:
        raise error

    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"pretrain: error: {error}\n"


def test_a_bug_keeps_its_traceback():
    @stage_main("plot")
    def main() -> None:
        raise KeyError("a bug, not a user problem")

    with pytest.raises(KeyError):
        main()


def test_every_expected_error_shares_one_base():
    import lmtransfer.errors as errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert all(issubclass(c, LmtransferError) for c in classes)
