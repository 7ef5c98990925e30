"""Clause pairs (`data/clauses.py`): which training pairs are cut, what is added, and that nothing held out leaks."""

import pandas as pd

from lmtransfer.translation.data.clauses import add_clause_pairs, clause_pieces, short_test_pairs, split_clauses


def test_split_clauses_cuts_after_clause_punctuation_and_closing_quotes():
    assert split_clauses("God saw the light. God divided it; and it was so: good!") == [
        "God saw the light.", "God divided it;", "and it was so:", "good!"]
    assert split_clauses('He said, "Go." Then he left.') == ['He said, "Go."', "Then he left."]
    assert split_clauses("No stop inside 3.5 or a,b") == ["No stop inside 3.5 or a,b"]


def test_a_pair_is_cut_only_when_both_sides_split_alike_with_like_lengths():
    pieces = clause_pieces("God saw the light, and saw that it was good. God divided the light from the darkness.",
                           "Dieu vit que la lumière était bonne; et Dieu sépara la lumière d'avec les ténèbres.")
    assert pieces == [
        ("God saw the light, and saw that it was good.", "Dieu vit que la lumière était bonne;"),
        ("God divided the light from the darkness.", "et Dieu sépara la lumière d'avec les ténèbres.")]
    assert clause_pieces("One clause only.", "Une seule.") == []
    assert clause_pieces("Two. Clauses here.", "Une seule proposition ici.") == []
    # the same count of pieces, but the boundary fell elsewhere: the first French piece is three times longer
    assert clause_pieces("Go. Then come back to the house of your father and stay there.",
                         "Va, puis reviens à la maison de ton père. Et restes-y.") == []


def test_added_pairs_follow_the_whole_pairs_and_never_hold_a_held_out_text():
    train = pd.DataFrame({"source": ["He went. She stayed.", "He went.", "Come. Go."],
                          "target": ["Il partit. Elle resta.", "Il partit.", "Viens. Va."],
                          "book": [1, 1, 2]})
    table, counts = add_clause_pairs(train, held_out=["Va."])
    assert list(table.columns) == ["source", "target"]
    assert table.iloc[:3].to_dict("list") == train[["source", "target"]].to_dict("list")  # whole pairs first, kept
    # "He went." / "Il partit." is already a pair; "Go." / "Va." would leak a held-out text
    assert table.iloc[3:].values.tolist() == [["She stayed.", "Elle resta."], ["Come.", "Viens."]]
    assert counts == {"clause_pairs_added": 2, "clause_pieces_also_in_valid_or_test": 1}


def test_prepare_adds_clause_pairs_to_train_only_and_counts_them(tmp_path):
    from lmtransfer.translation.prepare_stage import load_parallel, read_pairs, write_parallel

    from shipped import shipped

    rows = [f"He went to town {i}. She stayed home {i}.\tIl alla en ville {i}. Elle resta chez elle {i}."
            for i in range(40)]
    (tmp_path / "pairs.tsv").write_text("source\ttarget\n" + "\n".join(rows) + "\n", encoding="utf-8")
    params = {"source": "files", "train": str(tmp_path / "pairs.tsv"), "valid_fraction": 0.1, "test_fraction": 0.1}
    whole = load_parallel(shipped("data", "translation", **params, clause_pairs=False))
    cut = load_parallel(shipped("data", "translation", **params))
    n_train = len(whole.splits["train"])
    assert cut.clause_pairs == 2 * n_train and len(cut.splits["train"]) == 3 * n_train
    for name in ("valid", "test"):
        assert cut.splits[name].equals(whole.splits[name])  # held-out pairs stay whole verses
    assert cut.corpus == whole.corpus  # the pieces' text is in the corpus already, whole
    meta = write_parallel(cut, tmp_path / "prepared", {"source": "files"})
    assert meta["clause_pairs"] == 2 * n_train and meta["pairs"]["train"] == 3 * n_train
    written = read_pairs(tmp_path / "prepared", "train")
    for source in whole.splits["train"]["source"]:  # each whole pair is followed, somewhere, by its two pieces
        number = source.split()[-1].rstrip(".")
        assert {f"He went to town {number}.", f"She stayed home {number}."} <= set(written["source"])


def test_the_short_test_set_holds_no_text_training_saw():
    test = pd.DataFrame({"source": ["And it was so. The end came.", "And it was so. Night fell.", "One."],
                         "target": ["Et cela fut ainsi. La fin vint.", "Et cela fut ainsi. La nuit tomba.", "Un."]})
    train = pd.DataFrame({"source": ["Day came.", "Night fell."], "target": ["Et cela fut ainsi.", "Le soir vint."]})
    # "And it was so." has a training text as its target, "Night fell." is a training source; the repeat goes
    assert short_test_pairs(test, train) == [("The end came.", "La fin vint.")]
