"""Sentencepiece training, special ids, flat id arrays, and the tokenize stage's files."""

import random
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import sentencepiece as spm

from lmtransfer.classification.data.prepare import write_prepared
from lmtransfer.classification.data.raw import RawData
from lmtransfer.core.errors import TokenizerError
from lmtransfer.core.io import read_json
from lmtransfer.data.prepared import SPLITS, read_split
from lmtransfer.pretraining.generation import encode_prompt
from lmtransfer.tokens.encode_splits import tokenize_prepared
from lmtransfer.tokens.id_files import load_labeled_split, write_corpus_part
from lmtransfer.tokens.tokenizer import (
    BOS_ID,
    EOS_ID,
    MASK_PIECE,
    MODEL_FILE,
    PAD_ID,
    UNK_ID,
    DictionaryTokenizer,
    SentencePieceTokenizer,
    encode_documents,
    frame,
    id_dtype,
    load_tokenizer,
    sampled_lines,
    train_sentencepiece,
    training_sample_lines,
)

from shipped import shipped

WORDS = (
    "the a an film movie was is good bad great story plot actor actress scene funny dull long short and but "
    "very director music camera script ending beginning character hero villain love hate boring exciting slow "
    "fast brilliant awful simple clever dark bright quiet loud sad happy strange normal"
).split()
VOCAB = 72


