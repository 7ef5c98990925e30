"""Tokenizers: text or ready-made pieces to ids and back, and the files that store one.

Three id spaces behind one interface: a sentencepiece model trained on the corpus (0 pad, 1 unk, 2 bos, 3 eos,
4 `<mask>`); an existing one (`tokenizer.model_file`, missing specials appended); a fairseq dictionary
(`tokenizer.vocab_file`: 0 `<sos>`, 1 `<pad>`, 2 `<eos>`, 3 `<oov>`, then its pieces), cut by `model_file`.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import sentencepiece as spm

from lmtransfer.core.config import TokenizerParams
from lmtransfer.core.errors import MissingOutputError, TokenizerError
from lmtransfer.core.io import how_to_produce
from lmtransfer.core.paths import TOKENIZED
from lmtransfer.data.input_files import resolve_input
from lmtransfer.data.normalize import PIECE_SPACE

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3  # of a tokenizer this project trains
MASK_PIECE = "<mask>"
MODEL_FILE = "spm.model"
DICTIONARY_FILE = "dict.txt"
DICTIONARY_SPECIALS = ("<sos>", "<pad>", "<eos>", "<oov>")
FAIRSEQ_OVERWRITE = "#fairseq:overwrite"
VOCAB_LISTING = "vocab.txt"


class Tokenizer:
    """Raw text or ready-made pieces -> ids, and ids -> text."""

    vocab_size: int
    pad_id: int
    unk_id: int
    bos_id: int
    eos_id: int
    scheme: str

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def piece_id(self, piece: str) -> int:
        raise NotImplementedError

    def pieces_to_ids(self, line: str) -> list[int]:
        """A line of space-separated pieces, not re-tokenized."""
        return [self.piece_id(piece) for piece in line.split()]

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def special_ids(self) -> dict[str, int]:
        return {"pad_id": self.pad_id, "unk_id": self.unk_id, "bos_id": self.bos_id, "eos_id": self.eos_id}


class SentencePieceTokenizer(Tokenizer):
    """A sentencepiece model; special ids it does not define are appended after its pieces."""

    scheme = "sentencepiece"

    def __init__(self, model_bytes: bytes, origin: str = "sentencepiece model"):
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=model_bytes)
        except (RuntimeError, TypeError) as exc:
            raise TokenizerError(f"{origin}: not a sentencepiece model ({exc})") from None
        self.model_bytes = model_bytes
        size = self.sp.get_piece_size()
        ids = {"pad": self.sp.pad_id(), "unk": self.sp.unk_id(), "bos": self.sp.bos_id(), "eos": self.sp.eos_id()}
        missing = [name for name, value in ids.items() if value < 0]
        self.appended = {name: size + index for index, name in enumerate(missing)}
        ids.update(self.appended)
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = ids["pad"], ids["unk"], ids["bos"], ids["eos"]
        self.vocab_size = size + len(self.appended)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def piece_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode([i for i in ids if i < self.sp.get_piece_size()])

    def pieces(self) -> list[str]:
        own = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        return own + [f"<{name}>" for name in self.appended]


class DictionaryTokenizer(Tokenizer):
    """A fairseq dictionary as the id space; an optional sentencepiece model segments raw text."""

    scheme = "dictionary"

    def __init__(self, pieces: list[str], segmenter: SentencePieceTokenizer | None = None):
        self.entries = list(DICTIONARY_SPECIALS) + pieces
        self.ids = {piece: index for index, piece in enumerate(self.entries)}
        self.bos_id, self.pad_id, self.eos_id, self.unk_id = range(4)
        self.vocab_size = len(self.entries)
        self.segmenter = segmenter

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.segmenter is None:
            raise TokenizerError("raw text needs tokenizer.model_file to be cut into the dictionary's pieces")
        return [[self.piece_id(p) for p in pieces] for pieces in self.segmenter.sp.encode(texts, out_type=str)]

    def piece_id(self, piece: str) -> int:
        return self.ids.get(piece, self.unk_id)

    def decode(self, ids: list[int]) -> str:
        pieces = [self.entries[i] for i in ids if 4 <= i < self.vocab_size]
        return "".join(pieces).replace(PIECE_SPACE, " ").strip()

    def pieces(self) -> list[str]:
        return self.entries


def read_fairseq_dictionary(path: Path) -> list[str]:
    """`<piece> <count>` per line (optionally flagged `#fairseq:overwrite`); pieces in file order."""
    pieces: list[str] = []
    seen: dict[str, int | str] = dict.fromkeys(DICTIONARY_SPECIALS, "reserved")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{path}, line {number}"
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise TokenizerError(f"{where}: not UTF-8 text ({exc.reason}) (tokenizer.vocab_file)") from None
            fields = line.split(" ")
            overwrite = fields[-1] == FAIRSEQ_OVERWRITE
            fields = fields[:-1] if overwrite else fields
            if len(fields) != 2 or not fields[0] or not fields[1].lstrip("-").isdigit():
                raise TokenizerError(
                    f"{where}: expected '<piece> <count>', got {line[:60]!r} (tokenizer.vocab_file must be a "
                    "fairseq dictionary: one piece and its integer count per line, separated by one space)"
                )
            piece = fields[0]
            if piece in seen and not overwrite:
                first = "is reserved for ids 0-3" if seen[piece] == "reserved" else f"repeats line {seen[piece]}"
                raise TokenizerError(f"{where}: the piece {piece!r} {first} (tokenizer.vocab_file; mark a "
                                     f"deliberate repeat with {FAIRSEQ_OVERWRITE} as fairseq does)")
            seen[piece] = number
            pieces.append(piece)
    if not pieces:
        raise TokenizerError(f"{path}: the dictionary is empty (tokenizer.vocab_file)")
    return pieces


TRAINING_TEXT_BYTES = 64 << 20  # sentencepiece's trainer holds ~20 bytes per character it samples: ~1.4 GB


def corpus_line_count(corpus_file: Path) -> int:
    """Lines of a text file, the last one with or without its newline."""
    lines, last = 0, b"\n"
    with open(corpus_file, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def training_sample_lines(
    corpus_file: Path, max_lines: int, budget: int = TRAINING_TEXT_BYTES, lines: int | None = None
) -> int:
    """`max_lines`, or fewer when that many lines of average length would pass `budget` bytes (the trainer's
    memory grows with the characters it reads)."""
    size = Path(corpus_file).stat().st_size
    if size <= budget:
        return max_lines
    lines = corpus_line_count(corpus_file) if lines is None else lines
    return max(1, min(max_lines, int(budget / (size / max(lines, 1)))))


def sampled_lines(corpus_file: Path, count: int, seed: int, lines: int | None = None) -> Iterator[str]:
    """`count` lines drawn by `seed`, in corpus order (all when fewer). Not sentencepiece's own sampling: its
    wheel seeds that from the OS, so each process trained a different model."""
    lines = corpus_line_count(corpus_file) if lines is None else lines
    chosen = iter(sorted(random.Random(seed).sample(range(lines), count)) if count < lines else range(lines))
    following = next(chosen, None)
    with open(corpus_file, "rb") as source:  # lines end at b"\n" alone, as sentencepiece counts them
        for number, line in enumerate(source):
            if following is None:
                return
            if number == following:
                yield line.rstrip(b"\n").decode("utf-8")
                following = next(chosen, None)


def train_sentencepiece(corpus_file: Path, params: TokenizerParams, seed: int = 0) -> bytes:
    """The serialized model trained on the corpus, or on `sampled_lines` of a large one: the same corpus, params
    and seed give the same model in every process. Errors in params' terms."""
    lines = corpus_line_count(corpus_file)
    sample_lines = training_sample_lines(corpus_file, params.max_training_lines, lines=lines)
    if lines <= sample_lines:  # sentencepiece's sampler keeps every line and draws nothing
        source = {"input": str(corpus_file), "input_sentence_size": sample_lines, "shuffle_input_sentence": True}
    else:
        source = {"sentence_iterator": sampled_lines(corpus_file, sample_lines, seed, lines), "input_sentence_size": 0}
    spm.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            **source, model_writer=model, vocab_size=params.vocab_size, model_type=params.model_type,
            character_coverage=params.character_coverage, normalization_rule_name=params.normalization,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, control_symbols=[MASK_PIECE],
            num_threads=2, minloglevel=2,
        )
    except RuntimeError as exc:
        message, size = str(exc), f"tokenizer.vocab_size={params.vocab_size}"
        if most := re.search(r"value <= (\d+)", message):
            raise TokenizerError(f"{size} is too large for this corpus: sentencepiece can make at most "
                                 f"{int(most.group(1)):,} pieces of it; lower tokenizer.vocab_size or add text") from None
        if least := re.search(r"smaller than required_chars\. \d+ vs (\d+)", message):
            raise TokenizerError(
                f"{size} is too small for this corpus: its characters and the special pieces need at least "
                f"{int(least.group(1)):,}; raise tokenizer.vocab_size (or lower tokenizer.character_coverage)"
            ) from None
        if "Vocabulary size" in message or "vocab_size" in message:
            raise TokenizerError(f"{size} is too large for this corpus ({message.strip()}); "
                                 "lower tokenizer.vocab_size") from None
        raise TokenizerError(f"sentencepiece training on {corpus_file} failed: {message}") from None
    return model.getvalue()


