"""Expected problems: a stage prints `<stage>: error: <message>`, no traceback (a bug keeps its traceback)."""


class LmtransferError(Exception):
    """A problem the user can fix: bad params, bad input files, missing upstream outputs."""


class ConfigError(LmtransferError, ValueError):
    """A parameter problem, phrased for the person editing params.yaml."""


class InputFileError(LmtransferError, ValueError):
    """A file named in params.yaml is missing, empty or unreadable; the message names the key."""


class DataSourceError(InputFileError):
    """A data source could not be read; the message names the file (and line)."""


class SplitError(LmtransferError, ValueError):
    """A split came out unusable (empty, one class, unknown labels)."""


class EmptySplitError(SplitError):
    """A split or the corpus came out empty."""


class TokenizerError(LmtransferError, ValueError):
    """A tokenizer cannot be built or does not fit the data."""


class CheckpointError(LmtransferError, ValueError):
    """A checkpoint that cannot be read, or does not fit the model params.yaml describes."""


class MissingOutputError(LmtransferError, FileNotFoundError):
    """An upstream stage's output is missing: run the pipeline (`dvc repro`)."""


class DeviceError(LmtransferError, RuntimeError):
    """The requested device (train.device) is not available on this machine."""


class TrackingStoreError(LmtransferError, RuntimeError):
    """The MLflow store cannot be used as it is, or a tracking server is down."""