def _lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(_lines(400, seed=0)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(corpus_file):
    return SentencePieceTokenizer(train_sentencepiece(corpus_file, shipped("tokenizer", vocab_size=VOCAB)))


def test_trained_tokenizer_has_the_fixed_special_ids_and_keeps_sentencepiece_ids_and_pieces(tokenizer):
    sp = tokenizer.sp
    assert tokenizer.vocab_size == sp.get_piece_size() == VOCAB  # nothing appended
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tokenizer.special_ids() == {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
    mask_id = sp.piece_to_id(MASK_PIECE)
    assert mask_id not in (PAD_ID, UNK_ID, BOS_ID, EOS_ID) and sp.id_to_piece(mask_id) == MASK_PIECE
    assert sp.is_control(mask_id) and tokenizer.encode("the film was good") == sp.encode("the film was good")
    pieces = sp.encode("the film was good", out_type=str)  # pieces map to ids without retokenizing
    assert tokenizer.pieces_to_ids(" ".join(pieces)) == sp.encode("the film was good")
    assert tokenizer.pieces_to_ids("\u2581zzzqqq") == [UNK_ID]


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_either_model_type_is_reproducible_and_a_too_large_vocab_size_names_the_key(corpus_file, model_type):
    params = shipped("tokenizer", vocab_size=VOCAB, model_type=model_type)
    model = train_sentencepiece(corpus_file, params, seed=1)
    assert model == train_sentencepiece(corpus_file, params, seed=1)
    trained = spm.SentencePieceProcessor(model_proto=model)
    assert trained.get_piece_size() == VOCAB and trained.bos_id() == BOS_ID
    with pytest.raises(TokenizerError, match=r"tokenizer\.vocab_size"):
        train_sentencepiece(corpus_file, params.model_copy(update={"vocab_size": 5000}))


def test_a_user_model_without_padding_gets_one_appended(corpus_file):
    spm.SentencePieceTrainer.train(input=str(corpus_file), model_prefix=str(corpus_file.parent / "plain"),
                                   vocab_size=VOCAB, minloglevel=2)  # sentencepiece's defaults: unk 0, bos 1, eos 2
    plain = SentencePieceTokenizer((corpus_file.parent / "plain.model").read_bytes())
    assert (plain.unk_id, plain.bos_id, plain.eos_id) == (0, 1, 2)
    assert plain.pad_id == VOCAB and plain.vocab_size == VOCAB + 1
    assert plain.decode([plain.bos_id, *plain.encode("the film"), plain.pad_id]) == "the film"


def test_encode_documents_frames_each_document_with_bos_and_eos_in_one_chunk_or_many(tokenizer):
    texts = ["the film was good", "bad", "a very long and boring story about a hero", "", "sad music"]
    ids, offsets = encode_documents(tokenizer, texts)
    assert ids.dtype == np.uint16 and ids.ndim == 1 and offsets.dtype == np.int64
    assert offsets.shape == (len(texts) + 1,) and offsets[0] == 0 and offsets[-1] == ids.size
    for index, text in enumerate(texts):
        document = ids[offsets[index] : offsets[index + 1]]
        assert document[0] == BOS_ID and document[-1] == EOS_ID
        assert not np.isin(document[1:-1], [PAD_ID, BOS_ID, EOS_ID]).any()
        assert tokenizer.sp.decode(document[1:-1].tolist()) == text
    texts = _lines(300, seed=7) + ["", "   "]
    whole = encode_documents(tokenizer, texts, chunk_size=10_000)
    for size in (1, 3, 64):
        chunked = encode_documents(tokenizer, iter(texts), chunk_size=size)  # a stream, as the corpus is
        assert all(np.array_equal(a, b) for a, b in zip(whole, chunked))
    assert [part.tolist() for part in encode_documents(tokenizer, [])] == [[], [0]]


@pytest.mark.parametrize("tail", [[], [EOS_ID]])
@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_frame_gives_the_ids_of_framing_each_text_one_id_at_a_time(tail, dtype):
    rng = random.Random(0)
    encoded = [[rng.randrange(5, 60000) for _ in range(rng.choice([0, 1, 2, 7, 30]))] for _ in range(200)]
    flat, lengths = frame(encoded, np.dtype(dtype), BOS_ID, tail)
    one_at_a_time = np.array([i for ids in encoded for i in (BOS_ID, *ids, *tail)], dtype=dtype)
    assert flat.dtype == dtype and np.array_equal(flat, one_at_a_time)
    assert lengths.tolist() == [len(ids) + 1 + len(tail) for ids in encoded]
    assert frame([], np.dtype(dtype), BOS_ID, tail)[0].size == 0
    assert id_dtype(65_536) == np.uint16 and id_dtype(65_537) == np.int32


@pytest.mark.parametrize("sizes", [[5, 0, 17, 1], [], [0]])
def test_write_corpus_part_streams_chunks_into_the_npy_np_save_writes(tmp_path, sizes):
    rng = np.random.default_rng(0)
    chunks = [rng.integers(0, 4000, size).astype(np.uint16) for size in sizes]
    out = tmp_path / "out"
    out.mkdir()
    total = write_corpus_part(out, "train", iter(chunks), np.dtype(np.uint16))
    whole = np.concatenate(chunks) if chunks else np.zeros(0, np.uint16)
    np.save(tmp_path / "saved.npy", whole)
    assert total == whole.size and (out / "corpus_train.npy").read_bytes() == (tmp_path / "saved.npy").read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["corpus_train.npy"]
    assert np.array_equal(np.load(out / "corpus_train.npy", mmap_mode="r"), whole)


def test_the_training_sample_is_capped_by_bytes_as_well_as_lines_and_drawn_by_the_seed(tmp_path):
    """sentencepiece's memory follows the characters it samples: long lines mean fewer of them."""
    short, long = tmp_path / "short.txt", tmp_path / "long.txt"
    short.write_text("ab cd\n" * 1000)  # 6,000 bytes
    long.write_text(("x" * 99 + "\n") * 1000)  # 100,000 bytes, 100 per line
    assert training_sample_lines(short, 500, budget=10_000) == 500  # within the budget: the line cap alone
    assert training_sample_lines(long, 500, budget=10_000) == 100  # 10,000 bytes / 100 per line
    assert training_sample_lines(long, 50, budget=10_000) == 50 and training_sample_lines(long, 500, budget=10) == 1
    corpus = tmp_path / "corpus.txt"  # the sample: drawn by the seed, kept in the corpus order
    corpus.write_bytes(b"".join(b"line %d\n" % n for n in range(99)) + b"carriage\rreturn")  # last line: no newline
    sample = list(sampled_lines(corpus, 10, seed=0))
    numbers = [int(line.split()[1]) for line in sample if line.startswith("line")]
    assert len(sample) == 10 and numbers == sorted(set(numbers))
    assert sample == list(sampled_lines(corpus, 10, seed=0)) != list(sampled_lines(corpus, 10, seed=1))
    every = list(sampled_lines(corpus, 100, seed=0))
    assert every == list(sampled_lines(corpus, 500, seed=3)) == [f"line {n}" for n in range(99)] + ["carriage\rreturn"]


SAMPLED_TRAINING = """
import hashlib, sys
from pathlib import Path
from lmtransfer.core.config import TokenizerParams
from lmtransfer.tokens.tokenizer import train_sentencepiece
params = TokenizerParams.model_validate_json(sys.argv[2])
print(hashlib.sha256(train_sentencepiece(Path(sys.argv[1]), params)).hexdigest())
"""


@pytest.mark.slow  # three processes
def test_a_corpus_sampled_for_training_gives_the_same_model_in_every_process(tmp_path):
    """Above tokenizer.max_training_lines the model trains on a sample: drawn by the seed, not an OS-seeded one."""
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(rng.choices(words, k=8)) + "\n" for _ in range(3000)), encoding="utf-8")
    params = shipped("tokenizer", vocab_size=300, max_training_lines=1000)
    command = [sys.executable, "-c", SAMPLED_TRAINING, str(corpus), params.model_dump_json()]
    assert len({subprocess.run(command, capture_output=True, text=True, check=True).stdout for _ in range(3)}) == 1


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenize")
    sizes = {"train": 40, "valid": 8, "test": 12}
    splits = {name: pd.DataFrame({"text": [f"{line} {i}" for i, line in enumerate(_lines(n, seed=n))],
                                  "label": ["neg", "pos"] * (n // 2)}) for name, n in sizes.items()}
    prepared, out = root / "prepared", root / "tokenized"
    write_prepared(RawData(splits=splits, corpus=_lines(320, seed=2)), shipped("data", corpus_valid_fraction=0.05),
                   prepared, source="files")
    return prepared, out, tokenize_prepared(prepared, out, shipped("tokenizer", vocab_size=VOCAB), seed=0), sizes


def test_tokenize_prepared_writes_the_files_and_a_meta_of_the_vocabulary_and_counts(tokenized):
    prepared, out, meta, sizes = tokenized
    prepared_corpus, corpus = prepared.with_name("prepared_corpus"), out.with_name("tokenized_corpus")
    names = {MODEL_FILE, "vocab.txt", "meta.json"} | {f"{name}.npz" for name in SPLITS}
    assert {p.name for p in out.iterdir()} == names  # the corpus is not here: a fine-tune never reads it
    assert {p.name for p in corpus.iterdir()} == {"corpus_train.npy", "corpus_valid.npy", "meta.json"}
    on_disk, corpus_meta = read_json(out / "meta.json"), read_json(corpus / "meta.json")
    assert set(on_disk["tokens"]) == set(SPLITS) and set(corpus_meta["tokens"]) == {"corpus_train", "corpus_valid"}
    for key in ("tokens", "unknown_rate"):  # the stage's log shows both
        assert meta[key] == {**corpus_meta[key], **on_disk[key]}
    assert {k: v for k, v in meta.items() if k not in ("tokens", "unknown_rate", "timings")} == {
        k: v for k, v in on_disk.items() if k not in ("tokens", "unknown_rate")}
    assert "timings" not in on_disk and "timings" not in corpus_meta  # wall-clock figures stay out of the outputs
    assert meta["timings"]["corpus_tokens"] == sum(corpus_meta["tokens"].values())
    assert meta["timings"]["corpus_bytes"] == sum((prepared_corpus / f"corpus_{p}.txt").stat().st_size
                                                  for p in ("train", "valid"))
    assert set(meta["timings"]) == {"train_seconds", "encode_seconds", "corpus_bytes", "corpus_tokens"}
    assert len((out / "vocab.txt").read_text(encoding="utf-8").splitlines()) == VOCAB
    assert load_tokenizer(out).model_bytes == load_tokenizer(out / MODEL_FILE).model_bytes
    assert meta["vocab_size"] == VOCAB and meta["scheme"] == "sentencepiece"
    assert (meta["pad_id"], meta["unk_id"], meta["bos_id"], meta["eos_id"]) == (0, 1, 2, 3)
    sp = spm.SentencePieceProcessor(model_file=str(out / MODEL_FILE))
    assert meta["mask_id"] == sp.piece_to_id(MASK_PIECE) and meta["label_names"] == ["neg", "pos"]
    for name in ("corpus_train", "corpus_valid"):
        ids = np.load(corpus / f"{name}.npy")
        assert ids.dtype == np.uint16 and meta["tokens"][name] == ids.size and meta["unknown_rate"][name] == 0.0
        lines = (prepared_corpus / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        assert int((ids == BOS_ID).sum()) == int((ids == EOS_ID).sum()) == len(lines) > 0
    assert meta["examples"] == sizes


def test_tokenized_splits_load_and_match_the_prepared_texts(tokenized):
    prepared, out, meta, _ = tokenized
    sp = spm.SentencePieceProcessor(model_file=str(out / MODEL_FILE))
    for name in SPLITS:
        split = load_labeled_split(out, name)
        table = read_split(prepared, name)
        assert len(split) == len(table) == meta["examples"][name] and split.offsets.shape == (len(split) + 1,)
        assert split.offsets[-1] == split.ids.size == meta["tokens"][name]
        assert np.array_equal(split.labels, table["label"].to_numpy())
        for index in range(len(split)):
            sequence = split.sequence(index)
            assert len(sequence) == split.lengths()[index]
            assert sequence[0] == BOS_ID and EOS_ID not in sequence  # no EOS: the pooled last token is the text's
            assert sp.decode(sequence[1:].tolist()) == table["text"][index]


def test_loading_an_empty_or_missing_split_names_the_file(tmp_path):
    np.savez(tmp_path / "valid.npz", ids=np.zeros(0, dtype=np.uint16), offsets=np.zeros(1, dtype=np.int64),
             labels=np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="valid.npz: the 'valid' split is empty"):
        load_labeled_split(tmp_path, "valid")
    with pytest.raises(FileNotFoundError, match="test.npz"):
        load_labeled_split(tmp_path, "test")


def test_prompts_are_read_as_pieces_when_only_a_dictionary_is_given():
    dictionary = DictionaryTokenizer(["\u2581Ce", "\u2581livre", "\u2581est"])
    with pytest.raises(TokenizerError, match="tokenizer.model_file"):
        dictionary.encode("Ce livre")
    assert encode_prompt(dictionary, "\u2581Ce \u2581livre \u2581inconnu") == [0, 4, 5, 3]
    assert dictionary.decode([0, 4, 5, 6, 2]) == "Ce livre est"