def existing_tokenizer(params: TokenizerParams) -> Tokenizer | None:
    """The tokenizer named by tokenizer.model_file / vocab_file, or None when one must be trained."""
    segmenter = None
    if params.model_file:
        path = resolve_input(params.model_file, "tokenizer.model_file")
        segmenter = SentencePieceTokenizer(path.read_bytes(), f"{path} (tokenizer.model_file)")
    if params.vocab_file:
        path = resolve_input(params.vocab_file, "tokenizer.vocab_file")
        return DictionaryTokenizer(read_fairseq_dictionary(path), segmenter)
    return segmenter


def save_tokenizer(tokenizer: Tokenizer, directory: Path) -> None:
    """The files `load_tokenizer` needs, plus a readable `vocab.txt` (id, piece)."""
    segmenter = tokenizer if isinstance(tokenizer, SentencePieceTokenizer) else tokenizer.segmenter
    if segmenter is not None:
        (directory / MODEL_FILE).write_bytes(segmenter.model_bytes)
    if isinstance(tokenizer, DictionaryTokenizer):
        pieces = tokenizer.entries[len(DICTIONARY_SPECIALS):]
        (directory / DICTIONARY_FILE).write_text("".join(f"{p} 1\n" for p in pieces), encoding="utf-8")
    lines = (f"{index}\t{piece}" for index, piece in enumerate(tokenizer.pieces()))
    (directory / VOCAB_LISTING).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _folder(directory: str | Path) -> Path:
    """A tokenizer's folder, given it or a file inside it."""
    directory = Path(directory)
    return directory.parent if directory.is_file() else directory


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """The tokenizer the tokenize stage used (pass its output directory, or a file inside it)."""
    directory = _folder(directory)
    model, dictionary = directory / MODEL_FILE, directory / DICTIONARY_FILE
    segmenter = SentencePieceTokenizer(model.read_bytes(), str(model)) if model.is_file() else None
    if dictionary.is_file():
        return DictionaryTokenizer(read_fairseq_dictionary(dictionary), segmenter)
    if segmenter is None:
        raise MissingOutputError(f"{directory}: no tokenizer found (run the tokenize stage: {how_to_produce(directory)})")
    return segmenter


def tokenizer_fingerprint(directory: str | Path) -> str:
    """sha256 of the files that define the id space: every checkpoint records it."""
    directory, digest = _folder(directory), hashlib.sha256()
    for name in (MODEL_FILE, DICTIONARY_FILE):
        if (directory / name).is_file():
            digest.update(name.encode() + b"\0" + (directory / name).read_bytes())
    return digest.hexdigest()


def check_trained_with(payload: dict, checkpoint: str | Path, tokenizer: Tokenizer, directory: str | Path) -> None:
    """The checkpoint was trained with this tokenizer, or one line says not; one that records none (imported) must
    at least hold every id the tokenizer gives."""
    recorded = payload.get("tokenizer_sha256")
    found = tokenizer_fingerprint(directory) if recorded is not None else None
    if recorded != found:
        raise TokenizerError(
            f"{checkpoint} was trained with another tokenizer than the one in {directory} (sha256 {recorded[:12]} "
            f"against {found[:12]}): {_why_another_tokenizer(_folder(directory))}"
        )
    vocab_size = payload["model_config"]["vocab_size"]
    if tokenizer.vocab_size > vocab_size:
        raise TokenizerError(
            f"{checkpoint} knows {vocab_size} ids but the tokenizer in {directory} gives {tokenizer.vocab_size}: it "
            "was trained with another tokenizer; pass the tokenizer it was trained with"
        )


def _why_another_tokenizer(directory: Path) -> str:
    """The likeliest cause: an empty file, or the pipeline's own tokenizer made anew."""
    for name in (MODEL_FILE, DICTIONARY_FILE):
        if (directory / name).is_file() and (directory / name).stat().st_size == 0:
            return f"{directory / name} is empty; pass the folder of the tokenizer it was trained with"
    if directory.resolve() == TOKENIZED.resolve():
        return ("the tokenize stage ran again since it was trained; run the pipeline again so the model matches, or "
                "pass the tokenizer it was trained with")
    return "pass the folder of the tokenizer it was trained with"


def id_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def encode_stream(
    tokenizer: Tokenizer, lines: Iterable[str], pieces: bool = False, add_eos: bool = True, chunk_size: int = 4096
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(flat ids, lengths) per chunk of lines, each framed BOS + pieces [+ EOS]."""
    dtype, tail = id_dtype(tokenizer.vocab_size), [tokenizer.eos_id] if add_eos else []
    lines = iter(lines)
    while batch := list(itertools.islice(lines, chunk_size)):
        encoded = [tokenizer.pieces_to_ids(t) for t in batch] if pieces else tokenizer.encode_batch(batch)
        yield frame(encoded, dtype, tokenizer.bos_id, tail)


def frame(encoded: list[list[int]], dtype: np.dtype, bos_id: int, tail: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(flat ids, lengths) of BOS + ids [+ tail] per text, built with numpy."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)) + 1 + len(tail)
    flat = np.empty(int(lengths.sum()), dtype=dtype)
    ends = np.cumsum(lengths)
    body = np.ones(flat.size, dtype=bool)
    body[ends - lengths] = False
    flat[ends - lengths] = bos_id
    if tail:
        body[ends - 1] = False
        flat[ends - 1] = tail[0]
    flat[body] = np.fromiter(itertools.chain.from_iterable(encoded), dtype=dtype, count=int(body.sum()))
    return flat, lengths


def encode_documents(
    tokenizer: Tokenizer, texts: Iterable[str], add_eos: bool = True, pieces: bool = False, chunk_size: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Encode texts as BOS + pieces (+ EOS); returns (flat ids, offsets of length n+1)."""
    chunks = list(encode_stream(tokenizer, texts, pieces, add_eos, chunk_size))
    flat = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, id_dtype(tokenizer.vocab_size))
    lengths = np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0, np.int64)
    return flat, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def encode_for_classification(
    tokenizer: Tokenizer, texts: Iterable[str], pieces: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """BOS + pieces, no EOS: the pooled last token must be the text's own last piece (in the packed corpus EOS
    learns nothing of the text; dropping it gave +2-3 points)."""
    return encode_documents(tokenizer, texts, add_eos=False, pieces=pieces)


def real_mask_id(mask_id: int | None, unk_id: int) -> int | None:
    """`mask_id` when it names a real `<mask>` piece (only a tokenizer trained here has one), else None."""
    return None if mask_id is None or mask_id == unk_id else mask_id


def mask_id_of(tokenizer: Tokenizer) -> int | None:
    return real_mask_id(tokenizer.piece_id(MASK_PIECE), tokenizer.unk_id)
